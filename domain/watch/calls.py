"""The JobWatch workflow's input and result, and what its activities take and give.

An observation is what one check read, already reduced to what the rules need (names
parsed, logs digested, dumps read, /proc lines parsed): small enough for a history event,
and nothing in it is a secret.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from keeper.domain.watch.models import Command, WatchOutcome, check_job_id
from keeper.domain.watch.names import AttemptRef, JobPhase
from keeper.domain.watch.progress import LogDigest
from keeper.domain.watch.relaunch import HeldLaunch
from keeper.domain.watch.state import ReadingState, WatchState
from keeper.domain.watch.threads import DumpReading
from keeper.domain.watch.values import Frozen


class ObserveCall(Frozen):
    job_id: str
    reading: ReadingState = Field(default_factory=ReadingState)
    # Seconds to wait before reading: the check's first attempt answers "not due" and asks
    # Temporal to retry it this much later, so the wait between checks costs no timer and no
    # workflow task of its own (retries are not written to history).
    wait_s: float = Field(default=0.0, ge=0)


class TaskSeen(Frozen):
    task_id: str
    state: JobPhase
    worker_id: str = ""
    attempt_id: int = 0
    error: str = ""


class CpuSeen(Frozen):
    """One /proc/PID/stat line read in one task's container."""

    task_id: str
    host: str
    attempt: int
    pid: int
    comm: str = ""
    start_time: int
    ticks: int  # utime + stime, clock ticks
    clk_tck: int = 100


class Observation(Frozen):
    at: datetime
    job_found: bool = True
    job_state: JobPhase = JobPhase.UNSPECIFIED
    job_error: str = ""
    children: int = 0
    # Children the controller counted and no ListJobs page showed (iris pages at most 5,000
    # deep; past 11,000 of one state the newest are read): not judged, and said so.
    children_unseen: int = Field(default=0, ge=0)
    latest: AttemptRef | None = None
    coordinator: TaskSeen | None = None
    worker_states: dict[JobPhase, int] = Field(default_factory=dict)
    worker_failed_attempts: int = 0
    # Errors the worker tasks report (their status and ERROR lines), newest last, bounded.
    worker_errors: list[str] = Field(default_factory=list)
    # The job's own (driver) error lines, read once it ended badly: the parent level of the
    # runbook's "read logs at every level before naming a cause". None: not read.
    parent_errors: list[str] | None = None
    coordinator_log: LogDigest | None = None
    # The coordinator's log was read from its start (no cursor yet for this attempt): its
    # lines are a backlog, written before the watch looked, not necessarily since a check.
    coordinator_log_from_start: bool = False
    threads: DumpReading | None = None
    # None: the exec could not run (not: no process).
    cpu: list[CpuSeen] | None = None
    session_cpu: float | None = None
    # The reads that failed, one line each ("ListTasks: timed out"): unavailable, not idle.
    failed: list[str] = Field(default_factory=list)
    reading: ReadingState = Field(default_factory=ReadingState)


class ProbeCall(Frozen):
    """Two reads of one process's utime+stime, `gap_s` apart, in the task it runs in."""

    task_id: str
    host: str
    pid: int
    gap_s: float = Field(gt=0, le=60)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, {self.gap_s:g} s apart"


class ProbeSeen(Frozen):
    """Both reads of the probe; either may be missing (the exec failed, the process is gone)."""

    first: CpuSeen | None = None
    second: CpuSeen | None = None
    seconds_apart: float = 0.0
    error: str = ""


class StopCall(Frozen):
    job_id: str
    proposal: str


class StopResult(Frozen):
    job_state: str
    detail: str
    already_gone: bool = False


class RelaunchCall(Frozen):
    job_id: str
    # The restart's number: the relaunched job's name ends in `-r<restart>`, so a retried
    # relaunch finds the job it made instead of making a second.
    restart: int = Field(ge=1)
    proposal: str
    # What to launch (domain/watch/relaunch.py): the request keeper holds for the job, and
    # the command an operator gave at approval. With neither, nothing is launched.
    launch: HeldLaunch | None = None
    command: Command | None = None


class RelaunchReady(Frozen):
    """What a relaunch will send, checked before the job is stopped."""

    name: str
    from_iris: bool = False
    dropped_env: list[str] = Field(default_factory=list)


class RelaunchResult(Frozen):
    job_id: str
    reused: bool = False
    # What the new job was launched with, as its watch holds it for the next restart.
    launched: HeldLaunch | None = None
    # Environment variables iris had redacted, left out of a relaunch from its shape.
    dropped_env: list[str] = Field(default_factory=list)


class Notice(Frozen):
    """One event an operator should hear of; `key` is unique per event within the watch."""

    key: str
    title: str
    lines: list[str] = Field(default_factory=list)


class JobWatchInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    # Who asked: shown in the UI and by `keeper job status`.
    requested_by: Annotated[str, StringConstraints(max_length=80)] = ""
    # Set on the watch a restart starts: the job it replaced and how many restarts led here.
    restart_of: str | None = None
    restarts: int = Field(default=0, ge=0)
    # The request `keeper job run` launched the job with: what an approved restart resends
    # (secret values redacted here, the full request in keeper's launch store). None: the
    # job was only watched, so a restart needs the command at approval.
    launch: HeldLaunch | None = None
    # What the last run handed over at continue-as-new: its whole state (bounded).
    carry: WatchState | None = None

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        return check_job_id(value)


class JobWatchResult(Frozen):
    job_id: str
    outcome: WatchOutcome
    job_state: str
    cause: str | None = None
    new_job_id: str | None = None
    new_watch_id: str | None = None
    verdicts: int = 0
