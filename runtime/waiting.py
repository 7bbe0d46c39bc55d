"""keeper's expected waits, as Temporal shows them.

An activity that waits (a TPU phase's poll, a health round, a watch's check that is not due)
raises to be retried: the retry policy is the poll, and retries write no history. The Temporal
UI and `temporal workflow describe` then show the pending activity's last failure next to
`Attempt 243 / UNLIMITED`. For a wait, that failure is one of type WAITING whose message says
what the activity waits for and when it looks next, and it carries no stack trace
(WaitAwareFailureConverter, on keeper's data converter): a trace of where keeper raised would
read as if something broke.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import temporalio.api.failure.v1
from temporalio import activity
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

WAITING = "Waiting"


def next_look_in(info: activity.Info) -> timedelta | None:
    """The retry policy's delay after this attempt (Temporal's own rule: the initial interval
    times the coefficient per attempt, up to the maximum interval, by default 100 initial
    intervals); None when the activity has no policy to say."""
    policy = info.retry_policy
    if policy is None:
        return None
    ceiling = policy.maximum_interval or policy.initial_interval * 100
    # In float seconds, capped before a timedelta is made of it: attempt 10 000 of a doubling
    # policy is a number no timedelta holds.
    steps = min(info.attempt - 1, 64)
    seconds = policy.initial_interval.total_seconds() * policy.backoff_coefficient**steps
    return timedelta(seconds=min(seconds, ceiling.total_seconds()))


def waiting(
    what: str, *details: object, seen: str = "", next_look: timedelta | None = None
) -> ApplicationError:
    """The failure a waiting activity raises: "waiting for `what`, next look at 10:42:07
    UTC; last look: `seen`". `next_look` overrides the retry policy's delay for this retry
    (a check due at a time of its own); otherwise the policy's delay is what the message
    names. `details` go along for the workflow to read when the wait times out."""
    delay = next_look if next_look is not None else next_look_in(activity.info())
    text = f"waiting for {what}"
    if delay is not None:
        text += f", next look at {datetime.now(UTC) + delay:%H:%M:%S} UTC"
    if seen:
        text += f"; last look: {seen}"
    return ApplicationError(
        text,
        *details,
        type=WAITING,
        # Benign: the SDK logs it at debug and counts it as no failure.
        category=ApplicationErrorCategory.BENIGN,
        next_retry_delay=next_look,
    )


class WaitAwareFailureConverter(DefaultFailureConverter):
    """Temporal's default conversion, without the stack trace of a WAITING failure."""

    def to_failure(
        self,
        exception: BaseException,
        payload_converter: PayloadConverter,
        failure: temporalio.api.failure.v1.Failure,
    ) -> None:
        if isinstance(exception, ApplicationError) and exception.type == WAITING:
            # Not formatted only to be dropped: formatting a trace reads the source of every
            # frame, about half a millisecond of a worker's CPU on every poll and check.
            exception.with_traceback(None)
        super().to_failure(exception, payload_converter, failure)
        if failure.application_failure_info.type == WAITING:
            failure.stack_trace = ""
