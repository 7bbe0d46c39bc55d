"""Inputs and results of the runner deletion's activities (the workflow-activity contract)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from keeper.domain.runners.github import DeregistrationAnswer
from keeper.domain.runners.lane import LaneMove
from keeper.domain.runners.models import DeletionPolicy, RunnerRecord
from keeper.domain.runners.provider import ProviderAnswer
from keeper.domain.runners.status import InstanceStatus


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LaneWrite(_Call):
    runner: str
    target: InstanceStatus
    reason: str = ""


class LaneResult(_Call):
    move: LaneMove
    record: RunnerRecord | None  # as written, or as found when the move was not a write


class FinishDeletion(_Call):
    runner: str
    # The record's created_at as the workflow found it: a new runner that reuses the name
    # after this one's tombstone is another incarnation, never this deletion's to finish.
    incarnation: datetime


class FinishResult(_Call):
    record: RunnerRecord
    # True when the final compare-and-set was refused and the audited recovery path wrote
    # the tombstone instead.
    recovered: bool = False
    found_status: InstanceStatus | None = None
    # The tombstone was written by an earlier attempt and a new runner has since taken
    # the name; it was left alone.
    replaced: bool = False


class RegistrationRef(_Call):
    runner: str
    scope: str  # "repo:owner/name" | "org:name" | "enterprise:slug"
    runner_id: int


def registration_ref(record: RunnerRecord) -> RegistrationRef | None:
    """The registration a record points at, or None when the runner never registered."""
    if record.github_runner_id is None or record.github_scope is None:
        return None
    return RegistrationRef(
        runner=record.name, scope=record.github_scope, runner_id=record.github_runner_id
    )


class ProviderDelete(_Call):
    runner: str
    instance_id: str  # provider id, or the runner name when the create never reported one
    pool_id: str
    timeout_s: float


class LeakReport(_Call):
    runner: str
    provider_id: str
    scale_set: str
    reason: str


class DeregisterCall(_Call):
    """One deregistration: GitHub is asked until the mode's table (domain.runners.deregistration)
    says the answer is the workflow's to decide."""

    ref: RegistrationRef
    mode: str  # a domain.runners.deregistration.DeregisterMode
    policy: DeletionPolicy
    # WAIT mode: until when a busy runner is waited for, on the server's clock (the activity
    # compares it with its attempt's scheduled time, which time-skipping tests move too).
    busy_until: datetime | None = None
    # A refused token comes back once (to be shown as needing attention) instead of being
    # retried unseen (domain.runners.deregister_steps.report_auth).
    report_auth: bool = False


class DeregisterResult(_Call):
    answer: DeregistrationAnswer
    attempts: int  # this call's attempts, the last one included
    # Where the worker read its GitHub token from, with a refused token (never the token).
    token_source: str | None = None


class ProviderResult(_Call):
    answer: ProviderAnswer
    attempts: int
