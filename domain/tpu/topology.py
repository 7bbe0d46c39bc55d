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
