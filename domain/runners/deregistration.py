"""What a runner deletion does with each answer to "remove this registration".

Two tables. `retry_of` runs in the activity: an answer that only means "ask again later"
becomes an activity retry (not a history event), with the delay this table picks. Every
other answer goes back to the workflow, and `next_step` says what the workflow does with
it. Pure and deterministic: the workflow imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from keeper.domain.common.durations import format_duration
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome
from keeper.domain.runners.models import BusyTimeoutAction, DeletionPolicy

# Where a worker reads its GitHub token, when it could not say which one it used.
TOKEN_SOURCES = "KEEPER_GITHUB_TOKEN or runners.github.token_file"


class DeregisterMode(StrEnum):
    """How patient one deregistration call is."""

    WAIT = "wait"  # the first ask: a busy answer comes back so the deletion shows busy_wait
    BUSY = "busy"  # wait out a busy runner up to policy.busy_wait, then answer
    RECHECK = "recheck"  # escalated: ask again every escalation_recheck until it can go
    FORCE = "force"  # an operator forced: answer at once; transient errors retried a few times
    CLEANUP = "cleanup"  # the compute is gone: the offline registration, a bounded number of tries


class Answered(StrEnum):
    """What an answer is, for the two tables below."""

    GONE = "gone"  # removed now or already
    BUSY = "busy"  # running a job
    REFUSED = "refused"  # a 4xx that asking again will not change
    TRANSIENT = "transient"  # 5xx, 429, transport, credentials being fixed


def kind_of(answer: DeregistrationAnswer) -> Answered:
    if answer.done:
        return Answered.GONE
    if answer.busy:
        return Answered.BUSY
    if answer.outcome is DeregistrationOutcome.CLIENT_ERROR:
        return Answered.REFUSED
    return Answered.TRANSIENT


class Why(StrEnum):
    """Why the next try is when it is: shown beside the next try's time."""

    BUSY_POLL = "busy poll"  # the runner runs a job; asked again every busy_poll
    RECHECK = "escalation recheck"  # escalated; asked again every escalation_recheck
    BACKOFF = "backoff"  # an error; doubling from retry_initial to retry_max
    RETRY_AFTER = "retry-after"  # GitHub named the wait (capped at max_retry_after)


# (mode, kind) -> the wait before asking again inside the activity; absent: answer the workflow.
# A backoff's wait may be GitHub's own (retry-after), when it asks for longer.
RETRY_TABLE: dict[tuple[DeregisterMode, Answered], Why] = {
    (DeregisterMode.WAIT, Answered.TRANSIENT): Why.BACKOFF,
    (DeregisterMode.BUSY, Answered.BUSY): Why.BUSY_POLL,  # until the busy bound, see retry_of
    (DeregisterMode.BUSY, Answered.TRANSIENT): Why.BACKOFF,
    (DeregisterMode.RECHECK, Answered.BUSY): Why.RECHECK,
    (DeregisterMode.RECHECK, Answered.REFUSED): Why.RECHECK,
    (DeregisterMode.RECHECK, Answered.TRANSIENT): Why.BACKOFF,
    (DeregisterMode.FORCE, Answered.TRANSIENT): Why.BACKOFF,  # attempts capped by the policy
    (DeregisterMode.CLEANUP, Answered.BUSY): Why.BACKOFF,
    (DeregisterMode.CLEANUP, Answered.REFUSED): Why.BACKOFF,
    (DeregisterMode.CLEANUP, Answered.TRANSIENT): Why.BACKOFF,
}


@dataclass(frozen=True)
class Retry:
    delay: timedelta
    reason: str
    # Waiting on a job, or on an operator, is the expected path rather than a failure.
    benign: bool
    why: Why = Why.BACKOFF


def retry_of(
    answer: DeregistrationAnswer,
    mode: DeregisterMode,
    policy: DeletionPolicy,
    *,
    attempt: int,
    busy_left: timedelta | None,
    report_auth: bool = False,
    token_source: str | None = None,
) -> Retry | None:
    """None: return the answer to the workflow. A Retry: raise, and ask again after `delay`.

    `busy_left` is what remains of the busy bound in BUSY mode (None outside it).
    `report_auth`: a refused token goes back to the workflow, which shows that it needs
    attention (domain.runners.deregister_steps), instead of being retried unseen.
    `token_source` names where the worker read its token from.
    """
    kind = kind_of(answer)
    if report_auth and answer.outcome is DeregistrationOutcome.AUTH:
        return None
    wait = RETRY_TABLE.get((mode, kind))
    if wait is None:
        return None
    if wait is Why.BUSY_POLL:
        if busy_left is None or busy_left <= timedelta(0):
            return None
        delay = min(policy.busy_poll, busy_left)
        return Retry(
            delay,
            f"runner busy ({answer.message}); asking again in {format_duration(delay)}",
            True,
            Why.BUSY_POLL,
        )
    if wait is Why.RECHECK:
        return Retry(
            policy.escalation_recheck,
            f"escalated: {answer.message}; asking GitHub again every "
            f"{format_duration(policy.escalation_recheck)} until an operator forces the deletion",
            True,
            Why.RECHECK,
        )
    delay = backoff(attempt, policy.retry_initial, policy.retry_max)
    why = Why.BACKOFF
    if answer.retry_after_s and timedelta(seconds=answer.retry_after_s) > delay:
        delay, why = timedelta(seconds=answer.retry_after_s), Why.RETRY_AFTER
    reason = answer.message
    if answer.outcome is DeregistrationOutcome.AUTH:
        source = token_source or TOKEN_SOURCES
        reason += (
            " (needs attention: GitHub refused keeper's token and the deletion cannot progress "
            f"by itself; the token comes from {source})"
        )
    return Retry(delay, reason, False, why)


class Next(StrEnum):
    DONE = "done"  # the registration is gone
    WAIT_BUSY = "wait_busy"  # the runner runs a job: wait for it, up to policy.busy_wait
    ESCALATE = "escalate"  # an operator decides; keeper asks again meanwhile (RECHECK)
    PROCEED = "proceed"  # delete the compute; the registration is cleaned up afterwards


def next_step(answer: DeregistrationAnswer, mode: DeregisterMode, policy: DeletionPolicy) -> Next:
    """What the workflow does with an answer the activity returned."""
    kind = kind_of(answer)
    if kind is Answered.GONE:
        return Next.DONE
    if mode in (DeregisterMode.FORCE, DeregisterMode.CLEANUP):
        return Next.PROCEED
    if kind is Answered.BUSY and mode is DeregisterMode.WAIT:
        return Next.WAIT_BUSY
    if kind is Answered.BUSY and policy.on_busy_timeout is BusyTimeoutAction.PROCEED:
        return Next.PROCEED
    # Busy past the bound, or a refusal asking again will not change: an operator decides.
    return Next.ESCALATE


def backoff(attempt: int, initial: timedelta, maximum: timedelta) -> timedelta:
    """Doubling from `initial` (attempt 1) up to `maximum`."""
    seconds = initial.total_seconds() * (2 ** max(0, min(attempt - 1, 30)))
    return timedelta(seconds=min(seconds, maximum.total_seconds()))
