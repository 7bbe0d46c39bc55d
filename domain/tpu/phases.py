"""The phase plan of a slice bootstrap: which phases run, in what order, with which budget.

Each phase's deadline starts at its own transition (see docs/tpu-bootstrap.md):
assign from submission, provision from the first PROVISIONING seen, ready from ACTIVE,
health from the moment every VM has an IP.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from domain.common.durations import format_duration
from domain.tpu.slice_request import SliceRequest


class Phase(StrEnum):
    SUBMIT = "submit"
    ASSIGN = "assign"
    PROVISION = "provision"
    READY = "ready"
    HEALTH = "health"
    DONE = "done"
    COMPENSATE = "compensate"
    FAILED = "failed"
    CANCELLED = "cancelled"


DEFAULT_DEADLINES: dict[Phase, timedelta] = {
    Phase.ASSIGN: timedelta(hours=4),
    Phase.PROVISION: timedelta(hours=1),
    Phase.READY: timedelta(minutes=10),
    Phase.HEALTH: timedelta(minutes=10),
}

# Large slices take longer to get every host an IP and every agent up. A default deadline
# grows to this floor; an explicit override is taken as the operator's word and kept.
SIZE_FLOORS: tuple[tuple[int, timedelta], ...] = (
    (256, timedelta(minutes=30)),
    (64, timedelta(minutes=15)),
)
SCALED_PHASES = frozenset({Phase.READY, Phase.HEALTH})


def size_floor(total_vms: int) -> timedelta:
    for threshold, floor in SIZE_FLOORS:
        if total_vms >= threshold:
            return floor
    return timedelta(0)


def phase_plan(request: SliceRequest) -> list[Phase]:
    if request.capacity.queued:
        return [Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH]
    # Non-queued capacity has no queue: one cloud-ready budget from node create, then health.
    return [Phase.READY, Phase.HEALTH]


def deadline_for(request: SliceRequest, phase: Phase) -> timedelta:
    override = getattr(request.deadlines, phase.value, None)
    if override is not None:
        return override
    default = DEFAULT_DEADLINES[phase]
    if phase in SCALED_PHASES:
        return max(default, size_floor(request.expected_vms))
    return default


def deadlines(request: SliceRequest) -> dict[Phase, timedelta]:
    return {phase: deadline_for(request, phase) for phase in phase_plan(request)}


BACKSTOP_GRACE = timedelta(minutes=1)


def backstop(assign_budget: timedelta, poll_interval: timedelta) -> timedelta:
    """valid_until_duration for the QR: the assign budget plus a little.

    It is a backstop for when keeper cannot act (every worker down), so it must not beat
    keeper's own deadline, which fires within one poll interval of the budget.
    """
    return assign_budget + 2 * poll_interval + BACKSTOP_GRACE


def default_budget_text(phase: Phase) -> str:
    """A phase's default budget in words, for help texts: `10m (15m from 64 VMs, ...)`."""
    text = format_duration(DEFAULT_DEADLINES[phase])
    if phase in SCALED_PHASES:
        floors = ", ".join(f"{format_duration(f)} from {n} VMs" for n, f in reversed(SIZE_FLOORS))
        text += f" ({floors})"
    return text


def plan_text() -> str:
    """`assign (4h), provision (1h), ready (10m) and health (10m)`: the queued plan's budgets."""
    parts = [f"{p.value} ({format_duration(b)})" for p, b in DEFAULT_DEADLINES.items()]
    return ", ".join(parts[:-1]) + " and " + parts[-1]
