"""The one rule for node names (domain/reclaim/identity.py, docs/reclaim.md#node-identity):
what is a node's name, and the canonical id keeper keeps for it, which always fits a
workflow id, a search attribute and the reclaim memory's column (NODE_ID_RE)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from keeper.domain.reclaim.identity import NodeNameError, canonical_node
from keeper.domain.reclaim.models import NODE_ID_RE

L63 = "a" * 63
L64 = "a" * 64


def _name(length: int, label: int = 63) -> str:
    """A dotted name of `length` characters whose labels have at most `label` characters."""
    labels: list[str] = []
    left = length
    while left > 0:
        take = min(label, left)
        labels.append("x" * take)
        left -= take + 1  # the dot before the next label
    name = ".".join(labels)
    assert len(name) == length, (len(name), length)
    return name


ACCEPTED = [
    ("gpu-node-07", "gpu-node-07"),
    ("GPU-NODE-07", "gpu-node-07"),
    ("Gpu-Node-07.Cluster.Local", "gpu-node-07"),
    ("gpu-node-07.cluster.local.", "gpu-node-07"),  # the root's dot
    ("  gpu-node-07 ", "gpu-node-07"),
    ("7gpu", "7gpu"),  # RFC 1123 lets a label start with a digit
    ("0042", "0042"),
    ("gpu_node_07", "gpu_node_07"),  # spurd -N takes any string; underscores are kept
    ("a", "a"),
    (L63, L63),
    (f"{L63}.rack1", L63),
    ("a" * 63 + "." + "b" * 62 + ".c", L63),  # 128 characters, dotted
    (_name(253), "x" * 63),  # the longest name
    (_name(253) + ".", "x" * 63),  # the root's dot does not count
    ("10.0.0.7", "10.0.0.7"),
    ("10.0.0.7.", "10.0.0.7"),
    ("fd00::7", "fd00::7"),
    ("FD00:0:0::7", "fd00::7"),  # one address, one id
    ("2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"),
    ("fd00:0:0:0:0:0:0:7", "fd00::7"),
    ("::1", "::1"),
]


@pytest.mark.parametrize(("name", "canonical"), ACCEPTED, ids=[n[:40] for n, _ in ACCEPTED])
def test_a_host_name_or_address_is_a_node(name: str, canonical: str) -> None:
    node = canonical_node(name)
    assert node == canonical
    assert NODE_ID_RE.match(node), node


REFUSED = [
    ("", "must not be empty"),
    ("  ", "must not be empty"),
    (".", "must not be empty"),
    (L64, "64 characters, at most 63"),
    ("a" * 128, "128 characters, at most 63"),  # accepted before, and started a quarantine
    ("a" * 129, "129 characters, at most 63"),  # an internal error before
    (f"gpu.{L64}", "64 characters, at most 63"),
    (_name(254), "254 characters, at most 253"),
    (_name(254) + ".", "254 characters, at most 253"),
    ("a" * 300, "300 characters, at most 253"),
    ("-gpu", "starts or ends with a hyphen"),
    ("gpu-", "starts or ends with a hyphen"),
    ("gpu.-rack", "starts or ends with a hyphen"),
    ("gpu-.rack", "starts or ends with a hyphen"),
    ("gpu..rack", "an empty label"),
    ("gpu.rack..", "an empty label"),
    (".gpu", "an empty label"),
    ("gpu node", "letters, digits"),
    ("gpu/node", "letters, digits"),
    ("a;b", "letters, digits"),
    ("név", "letters, digits"),
    ("\u212a8s-node", "letters, digits"),  # the Kelvin sign lower-cases to an ASCII k
    ("gpu:node", "letters, digits"),  # not an IPv6 address
    ("[fd00::7]", "letters, digits"),
    ("fe80::1%eth0", "letters, digits"),
    ("999.1.1.1", "not an IPv4 address"),
    ("10.0.0.256", "not an IPv4 address"),
    ("1.2.3", "not an IPv4 address"),
    ("gpu\n07", "letters, digits"),
]


@pytest.mark.parametrize(("name", "says"), REFUSED, ids=[repr(n)[:40] for n, _ in REFUSED])
def test_anything_else_is_refused_saying_why(name: str, says: str) -> None:
    with pytest.raises(NodeNameError) as refused:
        canonical_node(name)
    message = str(refused.value)
    assert says in message, message
    # A long name is shown cut, never a 300-character line.
    assert len(message) < 400, message


def test_aliases_map_names_but_never_make_a_bad_one_good() -> None:
    aliases = {"gpu-07-ib.fabric": "gpu-node-07"}
    assert canonical_node("GPU-07-IB.fabric", aliases) == "gpu-node-07"
    with pytest.raises(NodeNameError):
        canonical_node("a" * 129, {"a" * 129: "gpu-node-07"})


@given(st.one_of(st.text(max_size=300), st.text(alphabet="aZ09-_.:", max_size=300)))
@example("a" * 129)
@example("a" * 100)
@example("0:" + "a" * 80)
def test_every_canonical_id_fits_the_memory_and_a_workflow_id(name: str) -> None:
    try:
        node = canonical_node(name)
    except NodeNameError:
        return
    assert NODE_ID_RE.fullmatch(node), node
    assert len(node) <= 63


@given(
    st.lists(
        st.from_regex(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?", fullmatch=True),
        min_size=1,
        max_size=6,
    )
)
def test_every_rfc_1123_name_is_a_node_whose_id_is_its_first_label(labels: list[str]) -> None:
    name = ".".join(labels)
    if len(name) > 253 or (len(labels) > 1 and labels[-1].isdigit()):
        return
    assert canonical_node(name) == labels[0].lower()
