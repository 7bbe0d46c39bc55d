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
from keeper.domain.watch.models import (
    FINISHED,
    ProposalState,
    TimelineEntry,
    WatchOutcome,
    WatchView,
)
from keeper.domain.watch.state import WatchState


def closing_reason(result: JobWatchResult) -> str:
    outcome = result.outcome
    if outcome is WatchOutcome.SUCCEEDED:
        return "the job succeeded"
    if outcome is WatchOutcome.FAILED:
        return f"the job ended {result.job_state}"
    if outcome is WatchOutcome.STOPPED:
        return f"stopped on an approval (job {result.job_state})"
    if outcome is WatchOutcome.RESTARTED:
        return f"restarted as {result.new_job_id or 'a new job'} (job {result.job_state})"
    if outcome is WatchOutcome.MISSING:
        return "iris does not know the job"
    return "unwatched; the job runs on, no longer judged"


def close_view(
    view: WatchView, result: JobWatchResult, now: datetime, timeline_limit: int
) -> WatchView:
    """The view as the watch closes with `result`."""
    reason = closing_reason(result)
    proposals = [
        p.model_copy(
            update={
                "state": ProposalState.WITHDRAWN,
                "outcome": f"the watch ended ({result.outcome.value}) before anyone decided",
                "decided_at": now,
            }
        )
        if p.state is ProposalState.PENDING
        else p
        for p in view.proposals
    ]
    last = view.timeline[-1] if view.timeline else None
    timeline, dropped = list(view.timeline), view.timeline_dropped
    timeline.append(
        TimelineEntry(
            at=now,
            phase=WatchPhase.FINISHED,
            verdict=FINISHED,
            reason=reason,
            attempt=last.attempt if last is not None else None,
        )
    )
    if len(timeline) > timeline_limit:
        dropped += len(timeline) - timeline_limit
        timeline = timeline[-timeline_limit:]
    return view.model_copy(
        update={
            "phase": WatchPhase.FINISHED,
            "job_state": result.job_state,
            "verdict": FINISHED,
            "verdict_reason": reason,
            "proposals": proposals,
            "timeline": timeline,
            "timeline_dropped": dropped,
            "next_check_at": None,
            "escalations": [],
        }
    )


def closed(
    state: WatchState, result: JobWatchResult, now: datetime, timeline_limit: int
) -> WatchState:
    """The state as the watch closes with `result`."""
    return state.model_copy(update={"view": close_view(state.view, result, now, timeline_limit)})
