"""All a watch carries from check to check (and through continue-as-new): bounded."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.watch.cadence import PhaseState, StageTimes
from keeper.domain.watch.calls import ReadingState
from keeper.domain.watch.escalation import EscalationState
from keeper.domain.watch.liveness_models import LivenessState
from keeper.domain.watch.models import WatchView


class WatchState(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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
