"""The timing rules of job reclaim (`reclaim:` in temporal-dev.yaml): one model, read by the
intake, the workflow's inputs and the settings file alike."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.common.durations import HumanDuration


class ReclaimPolicy(BaseModel):
    # Counts are strict: a quoted "3" in a settings file or an input is reported by name.
    model_config = ConfigDict(frozen=True, extra="forbid")

    # A job that ended less than this ago is spared: the heartbeat may have crossed its
    # completion (Slurm's message-timeout window).
    end_grace: HumanDuration = Field(default=timedelta(minutes=2), ge=timedelta(0))
    # Graceful cancels (signal 0) before the forced kill, and forced kills (signal 9)
    # before the node is drained.
    graceful_tries: int = Field(default=3, ge=1, le=20, strict=True)
    forced_tries: int = Field(default=2, ge=0, le=20, strict=True)
    # The wait for release evidence after a cancel; it doubles each try up to retry_max.
    retry_initial: HumanDuration = Field(default=timedelta(seconds=45), gt=timedelta(0))
    retry_max: HumanDuration = Field(default=timedelta(minutes=10), gt=timedelta(0))
    # Heartbeats in a row that list other jobs but not this one: the release evidence.
    # Empty heartbeats never count (spur sends one whenever the agent's map is busy).
    release_beats: int = Field(default=2, ge=1, le=10, strict=True)
    # An idle node's evidence (domain/reclaim/evidence.py): this many empty heartbeats in a
    # row, spanning at least the window, while the controller runs nothing on the node. A
    # busy job map empties one spurd heartbeat (every 30 s) now and then, not several over
    # minutes on a node with nothing to launch or reap.
    idle_release_beats: int = Field(default=4, ge=1, le=100, strict=True)
    idle_release_window: HumanDuration = Field(default=timedelta(minutes=2), ge=timedelta(0))
    # While a node is drained, how often keeper reads the controller again.
    drained_recheck: HumanDuration = Field(default=timedelta(minutes=10), gt=timedelta(0))
    # A run that waits this many events continues as new (the history stays bounded).
    history_events_limit: int = Field(default=2000, ge=200, le=40000, strict=True)
    # After a wipe, an agent lists what it holds at its next heartbeat (spurd: every 30 s),
    # unless a busy job map empties that one: a holding first seen within this of a new
    # epoch's start may be a run of the wiped controller, and is fenced like an earlier
    # epoch's. 2m covers three empty heartbeats in a row.
    epoch_fence: HumanDuration = Field(default=timedelta(minutes=2), ge=timedelta(0))
    # How far the controller's and keeper's clocks may disagree when comparing a submit
    # time with when keeper first saw a holding.
    clock_skew: HumanDuration = Field(default=timedelta(seconds=2), ge=timedelta(0))

    def wait_after(self, attempt: int) -> timedelta:
        """How long to wait for evidence after the attempt-th cancel (1-based)."""
        wait = self.retry_initial * (2 ** max(0, attempt - 1))
        return min(wait, self.retry_max)
