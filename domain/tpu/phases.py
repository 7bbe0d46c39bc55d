"""The phase plan of a slice bootstrap: which phases run, in what order, with which budget.

Each phase's deadline starts at its own transition (see docs/tpu-bootstrap.md):
assign from submission, provision from the first PROVISIONING seen, ready from ACTIVE,
health from the moment every VM has an IP.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from keeper.domain.common.durations import format_duration
from keeper.domain.tpu.observation import SliceObservation
from keeper.domain.tpu.qr_state import QrStage
from keeper.domain.tpu.slice_request import SliceRequest


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
    # Never set by a workflow: Temporal runs no code of a terminated or timed-out run. The
    # CLI shows a bootstrap that closed so in these (domain/tpu/outcome.py, closed_view).
    TERMINATED = "terminated"
    TIMED_OUT = "timed-out"


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


class Goal(StrEnum):
    """What a waiting phase waits to see in an observation of the cloud."""

    ASSIGNED = "assigned"  # QR PROVISIONING or ACTIVE
    ACTIVE = "active"  # QR ACTIVE
    CLOUD_READY = "cloud-ready"  # every node READY, every VM an IP, the exact VM count


def reached(obs: SliceObservation, goal: Goal) -> bool:
    if goal is Goal.ASSIGNED:
        return obs.stage in (QrStage.PROVISIONING, QrStage.ACTIVE)
    if goal is Goal.ACTIVE:
        return obs.stage is QrStage.ACTIVE
    return obs.cloud_ready


@dataclass(frozen=True)
class WaitStep:
    """One phase that waits on cloud reads, in the order the phase child runs them."""

    phase: Phase
    # The budget counts from submission (the create), not from the moment the phase starts.
    from_submission: bool
    goal: Goal
    # The wait's activity summary, as the UI shows it.
    what: str


# | capacity   | phase     | budget counts from       | done when                             |
# |------------|-----------|--------------------------|---------------------------------------|
# | queued     | assign    | submission               | QR PROVISIONING or ACTIVE             |
# | queued     | provision | the end of assign        | QR ACTIVE                             |
# | queued     | ready     | the end of provision     | every node READY, every VM an IP      |
# | non-queued | ready     | submission (node create) | every node READY, every VM an IP      |
# Health follows on both, from the end of ready (it probes VMs, it reads no cloud state).
_READY_WHAT = "wait for every node READY and every VM an IP"
QUEUED_WAITS = (
    WaitStep(Phase.ASSIGN, True, Goal.ASSIGNED, "wait for capacity to be assigned"),
    WaitStep(Phase.PROVISION, False, Goal.ACTIVE, "wait for the queued resource to become ACTIVE"),
    WaitStep(Phase.READY, False, Goal.CLOUD_READY, _READY_WHAT),
)
NODE_WAITS = (WaitStep(Phase.READY, True, Goal.CLOUD_READY, _READY_WHAT),)


def waiting_for(phase: Phase) -> str:
    """What a waiting phase waits for, as a poll that saw no progress says it: "capacity to
    be assigned"."""
    for step in (*QUEUED_WAITS, *NODE_WAITS):
        if step.phase is phase:
            return step.what.removeprefix("wait for ")
    return f"the {phase.value} phase to progress"


def wait_plan(request: SliceRequest) -> tuple[WaitStep, ...]:
    # Non-queued capacity has no queue: one cloud-ready budget from node create, then health.
    return QUEUED_WAITS if request.capacity.queued else NODE_WAITS


def phase_plan(request: SliceRequest) -> list[Phase]:
    return [step.phase for step in wait_plan(request)] + [Phase.HEALTH]


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
