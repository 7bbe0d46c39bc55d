"""How Google API errors become Temporal retry decisions.

Transient errors (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL) are re-raised as they are and
retried by the activity's RetryPolicy. RESOURCE_EXHAUSTED is retried after an explicit,
growing delay. Errors no retry can fix fail the activity at once with a message that says
what to do.
"""

from __future__ import annotations

from datetime import timedelta

from google.api_core import exceptions as gexc
from temporalio.exceptions import ApplicationError

NON_RETRYABLE: dict[type[gexc.GoogleAPICallError], str] = {
    gexc.InvalidArgument: "the request was rejected as invalid; fix the slice request",
    gexc.PermissionDenied: (
        "the worker's credentials may not do this; grant roles/tpu.admin to its service account"
    ),
    gexc.Unauthenticated: (
        "the worker has no valid credentials; check Application Default Credentials"
    ),
}


class RateLimitTracker:
    """Counts consecutive RESOURCE_EXHAUSTED answers per polling activity.

    Process-local on purpose: it only shapes the next retry delay, so losing it in a worker
    restart costs at most one shorter wait.
    """

    def __init__(self, base: timedelta, ceiling: timedelta) -> None:
        self._base = base
        self._ceiling = ceiling
        self._streaks: dict[str, int] = {}

    def next_delay(self, key: str, base: timedelta | None = None) -> timedelta:
        streak = self._streaks.get(key, 0) + 1
        self._streaks[key] = streak
        delay = (base or self._base) * (2 ** min(streak, 10))
        return min(delay, self._ceiling)

    def clear(self, key: str) -> None:
        self._streaks.pop(key, None)


def to_application_error(
    err: gexc.GoogleAPICallError, action: str, retry_after: timedelta | None = None
) -> Exception:
    """Returns the exception to raise for `err`."""
    for kind, advice in NON_RETRYABLE.items():
        if isinstance(err, kind):
            return ApplicationError(
                f"{action}: {err.message} ({advice})",
                type=kind.__name__,
                non_retryable=True,
            )
    if isinstance(err, gexc.TooManyRequests | gexc.ResourceExhausted):
        return ApplicationError(
            f"{action}: rate limited by the TPU API ({err.message}); backing off",
            type="RateLimited",
            next_retry_delay=retry_after,
        )
    # Transient: retried by the RetryPolicy. Re-wrapped so the failure carries a clean
    # message and type instead of a gRPC error object the converter has to pick apart.
    return ApplicationError(f"{action}: {err.message}", type=type(err).__name__)


def deletion_error(err: gexc.GoogleAPICallError, action: str) -> ApplicationError:
    """A failed call during a deletion: always retryable, since giving up would leak.

    The advice is the same as for a bootstrap, so the stuck status tells the operator what
    to grant or fix while the deletion goes on retrying.
    """
    advice = next(
        (text for kind, text in NON_RETRYABLE.items() if isinstance(err, kind)),
        "transient; retried",
    )
    return ApplicationError(
        f"{action}: {type(err).__name__}: {err.message} ({advice})", type=type(err).__name__
    )
