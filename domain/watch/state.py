"""All a watch carries from check to check (and through continue-as-new): bounded.

The state is one frozen model, changed only by pure functions (here, domain/watch/assess.py
and domain/watch/closing.py), and handed whole to the next run at continue-as-new.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from keeper.domain.watch.cadence import PhaseState, StageTimes
from keeper.domain.watch.escalation import EscalationState
from keeper.domain.watch.liveness_models import LivenessState
from keeper.domain.watch.models import WatchView
from keeper.domain.watch.values import Frozen


class ReadingState(Frozen):
    """What the next check needs from the last: where each log was read up to, and which
    attempt those cursors belong to (a new attempt starts its logs over). A check is given
    it (domain/watch/calls.py ObserveCall) and answers the next one."""

    attempt: str | None = None
    coordinator_cursor: int = 0
    workers_cursor: int = 0
    # Where the coordinator's processes run, so a probe can exec beside them.
    tasks_by_host: dict[str, str] = Field(default_factory=dict)


class WatchState(Frozen):
    view: WatchView
    reading: ReadingState = Field(default_factory=ReadingState)
    liveness: LivenessState = Field(default_factory=LivenessState)
    escalation: EscalationState = Field(default_factory=EscalationState)
    phase: PhaseState = Field(default_factory=PhaseState)
    stages: StageTimes = Field(default_factory=StageTimes)
    # The interval the last check chose: a tick much later than it is an observer gap.
    interval_s: float = 0.0
    # Notices sent, by key, so an episode is told once (bounded, oldest dropped).
    told: tuple[str, ...] = ()
    proposals_made: int = 0
    # The latest worker error lines (newest last, bounded): a cause is named from them when
    # the job ends, though they were read checks before.
    recent_errors: tuple[str, ...] = ()
    # Checks in a row that found the job unknown to the controller.
    missing_checks: int = 0


def scheduled(state: WatchState, now: datetime) -> WatchState:
    """The queued job was scheduled at `now`: the smoke window starts when the job does, not
    when it was queued."""
    return state.model_copy(update={"phase": state.phase.model_copy(update={"since": now})})


def rolled_over(state: WatchState) -> WatchState:
    """The state the next run starts from: one more generation."""
    view = state.view.model_copy(update={"generation": state.view.generation + 1})
    return state.model_copy(update={"view": view})
