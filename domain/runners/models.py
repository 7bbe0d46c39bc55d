"""Runner records, and the policy, requests and results of a runner deletion."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.common.durations import SecondsDuration
from keeper.domain.runners.status import AgentStatus, InstanceStatus

# GitHub accepts up to 64 characters; keeper also keeps names safe inside a workflow id.
RUNNER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
SCALE_SET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
RUNNER_NAME_RE = re.compile(RUNNER_NAME_PATTERN)

DELETE_PREFIX = "runner-delete-"
RECONCILER_WORKFLOW_ID = "runner-reconciler"
# The deletion workflow's type and the update other actors ask it with: what a starter needs
# without importing the workflow code.
DELETION_WORKFLOW_TYPE = "RunnerDeletion"
REQUEST_UPDATE = "request"
RECONCILER_SCHEDULE_ID = "runner-reconciler"

RunnerName = Annotated[
    str,
    Field(
        pattern=RUNNER_NAME_PATTERN,
        description="1-64 characters: letters, digits, '.', '_' and '-', starting alphanumeric.",
    ),
]
PositiveDuration = Annotated[SecondsDuration, Field(gt=timedelta(0))]


def deletion_workflow_id(runner: str) -> str:
    return f"{DELETE_PREFIX}{runner}"


def utcnow() -> datetime:
    return datetime.now(UTC)


class RunnerRecord(BaseModel):
    """One row of the runner store, as read at `version`."""

    model_config = ConfigDict(frozen=True)

    name: RunnerName
    # SCALE_SET_PATTERN, like every other rule on a row, is checked by the store
    # (domain.runners.record_check), so a bad row already stored can still be read.
    scale_set: str
    provider_id: str | None = None
    github_runner_id: int | None = None
    # "repo:owner/name", "org:name" or "enterprise:slug" (domain.runners.github.GitHubScope).
    github_scope: str | None = None
    instance_status: InstanceStatus = InstanceStatus.PENDING_CREATE
    agent_status: AgentStatus = AgentStatus.PENDING
    version: int = 1
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    deleted_at: datetime | None = None
    # What is wrong with the stored row ("field: problem"), from
    # domain.runners.record_check; empty for a valid record. A record with problems is
    # still returned for its own deletion, with the invalid values as they are stored.
    problems: tuple[str, ...] = ()


class Requester(StrEnum):
    """Who asked for a deletion. They all only ask: the workflow is the one writer."""

    AGENT = "agent"
    SCALE_DOWN = "scale-down"
    OPERATOR = "operator"
    RECONCILER = "reconciler"


class BusyTimeoutAction(StrEnum):
    ESCALATE = "escalate"  # stop and wait for an operator to force or cancel
    PROCEED = "proceed"  # delete the compute anyway; the job on it is lost


class DeletionPolicy(BaseModel):
    """How patient a deletion is. Defaults suit GitHub's API limits and GARM providers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    busy_wait: PositiveDuration = timedelta(minutes=30)
    busy_poll: PositiveDuration = timedelta(seconds=30)
    on_busy_timeout: BusyTimeoutAction = BusyTimeoutAction.ESCALATE
    # While escalated, GitHub is asked again this often (the job may end by itself).
    escalation_recheck: PositiveDuration = timedelta(minutes=5)
    provider_timeout: PositiveDuration = timedelta(minutes=5)
    # How soon an attempt lost with a crashed worker is noticed and retried elsewhere.
    provider_heartbeat: PositiveDuration = timedelta(seconds=30)
    retry_initial: PositiveDuration = timedelta(seconds=5)
    retry_max: PositiveDuration = timedelta(minutes=5)
    # A forced delete tries the provider this many times, then records the leak and goes on.
    force_provider_attempts: int = Field(default=3, ge=1, le=100, strict=True)
    # After a "proceed" decision the registration is removed once the runner is offline.
    registration_cleanup_attempts: int = Field(default=10, ge=1, le=1000, strict=True)
    # A deletion that waits long (escalated, or a provider that keeps failing) continues as
    # a new run past this many history events, or when the server suggests it sooner.
    history_events_limit: int = Field(default=2000, ge=100, le=40000, strict=True)


class DeletionRequest(BaseModel):
    """One actor's intent; every request for the same runner joins one workflow."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requested_by: Requester = Requester.OPERATOR
    # Strict: from outside, "yes" or 1 is a mistake to report, not a forced deletion.
    force: bool = Field(default=False, strict=True)
    reason: str = Field(default="", max_length=500)


class DeletionStep(StrEnum):
    READ = "read"
    PENDING_DELETE = "pending_delete"
    DEREGISTER = "deregister"
    BUSY_WAIT = "busy_wait"
    ESCALATED = "escalated"
    DELETING = "deleting"
    PROVIDER_DELETE = "provider_delete"
    DELETED = "deleted"
    DONE = "done"


class DeletionOutcome(StrEnum):
    """How a deletion closed. Never cancelled: the lane is forward-only."""

    DELETED = "deleted"
    ALREADY_DELETED = "already_deleted"


class DeletionResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    runner: str
    outcome: DeletionOutcome
    forced: bool = False
    # The provider id that may still exist because a forced delete ignored a provider error.
    leaked_provider_id: str | None = None
    registration: str = ""
    provider: str = ""
    recovered: bool = False  # the final write went through the audited recovery path
    busy_decision: str | None = None
    requests: tuple[str, ...] = ()
