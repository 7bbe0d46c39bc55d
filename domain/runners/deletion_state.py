"""What a runner deletion knows, as one frozen `DeletionState`, and every change to it.

The workflow holds one state and replaces it through the pure functions here (table-tested
in tests/runners/test_runner_state.py; the registration step's own moves are in
domain.runners.deregister_steps); the `status` query, the UI's details and the result are
rendered from it (domain.runners.deletion_view), and a run that rolls over hands it whole to
the next one (`RunnerDeletionInput.carry`). The record itself is never carried: each step
reads it again from the store.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

from keeper.domain.runners.calls import FinishResult, ProviderResult
from keeper.domain.runners.deregistration import DeregisterMode
from keeper.domain.runners.models import (
    DeletionRequest,
    DeletionStep,
    RunnerName,
    RunnerRecord,
)
from keeper.domain.runners.provider import describe_provider
from keeper.domain.runners.status import InstanceStatus

S = InstanceStatus
# The steps KeeperStep follows by themselves: waiting, escalated, done. Any other step shows
# there only when a move says so (each upsert is a history event and a visibility write).
SEARCHABLE_STEPS = frozenset({DeletionStep.BUSY_WAIT, DeletionStep.ESCALATED, DeletionStep.DONE})
WAITING_STEPS = frozenset({DeletionStep.BUSY_WAIT, DeletionStep.ESCALATED})
# The registration step's own steps: a run that rolled over in one goes on showing it.
REGISTRATION_STEPS = frozenset({DeletionStep.DEREGISTER, *WAITING_STEPS})
# Requests kept: enough to tell who asked, bounded however many ask; the rest are counted.
KEPT_REQUESTS = 20
# Escalation alerts remembered, so an episode is told once across roll-overs.
KEPT_ALERTS = 8
GITHUB_WAIT = (
    "GitHub: Temporal asks again by itself; the pending activity shows the attempt, "
    "the last answer and the next try"
)
PROVIDER_WAIT = (
    "provider: Temporal retries the delete; the pending activity shows the attempt, "
    "the last error and the next try"
)
NO_REGISTRATION = "no registration recorded"


class DeletionState(BaseModel):
    """Everything one deletion knows that the store does not hold."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runner: str
    run: int = Field(default=1, ge=1)  # which run of this deletion (continue-as-new)
    scale_set: str = ""
    # A stored scale set that fails the record check may not fit a search attribute (the
    # server terminates a run whose upsert it refuses): shown, never searchable.
    scale_set_searchable: bool = False
    status: str = ""  # the record's instance status as last read or written
    step: DeletionStep = DeletionStep.READ
    shown_step: DeletionStep | None = None  # KeeperStep; None until the lane is entered
    force: bool = False
    requests: tuple[str, ...] = ()
    earlier_requests: int = 0  # requests no longer kept in `requests`
    cancel_requested: bool = False
    # The registration step: the mode it asks GitHub in, and what it found.
    mode: DeregisterMode = DeregisterMode.WAIT
    busy_since: datetime | None = None
    escalated: bool = False
    github: str = "-"  # the last GitHub answer
    github_attempts: int = 0
    # A refused GitHub token: what it needs, until GitHub accepts one.
    attention: str | None = None
    # None while the registration step goes on; then whether the registration is left for
    # after the compute is gone, and what happened to it (the audit of `-> deleting`).
    registration_left: bool | None = None
    registration: str | None = None
    provider: str = "-"  # the last provider answer
    provider_attempts: int = 0
    # The provider id that may still exist because a forced delete gave up on it.
    leaked_provider_id: str | None = None
    # The record is tombstoned: the runner is deleted, and `background` says what still runs.
    tombstoned: bool = False
    recovered: bool = False  # the final write went through the audited recovery path
    background: str | None = None
    decision: str | None = None  # busy-timeout decision, escalation, leak
    error: str | None = None  # what an operator must do
    # What the deletion waits on while Temporal retries a call for it (no history event per
    # attempt); the pending activity has the attempt count, last answer and next try.
    waiting: str | None = None
    alerted: tuple[str, ...] = ()  # keys of the escalation alerts raised


class RunnerDeletionInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    runner: RunnerName
    # keeper's own callers send their request as an update with the start (so a request
    # that joins a running deletion is handled the same way) and leave this unset; a start
    # by hand (`temporal workflow start`) is an operator's request.
    request: DeletionRequest | None = Field(default_factory=DeletionRequest)
    # Set only by the deletion itself when it continues as new.
    carry: DeletionState | None = None

    @field_validator("runner", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        return value.strip() if isinstance(value, str) else value


def _with(state: DeletionState, **changes: object) -> DeletionState:
    return state.model_copy(update=changes)


# ---- who asks ------------------------------------------------------------------------


def new_state(runner: str) -> DeletionState:
    return DeletionState(runner=runner)


def request_label(request: DeletionRequest) -> str:
    label = request.requested_by.value + (" (force)" if request.force else "")
    return f"{label}: {request.reason}" if request.reason else label


def requested(state: DeletionState, request: DeletionRequest) -> DeletionState:
    kept = (*state.requests, request_label(request))
    dropped = max(0, len(kept) - KEPT_REQUESTS)
    return _with(
        state,
        requests=kept[dropped:],
        earlier_requests=state.earlier_requests + dropped,
        force=state.force or request.force,
    )


def under_way(state: DeletionState) -> bool:
    """Whether a request joins a deletion already asked for (rather than starting it)."""
    return (
        bool(state.requests or state.earlier_requests)
        or state.run > 1
        or (state.step is not DeletionStep.READ)
    )


def refusal(state: DeletionState, request: DeletionRequest) -> str | None:
    """Why the deletion refuses a request (its sender is told), or None to accept it.

    Until the record is tombstoned every request is accepted: it joins, and a force changes
    how the deletion goes on. Once it is, the deletion is finished (whatever still runs
    behind it) and a request can change nothing; a runner that has taken the name since is
    another runner, for a deletion of its own once this one closes."""
    if not (state.tombstoned or state.step is DeletionStep.DONE):
        return None
    still = f" (still running behind it: {state.background})" if state.background else ""
    asked = "a force" if request.force else "a request"
    return (
        f"the deletion of runner {state.runner} has finished: its record is tombstoned{still}, "
        f"so {asked} changes nothing. If a new runner has taken the name since, ask again "
        "once this deletion has closed"
    )


def last_request(state: DeletionState) -> str:
    """The audit reason of the lane entry."""
    return state.requests[-1] if state.requests else "deletion requested"


def cancel_seen(state: DeletionState) -> DeletionState:
    return _with(state, cancel_requested=True)


def continued(state: DeletionState) -> DeletionState:
    """The state the next run starts from."""
    return _with(state, run=state.run + 1)


# ---- where it is ----------------------------------------------------------------------


def moved(
    state: DeletionState,
    step: DeletionStep,
    status: InstanceStatus | None = None,
    *,
    searchable: bool = False,
) -> DeletionState:
    """The deletion shows `step` now; KeeperStep follows the steps operators search for, and
    any other one a move marks `searchable` (moving off busy_wait or escalated, say)."""
    changes: dict[str, object] = {"step": step}
    if status is not None:
        changes["status"] = status.value
    if searchable or step in SEARCHABLE_STEPS:
        changes["shown_step"] = step
    return _with(state, **changes)


def entered(state: DeletionState, record: RunnerRecord) -> DeletionState:
    """On the lane, with the record as the lane write found or left it. A record already
    forced (a forced deletion whose run ended early) stays forced."""
    state = _with(
        state,
        scale_set=record.scale_set,
        scale_set_searchable=not any(p.startswith("scale_set:") for p in record.problems),
        status=record.instance_status.value,
        force=state.force or record.instance_status is S.PENDING_FORCE_DELETE,
    )
    if state.shown_step is not None:
        return state  # a later run, or a second entry: KeeperStep already says where
    deleted = record.instance_status is S.DELETED
    first = DeletionStep.DONE if deleted else DeletionStep.PENDING_DELETE
    return moved(state, first, searchable=True)


def read(state: DeletionState, record: RunnerRecord) -> DeletionState:
    """The record's status as a lane write found or left it."""
    return _with(state, status=record.instance_status.value)


def unknown_runner(state: DeletionState) -> DeletionState:
    return _with(state, error=f"no runner named {state.runner!r} in the runner store")


def waiting_on(state: DeletionState, what: str | None) -> DeletionState:
    return _with(state, waiting=what)


def escalation_alert_key(
    before: DeletionState, after: DeletionState, first_run_id: str
) -> str | None:
    """The key of the alert a move raises: one when the deletion turns to an operator, none
    while KeeperStep already shows `escalated` (a run resuming an escalation), and one per
    episode (what escalated it names the episode)."""
    if after.step is not DeletionStep.ESCALATED or before.shown_step is DeletionStep.ESCALATED:
        return None
    key = f"{first_run_id}/{after.decision or ''}"
    return None if key in after.alerted else key


def alerted(state: DeletionState, key: str) -> DeletionState:
    return _with(state, alerted=(*state.alerted, key)[-KEPT_ALERTS:])


# ---- the registration ------------------------------------------------------------------


def registration_begins(state: DeletionState, record: RunnerRecord) -> DeletionState:
    """The registration step starts, or a rolled-over run resumes it, in the mode it was
    in; a force's mode when forced, or once the record says `deleting` (the compute's
    deletion was decided: one answer, and a registration that cannot go yet is cleaned up
    after it)."""
    if state.force or record.instance_status is S.DELETING:
        state = _with(state, mode=DeregisterMode.FORCE)
    if state.step in REGISTRATION_STEPS:
        return state
    return moved(state, DeletionStep.DEREGISTER)


def no_registration(state: DeletionState) -> DeletionState:
    return _with(
        state, github=NO_REGISTRATION, registration_left=False, registration=NO_REGISTRATION
    )


def registration_done(state: DeletionState, *, left: bool, audit: str) -> DeletionState:
    return _with(state, registration_left=left, registration=audit, waiting=None)


# ---- the compute -----------------------------------------------------------------------


def provider_answered(state: DeletionState, result: ProviderResult) -> DeletionState:
    return _with(
        state,
        waiting=None,
        provider=describe_provider(result.answer),
        provider_attempts=state.provider_attempts + result.attempts,
    )


def escalate(state: DeletionState, why: str, error: str, **changes: object) -> DeletionState:
    """An operator decides: KeeperStep shows `escalated`, and `error` says what to do."""
    escalated = _with(
        state, escalated=True, decision=f"{why}; escalated to an operator", error=error, **changes
    )
    return moved(escalated, DeletionStep.ESCALATED)


def instance_escalated(state: DeletionState, why: str) -> DeletionState:
    """A provider id no provider takes: asking again will not help."""
    return escalate(
        state,
        why,
        f"{why}. Fix the record, or run `keeper runner delete {state.runner} --force`: "
        "keeper then tries the provider a few times and records the instance as a leak",
    )


def force_answered(state: DeletionState, why: str) -> DeletionState:
    """A force answered the escalation: KeeperStep moves off `escalated`."""
    answered = _with(
        state, escalated=False, error=None, decision=f"{why}; answered: force requested"
    )
    return moved(answered, DeletionStep.PROVIDER_DELETE, searchable=True)


def provider_gave_up(state: DeletionState, cause: str, attempts: int) -> DeletionState:
    """A forced delete used up its attempts: the instance is recorded as a leak next."""
    gave_up = _with(
        state,
        waiting=None,
        provider=cause,
        provider_attempts=state.provider_attempts + attempts,
    )
    return moved(gave_up, DeletionStep.PROVIDER_DELETE, searchable=True)


def leak_reason(state: DeletionState, attempts: int) -> str:
    return f"forced delete gave up after {attempts} attempts: {state.provider}"


def leak_recorded(state: DeletionState, instance_id: str, reason: str) -> DeletionState:
    return _with(
        state, decision=f"leak recorded: {instance_id} ({reason})", leaked_provider_id=instance_id
    )


# ---- the end ---------------------------------------------------------------------------


def tombstoned(state: DeletionState, finish: FinishResult) -> DeletionState:
    """The record is `deleted`, the tombstone in the same write: the runner is deleted,
    whatever the registration cleanup after it still does."""
    changes: dict[str, object] = {"tombstoned": True, "recovered": finish.recovered}
    if finish.recovered:
        changes["decision"] = (
            f"final write refused (row was {finish.found_status}); "
            "finished through the audited recovery path"
        )
    return _with(state, **changes)


def cleanup_started(state: DeletionState, runner_id: int, attempts: int) -> DeletionState:
    return _with(
        state,
        waiting=GITHUB_WAIT,
        background=(
            f"removing GitHub registration {runner_id} now that the runner is offline "
            f"(at most {attempts} tries); the runner is deleted whatever it answers"
        ),
    )


def cleanup_ended(
    state: DeletionState, *, answer: str | None, attempts: int = 0, cause: str | None = None
) -> DeletionState:
    """The cleanup's end: GitHub's answer, or why it was left (GitHub removes offline
    runners by itself after 14 days)."""
    ended = _with(state, waiting=None, background=None)
    if cause is not None:
        decision = (
            f"{state.decision or ''}; registration still present ({cause}): GitHub "
            "removes offline runners after 14 days"
        ).lstrip("; ")
        return _with(ended, decision=decision)
    return _with(
        ended, github=answer or state.github, github_attempts=state.github_attempts + attempts
    )


def finished(state: DeletionState, record: RunnerRecord | None) -> DeletionState:
    """Done; `record` is the tombstone, or None when a new runner has taken the name."""
    return moved(state, DeletionStep.DONE, record.instance_status if record else None)
