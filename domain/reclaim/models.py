"""What job reclaim reasons about: a holding an agent reports, the controller's view of a job,
keeper's memory of jobs and controller epochs, and the verdicts it reaches."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, field_validator

from keeper.domain.reclaim.jobs import JobState

RECLAIM_WORKFLOW_TYPE = "JobReclaim"
EVIDENCE_SIGNAL = "evidence"
RELEASE_UPDATE = "release"
STATUS_QUERY = "status"
# The prefix of every drain reason keeper writes: how it tells its own drains from others'.
DRAIN_REASON_PREFIX = "keeper-reclaim:"
# Canonical node ids (domain/reclaim/identity.py) fit a workflow id as they are.
NODE_ID_RE = re.compile(r"^[a-z0-9_:][a-z0-9_.:-]{0,62}$")


class Frozen(BaseModel):
    """The family's values: immutable, and refusing a field they do not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class JobView(Frozen):
    """One job as one read of the controller showed it."""

    job_id: int = Field(ge=0, le=2**32 - 1)
    state: JobState
    submit_time: datetime | None = None
    end_time: datetime | None = None
    # The allocation as canonical node ids; empty until spur commits it.
    nodes: frozenset[str] = frozenset()
    # As the controller wrote it, for the operator.
    nodelist: str = ""


@dataclass(frozen=True)
class ControllerView:
    """One read of the controller: every job it tracks. Decisions take one view, never two."""

    read_at: datetime
    jobs: dict[int, JobView] = field(default_factory=dict)

    @cached_property
    def max_job_id(self) -> int:
        # Once per view: decide() reads it for every holding, and a view may hold 100,000.
        return max(self.jobs, default=0)


class EpochState(Frozen):
    """keeper's memory of the controller's incarnation. Within one epoch, job ids grow with
    submit time; a job id at or below the highest seen that was submitted after it proves
    the controller reissued ids (it was wiped), and starts the next epoch."""

    epoch: int = Field(default=1, ge=1)
    # The highest job id seen in this epoch, and when that job was submitted.
    high_id: int = 0
    high_submit: datetime | None = None
    started_at: datetime | None = None
    # Why this epoch began (empty for the first).
    why: str = ""

    @property
    def watermark(self) -> int:
        """Ids at or above it were never issued in this epoch as far as keeper saw."""
        return self.high_id + 1


class KnownJob(Frozen):
    """keeper's memory of one job id in one epoch: proof it was issued, and how it last looked."""

    job_id: int
    epoch: int
    submit_time: datetime | None
    # Last seen finalized: the run is over, so a later absence means it aged out.
    finalized: bool
    last_state: JobState
    last_seen: datetime


class Holding(Frozen):
    """A (node, job id) an agent reported holding, as keeper first saw it."""

    node: str
    # Strict: a quoted "1234" from outside is reported, not taken as 1234.
    job_id: int = Field(ge=0, le=2**32 - 1, strict=True)
    # The controller epoch current when keeper first saw the holding.
    epoch: int = Field(ge=1, strict=True)
    first_seen: datetime
    # The n-th time this node was seen holding this job id after not holding it.
    sighting: int = Field(default=1, ge=1, strict=True)

    @field_validator("node")
    @classmethod
    def _canonical(cls, value: str) -> str:
        if not NODE_ID_RE.match(value):
            raise ValueError(f"{value!r} is not a canonical node id")
        return value

    @property
    def incarnation(self) -> str:
        return f"e{self.epoch}.{self.sighting}"

    @property
    def workflow_id(self) -> str:
        """One workflow per fence key (node, job id, controller epoch, sighting)."""
        return f"reclaim-{self.node}-{self.job_id}-{self.incarnation}"


class Verdict(StrEnum):
    SPARE = "spare"
    RECLAIM = "reclaim"
    QUARANTINE = "quarantine"


class Reason(StrEnum):
    # reclaim
    TERMINAL = "terminal"
    ACTIVE_ELSEWHERE = "active-elsewhere"
    AGED_OUT = "aged-out"
    # spare
    ACTIVE_HERE = "active-here"
    NODES_NOT_COMMITTED = "nodes-not-committed"
    WAITING = "waiting-for-dispatch"
    JUST_ENDED = "just-ended"
    END_UNKNOWN = "end-time-unknown"
    NEVER_ISSUED = "at-or-above-watermark"
    # quarantine
    OTHER_EPOCH = "other-controller-epoch"
    PREDATES_JOB = "predates-the-job"
    VANISHED_LIVE = "vanished-while-live"
    NEVER_SEEN = "never-seen-issued"
    UNKNOWN_NODE = "unknown-node"


class Decision(Frozen):
    verdict: Verdict
    reason: Reason
    # One sentence for the operator: what keeper saw and why that is the verdict.
    detail: str
    # The job as the view that decided showed it (None: the controller does not track it).
    job: JobView | None = None
    watermark: int = 0
    epoch: int = 1

    @property
    def stale(self) -> bool:
        """Whether the holding needs a reclaim workflow at all."""
        return self.verdict is not Verdict.SPARE
