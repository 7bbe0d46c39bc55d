"""The escalation of one reclaim: which cancel comes next, and what follows the last.

| step | sends | tries | then |
|---|---|---|---|
| graceful-cancel | signal 0 (spur: SIGTERM, SIGKILL 5 s later if the same run is still there) | policy.graceful_tries | forced-kill |
| forced-kill | signal 9, once per try | policy.forced_tries | drained |
| drained | DrainNode with keeper's reason; an alert | until release evidence or an operator's release | undrain (only a drain keeper made) |

Before every send and before the drain, the workflow reads the controller again and decides
afresh (domain/reclaim/decide.py); anything but `reclaim` stops the escalation. A quarantine
verdict goes straight to `drained`. In observe mode every step is decided and shown, and
nothing is sent.
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from keeper.domain.reclaim.policy import ReclaimPolicy


class Step(StrEnum):
    ASSESS = "assess"
    GRACEFUL = "graceful-cancel"
    FORCED = "forced-kill"
    DRAINED = "drained"
    OBSERVING = "observing"
    DONE = "done"


GRACEFUL_SIGNAL = 0
KILL_SIGNAL = 9


@dataclass(frozen=True)
class Attempt:
    step: Step
    signal: int
    # 1-based within its step, and overall (for the backoff).
    try_in_step: int
    overall: int


def attempts(policy: ReclaimPolicy) -> list[Attempt]:
    plan = [(Step.GRACEFUL, GRACEFUL_SIGNAL, policy.graceful_tries)]
    plan.append((Step.FORCED, KILL_SIGNAL, policy.forced_tries))
    out: list[Attempt] = []
    for step, signal, tries in plan:
        for n in range(1, tries + 1):
            out.append(Attempt(step, signal, n, len(out) + 1))
    return out


class Mode(StrEnum):
    """`reclaim.mode`: observe decides and shows; act cancels and drains."""

    OBSERVE = "observe"
    ACT = "act"


class Outcome(StrEnum):
    # The agent's heartbeats no longer list the job.
    RELEASED = "released"
    # A fresh read found nothing stale (the job came back to this node, or is waiting).
    SPARED = "spared"
    # An operator said the holding is gone (`keeper reclaim release`).
    OPERATOR_RELEASED = "operator-released"
    # The workflow was cancelled; a drain keeper made was lifted.
    CANCELLED = "cancelled"
