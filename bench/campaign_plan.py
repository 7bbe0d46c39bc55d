"""The campaign's draw: which runs of each family, with which faults, from one seed.

Everything random in a campaign comes from one `random.Random(seed)`, drawn in a fixed
order (family by family, run by run), so `bench/campaign.py --seed N` replays the same runs
with the same faults. The first runs of a family take its fault kinds in turn, so even a
short campaign injects each kind at least once; later runs draw kinds at random, and some
runs get a second fault on top.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

# The fault kinds of each family, in the order the first runs take them. "none" is a run
# without a fault: the baseline every family must also get right.
FAULT_KINDS: dict[str, tuple[str, ...]] = {
    "tpu": (
        "tpu-unavailable",
        "tpu-resource-exhausted",
        "tpu-deadline-exceeded",
        "cancel-assign",
        "cancel-provision",
        "cancel-ready",
        "cancel-health",
        "terminate-supervisor",
        "terminate-child",
        "worker-kill",
        "late-fulfilment",
        "none",
    ),
    "runners": (
        "github-5xx",
        "github-429",
        "provider-failure",
        "provider-hang",
        "worker-kill",
        "none",
    ),
    "reclaim": ("controller-wipe", "worker-kill", "none"),
    "watch": ("counter-reset", "controller-timeouts", "worker-kill", "none"),
}
FAMILIES = tuple(FAULT_KINDS)
# Faults that can ride on top of another one in the same run (a second, independent fault).
EXTRA_FAULTS: dict[str, tuple[str, ...]] = {
    "tpu": ("tpu-unavailable", "tpu-resource-exhausted", "tpu-deadline-exceeded"),
    "runners": ("github-5xx", "github-429", "provider-failure"),
    "reclaim": (),
    "watch": (),
}
EXTRA_FAULT_CHANCE = 0.3
# The TPU methods an API fault is drawn for: the calls a bootstrap makes in every run.
TPU_FAULT_METHODS = ("CreateQueuedResource", "GetQueuedResource", "GetNode")


@dataclass(frozen=True)
class RunSpec:
    family: str
    index: int
    faults: tuple[str, ...]
    # Per-run parameters drawn with the faults (counts, methods), so a replay matches.
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def label(self) -> str:
        return f"{self.family}-{self.index:04d}"


def _params(rng: random.Random, family: str, faults: tuple[str, ...]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for fault in faults:
        if fault.startswith("tpu-"):
            params[fault] = {"method": rng.choice(TPU_FAULT_METHODS), "count": rng.randint(1, 3)}
        elif fault in ("github-5xx", "github-429", "provider-failure"):
            params[fault] = {"count": rng.randint(1, 3)}
    return params


def draw(
    seed: int, counts: dict[str, int], *, exclude: frozenset[str] = frozenset()
) -> list[RunSpec]:
    """`counts[family]` runs of each family; kinds in `exclude` are never drawn."""
    unknown = set(counts) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    rng = random.Random(seed)
    runs: list[RunSpec] = []
    for family in FAMILIES:
        kinds = [k for k in FAULT_KINDS[family] if k not in exclude]
        extras = [k for k in EXTRA_FAULTS[family] if k not in exclude]
        for index in range(counts.get(family, 0)):
            first = kinds[index] if index < len(kinds) else rng.choice(kinds)
            faults: tuple[str, ...] = (first,)
            if extras and rng.random() < EXTRA_FAULT_CHANCE:
                extra = rng.choice(extras)
                if extra != first:
                    faults = (first, extra) if first != "none" else (extra,)
            runs.append(RunSpec(family, index, faults, _params(rng, family, faults)))
    return runs
