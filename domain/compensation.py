"""How a compensation that keeps failing is paced and reported.

Compensation runs in bounded windows: each window is one activity call whose retries stop
at the window's schedule-to-close. A window that runs out hands its last error back to the
workflow, which reports it and opens the next one. Windows double up to a cap, so however
long a deletion stays stuck, the history grows by a few events per window; one window ends
exactly at the stuck threshold, so "stuck" shows on time.

| elapsed since compensation began | next window |
|---|---|
| below `stuck_after` | double the last, cut to end at `stuck_after` (never below the floor) |
| `stuck_after` or more (stuck) | double the last, up to the cap |
"""

from __future__ import annotations

from datetime import datetime, timedelta

from domain.bootstrap_models import CompensationPolicy, CompensationProgress
from domain.durations import format_duration

# A window shorter than this costs history events for nothing.
MIN_WINDOW = timedelta(minutes=1)


def first_window(policy: CompensationPolicy, first: timedelta) -> timedelta:
    return max(min(first, policy.stuck_after), MIN_WINDOW)


def start(now: datetime, policy: CompensationPolicy, first: timedelta) -> CompensationProgress:
    return CompensationProgress(started_at=now, window=first_window(policy, first))


def after_window(
    progress: CompensationProgress,
    now: datetime,
    last_error: str,
    policy: CompensationPolicy,
    cap: timedelta,
) -> CompensationProgress:
    """The progress once a window ran out at `now` with `last_error`."""
    elapsed = now - progress.started_at
    stuck_since = progress.stuck_since
    if stuck_since is None and elapsed >= policy.stuck_after:
        stuck_since = now
    doubled = progress.window * 2
    if stuck_since is None:
        window = max(min(doubled, policy.stuck_after - elapsed), MIN_WINDOW)
    else:
        window = min(doubled, cap)
    return progress.model_copy(
        update={
            "window": window,
            "windows_ended": progress.windows_ended + 1,
            "last_error": last_error,
            "stuck_since": stuck_since,
        }
    )


def advice(last_error: str) -> str:
    """What an operator can do about a stuck deletion, by what the last error says."""
    text = last_error.lower()
    if "permission" in text or "roles/tpu.admin" in text:
        return (
            "grant roles/tpu.admin to the worker's service account; the deletion is retried "
            "until it succeeds"
        )
    if "unauthenticated" in text or "credentials" in text:
        return "fix the worker's Application Default Credentials; the deletion is retried"
    return (
        "fix the cause, or delete the resource by hand (gcloud compute tpus queued-resources "
        "delete --force); keeper goes on until it reads NotFound, then finishes"
    )


def describe_stuck(progress: CompensationProgress, now: datetime) -> str:
    """One line for the status: how long, the last error and what to do next."""
    took = format_duration(timedelta(seconds=round((now - progress.started_at).total_seconds())))
    error = progress.last_error or "no answer yet"
    return f"stuck for {took}: {error}; to unblock it: {advice(error)}"


def describe_retrying(progress: CompensationProgress) -> str:
    error = progress.last_error or "no answer yet"
    return f"running: force-delete, then confirm NotFound; retrying after: {error}"
