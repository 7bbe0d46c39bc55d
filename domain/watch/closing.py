"""What a closed watch shows: the job as keeper last knew or left it, the watch's own end as
its verdict, and no proposal anyone could still answer. Pure: the workflow applies it once,
as it closes, so the status query, the current details and the search attributes
(KeeperStep, Verdict) of a closed watch say the same true thing.

| the watch ended   | job state                               | verdict reason                    |
|-------------------|-----------------------------------------|-----------------------------------|
| succeeded, failed | the job's terminal state                | the job succeeded / ended <state> |
| stopped           | what the approved stop left (killed)    | stopped on an approval            |
| restarted         | what the stop left (killed)             | restarted as <new job>            |
| missing           | missing                                 | iris does not know the job        |
| unwatched         | the last state read (the job runs on)   | unwatched; the job runs on        |
"""

from __future__ import annotations

from datetime import datetime

from keeper.domain.watch.cadence import WatchPhase
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.models import FINISHED, TimelineEntry, WatchOutcome, WatchView
from keeper.domain.watch.state import WatchState

# The verdict reason of a closed watch, by its outcome, filled from the result.
REASONS = {
    WatchOutcome.SUCCEEDED: "the job succeeded",
    WatchOutcome.FAILED: "the job ended {job_state}",
    WatchOutcome.STOPPED: "stopped on an approval (job {job_state})",
    WatchOutcome.RESTARTED: "restarted as {new_job} (job {job_state})",
    WatchOutcome.MISSING: "iris does not know the job",
    WatchOutcome.UNWATCHED: "unwatched; the job runs on, no longer judged",
}


def closing_reason(result: JobWatchResult) -> str:
    new_job = result.new_job_id or "a new job"
    return REASONS[result.outcome].format(job_state=result.job_state, new_job=new_job)


def close_view(
    view: WatchView, result: JobWatchResult, now: datetime, timeline_limit: int
) -> WatchView:
    """The view as the watch closes with `result`."""
    reason = closing_reason(result)
    why = f"the watch ended ({result.outcome.value}) before anyone decided"
    last = view.timeline[-1] if view.timeline else None
    entry = TimelineEntry(
        at=now,
        phase=WatchPhase.FINISHED,
        verdict=FINISHED,
        reason=reason,
        attempt=last.attempt if last is not None else None,
    )
    return view.model_copy(
        update={
            "phase": WatchPhase.FINISHED,
            "job_state": result.job_state,
            "verdict": FINISHED,
            "verdict_reason": reason,
            "proposals": view.withdraw_pending(why, now),
            **view.timeline_with(entry, timeline_limit),
            "next_check_at": None,
            "escalations": [],
        }
    )


def closed(
    state: WatchState, result: JobWatchResult, now: datetime, timeline_limit: int
) -> WatchState:
    """The state as the watch closes with `result`."""
    return state.model_copy(update={"view": close_view(state.view, result, now, timeline_limit)})
