"""Canonical node identity: one node, one id, however its name is spelled.

spur compares node names as raw strings, so `gpu-node-07`, `GPU-NODE-07` and
`gpu-node-07.cluster.local` are three nodes to it, and a node running a job could read as
"not in the job's allocation" and be killed. keeper resolves every name to one canonical id
before any comparison, with one rule (documented in docs/reclaim.md#node-identity):

1. trim surrounding whitespace and a trailing dot, then lower-case (DNS names are
   case-insensitive);
2. a dotted name keeps its first label (the short host name), unless the whole name is an IP
   address, which is kept as it is;
3. an alias table from settings (`reclaim.node_aliases`; its keys are compared after step 1,
   whole or short) maps a name to the id it belongs to, for nodes whose names differ by more
   than case or domain.

An empty name has no identity: nothing is decided for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import hostlist

_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_VALID = re.compile(r"^[a-z0-9_][a-z0-9_.:-]*$")


class NodeNameError(ValueError):
    """A name that cannot be a node's."""


def _basic(name: str) -> str:
    return name.strip().rstrip(".").lower()


def canonical_node(name: str, aliases: Mapping[str, str] | None = None) -> str:
    """The canonical id of the node named `name`."""
    basic = _basic(name)
    if not basic:
        raise NodeNameError("a node name must not be empty")
    if not _VALID.match(basic):
        raise NodeNameError(f"{name!r} is not a host name")
    short = _short(basic)
    if aliases:
        table = normalized_aliases(aliases)
        for key in (basic, short):
            if key in table:
                return table[key]
    return short


def _short(basic: str) -> str:
    return basic if _IPV4.match(basic) or ":" in basic else basic.split(".", 1)[0]


def normalized_aliases(aliases: Mapping[str, str]) -> dict[str, str]:
    """The alias table keyed by each name whole and short (after step 1), values canonical."""
    table: dict[str, str] = {}
    for key, value in aliases.items():
        target = canonical_node(value)
        table.setdefault(_short(_basic(key)), target)
        table[_basic(key)] = target
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
