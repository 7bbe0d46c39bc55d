"""Canonical node identity: one node, one id, however its name is spelled.

spur compares node names as raw strings, so `gpu-node-07`, `GPU-NODE-07` and
`gpu-node-07.cluster.local` are three nodes to it, and a node running a job could read as
"not in the job's allocation" and be killed. keeper resolves every name to one canonical id
before any comparison, with one rule (documented in docs/reclaim.md#node-identity), the same
at every entrance (the tap's RegisterAgent and Heartbeat, `POST /report`, the CLI's NODE):

1. trim surrounding whitespace and one trailing dot (the DNS root);
2. the rest must be an IP address (v4 dotted quad, or v6) or a host name as RFC 1123 has
   it: at most 253 characters, dot-separated labels of 1 to 63 ASCII letters, digits and
   hyphens, no label starting or ending with a hyphen, and not the dotted form of a number
   that is no IPv4 address (`999.1.1.1`). One departure: underscores count as letters,
   since spurd takes its name from `-N/--hostname` or the OS, and clusters with Slurm
   heritage name nodes `node_01`;
3. lower-case (DNS names are case-insensitive); an IP address is written the one way
   Python's `ipaddress` writes it (`FD00:0::7` is `fd00::7`);
4. a dotted name keeps its first label (the short host name), an IP address stays whole;
5. an alias table from settings (`reclaim.node_aliases`; its keys are compared after step
   3, whole or short) maps a name to the id it belongs to, for nodes whose names differ by
   more than case or domain. Aliases never make a bad name good.

So a canonical id is at most 63 characters (a label, an alias's own canonical id) or an
address (at most 39), and always fits NODE_ID_RE (domain/reclaim/models.py): a workflow id,
a search attribute and the reclaim memory take it as it is. Anything else raises
NodeNameError, saying why: nothing is decided for it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping

import hostlist

MAX_NAME = 253
MAX_LABEL = 63
_LABEL_CHARS = re.compile(r"[A-Za-z0-9_-]+")
_IPV4_FORM = re.compile(r"[0-9]+(\.[0-9]+)*")
RULE = (
    "a node is named by a host name (dot-separated labels of 1 to 63 letters, digits, "
    "hyphens or underscores, at most 253 characters) or an IP address"
)


class NodeNameError(ValueError):
    """A name that cannot be a node's."""


def _cut(text: str) -> str:
    """Quoted, control characters escaped, and cut: an error line stays short."""
    return repr(text) if len(text) <= 40 else f"{text[:32]!r}..."


def _shown(name: str) -> str:
    return _cut(name) if len(name) <= 40 else f"{_cut(name)} ({len(name)} characters)"


def _ip(trimmed: str) -> str | None:
    """The address written one way, when `trimmed` is an IP address."""
    if ":" not in trimmed and not _IPV4_FORM.fullmatch(trimmed):
        return None  # the common case, a host name, without parsing it as an address
    try:
        address = ipaddress.ip_address(trimmed)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        return None  # fe80::1%eth0 names an interface of this host, not a node
    return str(address).lower()


def _refusal(trimmed: str) -> str | None:
    """Why `trimmed` is no host name, or None when it is one."""
    if len(trimmed) > MAX_NAME:
        return f"it is {len(trimmed)} characters, at most {MAX_NAME}"
    labels = trimmed.split(".")
    for label in labels:
        if not label:
            return "it has an empty label (two dots in a row, or a leading dot)"
        if not label.isascii() or not _LABEL_CHARS.fullmatch(label):
            return "a label holds only letters, digits, hyphens or underscores (ASCII)"
        if len(label) > MAX_LABEL:
            return f"the label {_cut(label)} is {len(label)} characters, at most {MAX_LABEL}"
        if label.startswith("-") or label.endswith("-"):
            return f"the label {_cut(label)} starts or ends with a hyphen"
    if len(labels) > 1 and _IPV4_FORM.fullmatch(trimmed):
        return "it is written as an IPv4 address but is not an IPv4 address"
    return None


def _basic(name: str) -> str:
    """Steps 1 to 3: the name checked and lower-cased, whole; raises NodeNameError."""
    trimmed = name.strip().removesuffix(".")  # step 1
    if not trimmed:
        raise NodeNameError("a node name must not be empty")
    address = _ip(trimmed)
    if address is not None:
        return address
    why = _refusal(trimmed)
    if why is not None:
        raise NodeNameError(f"{_shown(name)} is not a host name: {why}; {RULE}")
    return trimmed.lower()


def canonical_node(name: str, aliases: Mapping[str, str] | None = None) -> str:
    """The canonical id of the node named `name`; NodeNameError when it is no node's name."""
    basic = _basic(name)
    short = _short(basic)
    if aliases:
        table = normalized_aliases(aliases)
        for key in (basic, short):
            if key in table:
                return table[key]
    return short


def _short(basic: str) -> str:
    # `basic` passed _basic: a colon or an all-number dotted form is an address.
    if ":" in basic or _IPV4_FORM.fullmatch(basic):
        return basic
    return basic.split(".", 1)[0]


def normalized_aliases(aliases: Mapping[str, str]) -> dict[str, str]:
    """The alias table keyed by each name whole and short (after step 3), values canonical."""
    table: dict[str, str] = {}
    for key, value in aliases.items():
        target = canonical_node(value)
        try:
            basic = _basic(key)
        except NodeNameError:
            continue  # no name resolves to it (settings refuse such a key)
        table.setdefault(_short(basic), target)
        table[basic] = target
    return table


def expand_nodelist(nodelist: str) -> list[str]:
    """spur's hostlist expression (`gpu-[01-03],cpu-9`) as the names it stands for."""
    if not nodelist.strip():
        return []
    try:
        return list(hostlist.expand_hostlist(nodelist))
    except hostlist.BadHostlist as err:
        raise NodeNameError(f"nodelist {nodelist!r} is not a hostlist: {err}") from None


def canonical_nodes(
    names: Iterable[str], aliases: Mapping[str, str] | None = None
) -> frozenset[str]:
    return frozenset(canonical_node(n, aliases) for n in names)
