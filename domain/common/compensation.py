"""How a compensation that keeps failing is paced and reported.

Compensation runs in bounded windows: each window is one activity call whose retries stop
at the window's schedule-to-close. A window that runs out hands its last error back to the
workflow, which reports it and opens the next one. Windows double up to a cap, so however
long a deletion stays stuck, the history grows by a few events per window.

The server ends a window early when its next retry would not fit, by up to one retry
interval (`margin`). So windows are planned as boundaries counted from the start, and the
window that crosses `stuck_after` is planned to end `margin` past it: it runs out at or
after the threshold, never before, and that is when the status turns stuck.

| the window that ran out | the next one ends |
|---|---|
| before `stuck_after` | at `stuck_after` + `margin`, or one doubled window on if two fit first |
| at or after `stuck_after` (stuck) | one doubled window on, the window at most `cap` |

A run that carries on an earlier run's compensation follows its own settings (`resumed`):
the window the earlier run planned was planned for the earlier threshold.

| carried progress, under this run's `stuck_after` | what the run starts from |
|---|---|
| already stuck | the progress as it is |
| the threshold has passed | stuck now (it alerts now, not at the planned window's end) |
| the threshold ends before the planned window | that window, cut to end `margin` past it |
| otherwise | the progress as it is |
"""

from __future__ import annotations

from datetime import datetime, timedelta

from keeper.domain.common.durations import format_duration
from keeper.domain.tpu.models import CompensationPolicy, CompensationProgress

# A window shorter than this costs history events for nothing.
MIN_WINDOW = timedelta(minutes=1)


def start(
    now: datetime, policy: CompensationPolicy, first: timedelta, margin: timedelta
) -> CompensationProgress:
    window = min(first, policy.stuck_after + margin)
    return CompensationProgress(started_at=now, window=window, window_ends_at=now + window)


def schedule_to_close(progress: CompensationProgress, now: datetime) -> timedelta:
    """What is left of the current window, and never less than the floor."""
    return max(progress.window_ends_at - now, MIN_WINDOW)


def after_window(
    progress: CompensationProgress,
    now: datetime,
    last_error: str,
    policy: CompensationPolicy,
    cap: timedelta,
    margin: timedelta,
) -> CompensationProgress:
    """The progress once a window ran out at `now` with `last_error`."""
    stuck_since = progress.stuck_since
    if stuck_since is None and now - progress.started_at >= policy.stuck_after:
        stuck_since = now
    boundary = max(progress.window_ends_at, now)
    window = min(progress.window * 2, cap)
    ends_at = boundary + window
    if stuck_since is None:
        threshold_end = progress.started_at + policy.stuck_after + margin
        # No sliver of a window just before the threshold: this one reaches it.
        if threshold_end - ends_at < window:
            ends_at = threshold_end
        ends_at = max(ends_at, boundary + MIN_WINDOW)
    return progress.model_copy(
        update={
            "window": window,
            "window_ends_at": ends_at,
            "windows_ended": progress.windows_ended + 1,
            "last_error": last_error,
            "stuck_since": stuck_since,
        }
    )


def resumed(
    progress: CompensationProgress,
    now: datetime,
    policy: CompensationPolicy,
    margin: timedelta,
) -> CompensationProgress:
    """The progress an earlier run carried, under this run's `stuck_after`."""
    if progress.stuck_since is not None:
        return progress
    threshold = progress.started_at + policy.stuck_after
    if now >= threshold:
        return progress.model_copy(update={"stuck_since": now})
    if threshold + margin < progress.window_ends_at:
        return progress.model_copy(update={"window_ends_at": threshold + margin})
    return progress


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


def describe(progress: CompensationProgress, now: datetime) -> str:
    """The compensation line of a status: stuck with what to do, or still retrying."""
    return describe_stuck(progress, now) if progress.stuck else describe_retrying(progress)


def status_fields(progress: CompensationProgress, now: datetime) -> dict[str, object]:
    """What a BootstrapStatus says about a compensation between its windows."""
    return {
        "compensation": describe(progress, now),
        "compensation_stuck": progress.stuck,
        "compensation_stuck_since": progress.stuck_since,
        "compensation_last_error": progress.last_error,
    }
