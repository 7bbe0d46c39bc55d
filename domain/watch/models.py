"""What a JobWatch is asked, shows and answers: its input, its view (the `status` query and
the current details), its proposals and an operator's decisions on them.

These are the names `keeper job ...`, `temporal workflow start --input` and the Temporal UI
share, so their fields are stable (docs/watch.md).
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from keeper.domain.watch.cadence import WatchPhase
from keeper.domain.watch.values import Frozen

WATCH_WORKFLOW_TYPE = "JobWatch"
WATCH_ID_PREFIX = "job-watch-"
STATUS_QUERY = "status"
APPROVE_UPDATE = "approve"
DENY_UPDATE = "deny"

# An iris job id is its wire name, /<user>/<job>[/<child>...]; keeper watches root jobs.
_JOB_ID = re.compile(r"^/[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)+$")
JOB_ID_MAX = 400


class JobIdError(ValueError):
    pass


def check_job_id(value: str) -> str:
    """The job id as iris spells it; a clear sentence naming the problem otherwise."""
    if not isinstance(value, str) or not value:
        raise JobIdError("job_id is empty; give the iris job id, e.g. /alice/tokenize")
    if len(value) > JOB_ID_MAX:
        raise JobIdError(f"job_id is {len(value)} characters long; at most {JOB_ID_MAX}")
    if not _JOB_ID.fullmatch(value):
        raise JobIdError(
            f"job_id {value!r} is not an iris job id: /<user>/<job>, letters, digits, "
            "'.', '_' and '-' (e.g. /alice/tokenize)"
        )
    return value


def watch_id(job_id: str) -> str:
    """`job-watch-<job id>`, the leading slash dropped: one watch per job, and no other
    keeper workflow id starts with `job-watch-`."""
    return WATCH_ID_PREFIX + check_job_id(job_id).removeprefix("/")


# running, stalled and unknown are the liveness arbiter's, check by check; finished is a
# closed watch's: the job ended, was stopped or restarted, is unknown to iris, or was
# unwatched (its job state says which), and nothing is judged any more.
Verdict = Literal["running", "stalled", "unknown", "finished"]
FINISHED: Verdict = "finished"


class ProposalKind(StrEnum):
    STOP = "stop"
    RESTART = "restart"


class ProposalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    # The evidence went away (the job recovered or ended) before anyone decided.
    WITHDRAWN = "withdrawn"
    DONE = "done"
    FAILED = "failed"


class Proposal(Frozen):
    """A destructive step keeper suggests and waits on an operator for."""

    id: str  # `stop-1`, `restart-2`: the kind and a number unique within the watch
    kind: ProposalKind
    reason: str
    # Why this step and not another (domain/watch/why.py); empty on proposals made before it.
    why: str = ""
    evidence: list[str] = Field(default_factory=list)
    # The episode it answers (an escalation key): one proposal per episode.
    key: str
    state: ProposalState = ProposalState.PENDING
    created_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    note: str | None = None
    outcome: str | None = None
    # A restart's: what it launches (domain/watch/relaunch.py), and the command an operator
    # gave at approval, if any.
    relaunch: str = ""
    command: list[str] | None = None

    def withdrawn(self, why: str, now: datetime) -> Proposal:
        return self.model_copy(
            update={"state": ProposalState.WITHDRAWN, "outcome": why, "decided_at": now}
        )


# A command given at approval: the argv of the relaunched job's run command.
COMMAND_ARGS_MAX = 256
COMMAND_ARG_MAX = 4096
CommandArg = Annotated[str, StringConstraints(min_length=1, max_length=COMMAND_ARG_MAX)]
Command = Annotated[list[CommandArg], Field(min_length=1, max_length=COMMAND_ARGS_MAX)]

Operator = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]


class Decision(Frozen):
    """An operator's answer to a proposal (the `approve` and `deny` updates)."""

    proposal: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=40)]
    by: Operator
    note: Annotated[str, StringConstraints(max_length=300)] = ""
    # A restart's command (the argv to run), when keeper holds no launch request of its own
    # for the job, or the operator wants another: kept in history, so never a secret.
    command: Command | None = None


class TimelineEntry(Frozen):
    """One change of verdict, phase or attempt, as the timeline shows it."""

    at: datetime
    phase: WatchPhase
    verdict: Verdict
    reason: str
    attempt: str | None = None
    evidence: list[str] = Field(default_factory=list)


class AttemptView(Frozen):
    """The attempt keeper judges: the latest coordinator and worker pool of the job."""

    pipeline: int
    attempt: int
    coordinator: str
    workers: str
    coordinator_state: str = "unknown"
    workers_running: int = 0
    workers_total: int = 0


class ProgressView(Frozen):
    """The coordinator's last progress line."""

    stage: str
    done: int
    total: int
    in_flight: int
    queued: int
    workers_alive: int | None = None
    at: datetime | None = None


class WatchView(BaseModel):
    """The `status` query: what the watch knows now, and its timeline of verdicts."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    phase: WatchPhase = WatchPhase.SMOKE
    job_state: str = "unknown"  # the job's iris state, lower case: running, succeeded, ...
    verdict: Verdict = "unknown"
    verdict_reason: str = "not checked yet"
    evidence: list[str] = Field(default_factory=list)
    attempt: AttemptView | None = None
    progress: ProgressView | None = None
    stale_coordinators: list[str] = Field(default_factory=list)
    # The escalations open now, one sentence each.
    escalations: list[str] = Field(default_factory=list)
    proposals: list[Proposal] = Field(default_factory=list)
    timeline: list[TimelineEntry] = Field(default_factory=list)
    # Timeline entries dropped to keep the history bounded (the oldest go first).
    timeline_dropped: int = 0
    checks: int = 0
    last_check_at: datetime | None = None
    next_check_at: datetime | None = None
    # The controller reads that failed on the last check (unavailable, not "idle").
    controller_errors: list[str] = Field(default_factory=list)
    cause: str | None = None
    notifications: int = 0
    requested_by: str = ""
    restart_of: str | None = None
    restarts: int = 0
    # Whether keeper holds the request the job was launched with (`keeper job run`): without
    # it a restart needs the command at approval.
    launch_held: bool = False
    # Continue-as-new runs so far: the watch's age in runs.
    generation: int = 0

    def pending(self) -> list[Proposal]:
        return [p for p in self.proposals if p.state is ProposalState.PENDING]

    def withdraw_pending(self, why: str, now: datetime) -> list[Proposal]:
        """The proposals, every pending one withdrawn: nobody will decide on it now."""
        pending = ProposalState.PENDING
        return [p.withdrawn(why, now) if p.state is pending else p for p in self.proposals]

    def timeline_with(self, entry: TimelineEntry, limit: int) -> dict[str, object]:
        """The timeline fields with `entry` added, the oldest dropped (and counted) past
        `limit`."""
        timeline = [*self.timeline, entry]
        cut = max(0, len(timeline) - limit)
        return {"timeline": timeline[cut:], "timeline_dropped": self.timeline_dropped + cut}

    @property
    def verdicts(self) -> int:
        """Every verdict change so far, the dropped ones included."""
        return len(self.timeline) + self.timeline_dropped


class WatchOutcome(StrEnum):
    SUCCEEDED = "succeeded"  # the job ended well
    FAILED = "failed"  # the job ended badly (its cause named from the logs)
    STOPPED = "stopped"  # an operator approved a stop, and keeper stopped it
    RESTARTED = "restarted"  # an approved restart; a new watch follows the new job
    MISSING = "missing"  # the controller does not know the job
    UNWATCHED = "unwatched"  # an operator ended the watch; the job runs on
