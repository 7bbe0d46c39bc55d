"""How often the watch looks, and which phase of the runbook's monitoring lifecycle it is in.

`next_interval`:

| phase | interval |
|---|---|
| smoke | smoke_interval (the first minutes decide whether the job starts at all) |
| failure | failure_interval (following a retry as it appears) |
| steady, escalated | about one stage transition per check (below) |
| finished | zero: there is nothing more to watch |

The steady interval is the median of the recent stage durations, clamped to
[min_interval, max_interval]; default_interval before any transition was seen.

`next_phase`, first match wins:

| # | phase | what the tick saw | next |
|---|---|---|---|
| 1 | any | the job is terminal | finished |
| 2 | finished | anything | finished |
| 3 | any | the latest attempt changed | failure (follow the retry) |
| 4 | failure | the new attempt's coordinator is listed | smoke (for the new attempt) |
| 5 | failure | otherwise | failure |
| 6 | smoke | an early error, or coordinator or workers ended unsuccessfully | failure |
| 7 | smoke | coordinator and workers RUNNING and smoke_duration passed | steady |
| 8 | steady, escalated | coordinator or workers ended unsuccessfully | failure |
| 9 | steady | an escalation is open | escalated |
| 10 | escalated | no escalation is open | steady |
| 11 | otherwise | | unchanged |
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from statistics import median

from pydantic import Field, model_validator

from keeper.domain.common.durations import HumanDuration
from keeper.domain.watch.names import JobPhase
from keeper.domain.watch.values import Frozen


class WatchPhase(StrEnum):
    SMOKE = "smoke"
    STEADY = "steady"
    FAILURE = "failure"
    ESCALATED = "escalated"
    FINISHED = "finished"


class CadencePolicy(Frozen):
    smoke_duration: HumanDuration = Field(default=timedelta(minutes=5), gt=timedelta(0))
    smoke_interval: HumanDuration = Field(default=timedelta(seconds=30), gt=timedelta(0))
    failure_interval: HumanDuration = Field(default=timedelta(minutes=1), gt=timedelta(0))
    min_interval: HumanDuration = Field(default=timedelta(minutes=2), gt=timedelta(0))
    max_interval: HumanDuration = Field(default=timedelta(minutes=30), gt=timedelta(0))
    default_interval: HumanDuration = Field(default=timedelta(minutes=5), gt=timedelta(0))
    # How many of the latest stage durations the steady cadence follows.
    recent_stages: int = Field(default=5, ge=1, le=100, strict=True)

    @model_validator(mode="after")
    def _ordered(self) -> CadencePolicy:
        if self.min_interval > self.max_interval:
            raise ValueError("min_interval is longer than max_interval")
        return self


def next_interval(
    policy: CadencePolicy, phase: WatchPhase, recent_stage_durations: Sequence[timedelta]
) -> timedelta:
    """How long to wait before the next check (table above)."""
    if phase is WatchPhase.FINISHED:
        return timedelta(0)
    if phase is WatchPhase.SMOKE:
        return policy.smoke_interval
    if phase is WatchPhase.FAILURE:
        return policy.failure_interval
    durations = [d for d in recent_stage_durations if d > timedelta(0)][-policy.recent_stages :]
    middle = policy.default_interval
    if durations:
        middle = timedelta(seconds=median(d.total_seconds() for d in durations))
    return min(max(middle, policy.min_interval), policy.max_interval)


class StageTimes(Frozen):
    """The stage last seen, since when, and how long the stages before it took (bounded)."""

    stage: str | None = None
    since: datetime | None = None
    durations: tuple[timedelta, ...] = ()

    def seen(self, stage: str, at: datetime, keep: int = 10) -> StageTimes:
        """After a progress line of `stage` (execution id and stage name) at `at`."""
        if stage == self.stage:
            return self
        durations = self.durations
        if self.stage is not None and self.since is not None and at > self.since:
            durations = (*durations, at - self.since)[-keep:]
        return StageTimes(stage=stage, since=at, durations=durations)


class PhaseState(Frozen):
    phase: WatchPhase = WatchPhase.SMOKE
    # When the phase began (None before the first tick).
    since: datetime | None = None
    # The latest attempt followed, and the one whose failure entered the failure phase.
    attempt: str | None = None
    failed_attempt: str | None = None


class PhaseSignals(Frozen):
    """What one tick saw, as `next_phase` needs it."""

    at: datetime
    attempt: str | None = None
    coordinator: JobPhase | None = None
    workers: JobPhase | None = None
    # An error in the coordinator's log or a child that failed during the smoke window.
    early_error: bool = False
    job_terminal: bool = False
    escalated: bool = False


def _ended_badly(phase: JobPhase | None) -> bool:
    return phase is not None and phase.is_terminal and phase is not JobPhase.SUCCEEDED


def next_phase(policy: CadencePolicy, state: PhaseState, signals: PhaseSignals) -> PhaseState:
    """The phase after this tick (table above)."""
    at, now = signals.at, state.phase
    begun = state.since or at

    def to(phase: WatchPhase, **update: str | None) -> PhaseState:
        since = begun if phase is now else at
        return state.model_copy(update={"phase": phase, "since": since, **update})

    attempt = signals.attempt if signals.attempt is not None else state.attempt
    if signals.job_terminal or now is WatchPhase.FINISHED:
        return to(WatchPhase.FINISHED, attempt=attempt)
    if state.attempt is not None and signals.attempt not in (None, state.attempt):
        # A retry (or the next pipeline): start over on it, through the failure phase.
        return state.model_copy(update={
            "phase": WatchPhase.FAILURE, "since": at, "attempt": signals.attempt,
            "failed_attempt": state.attempt,
        })  # fmt: skip
    broke = _ended_badly(signals.coordinator) or _ended_badly(signals.workers)
    if now is WatchPhase.FAILURE:
        if attempt != state.failed_attempt and signals.coordinator is not None:
            return to(WatchPhase.SMOKE, attempt=attempt)
        return to(WatchPhase.FAILURE, attempt=attempt)
    if now is WatchPhase.SMOKE:
        if signals.early_error or broke:
            return to(WatchPhase.FAILURE, attempt=attempt, failed_attempt=attempt)
        running = signals.coordinator is JobPhase.RUNNING and signals.workers is JobPhase.RUNNING
        if running and at - begun >= policy.smoke_duration:
            return to(WatchPhase.STEADY, attempt=attempt)
        return to(WatchPhase.SMOKE, attempt=attempt)
    if broke:
        return to(WatchPhase.FAILURE, attempt=attempt, failed_attempt=attempt)
    if now is WatchPhase.STEADY and signals.escalated:
        return to(WatchPhase.ESCALATED, attempt=attempt)
    if now is WatchPhase.ESCALATED and not signals.escalated:
        return to(WatchPhase.STEADY, attempt=attempt)
    return to(now, attempt=attempt)
