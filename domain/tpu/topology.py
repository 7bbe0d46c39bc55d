"""How many VMs (hosts) a TPU node of a given accelerator type has.

The accelerator suffix counts TensorCores for v2/v3/v4/v5p (two per chip, four chips per
host) and chips for v5litepod/v6e (up to eight chips on a single host, four per host beyond
that). A request may override the rule with `vms_per_node` for types this table gets wrong.
"""

from __future__ import annotations

import re

ACCELERATOR_RE = re.compile(r"^(v2|v3|v4|v5p|v5litepod|v6e)-([1-9][0-9]*)$")

_CORES_PER_HOST = {"v2": 8, "v3": 8, "v4": 8, "v5p": 8}
_SINGLE_HOST_CHIPS = {"v5litepod": 8, "v6e": 8}
_CHIPS_PER_HOST = {"v5litepod": 4, "v6e": 4}
_SINGLE_HOST_SIZES = frozenset({1, 4, 8})


def topology_problem(accelerator_type: str) -> str | None:
    """Why an accelerator type names no real slice shape, or None when it does.

    | family                 | suffix counts | valid sizes                                  |
    |------------------------|---------------|----------------------------------------------|
    | v2, v3, v4, v5p        | TensorCores   | a multiple of 8 (whole hosts of 8 cores)     |
    | v5litepod, v6e         | chips         | 1, 4 or 8 (one host), or a multiple of 4 |
    """
    match = ACCELERATOR_RE.match(accelerator_type)
    if match is None:
        return (
            f"{accelerator_type!r} is not an accelerator type: expected <generation>-<size> "
            "with generation v2, v3, v4, v5p, v5litepod or v6e, e.g. v4-32"
        )
    family, size = match.group(1), int(match.group(2))
    if family in _CORES_PER_HOST:
        per_host = _CORES_PER_HOST[family]
        if size % per_host:
            return (
                f"{accelerator_type!r}: {family} sizes count TensorCores in whole hosts of "
                f"{per_host}, so the size must be a multiple of {per_host} (e.g. {family}-8, "
                f"{family}-32)"
            )
        return None
    if size <= _SINGLE_HOST_CHIPS[family]:
        if size not in _SINGLE_HOST_SIZES:
            return (
                f"{accelerator_type!r}: a single-host {family} has 1, 4 or 8 chips "
                f"(e.g. {family}-4, {family}-8)"
            )
        return None
    if size % _CHIPS_PER_HOST[family]:
        return (
            f"{accelerator_type!r}: a multi-host {family} has {_CHIPS_PER_HOST[family]} chips "
            f"per host, so the size must be a multiple of {_CHIPS_PER_HOST[family]} "
            f"(e.g. {family}-16)"
        )
    return None


def vms_per_node(accelerator_type: str) -> int:
    match = ACCELERATOR_RE.match(accelerator_type)
    if match is None:
        raise ValueError(f"unknown accelerator type {accelerator_type!r}")
    family, size_text = match.group(1), int(match.group(2))
    if family in _CORES_PER_HOST:
        return max(1, size_text // _CORES_PER_HOST[family])
    if size_text <= _SINGLE_HOST_CHIPS[family]:
        return 1
    return size_text // _CHIPS_PER_HOST[family]
