"""A closed watch shows the job as it left it, the verdict `finished`, and nothing left to
approve (domain/watch/closing.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keeper.domain.watch.cadence import WatchPhase
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.closing import close_view
from keeper.domain.watch.models import (
    Proposal,
    ProposalKind,
    ProposalState,
    TimelineEntry,
    WatchOutcome,
    WatchView,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def proposal(number: int, state: ProposalState) -> Proposal:
    return Proposal(
        id=f"restart-{number}",
        kind=ProposalKind.RESTART,
        reason="zombie",
        key=f"k{number}",
        created_at=T0,
        state=state,
    )


def stalled() -> WatchView:
    """What the last check left: the job running, stalled, restart-1 carried out and the
    check that ran meanwhile proposing restart-2."""
    return WatchView(
        job_id="/alice/tokenize",
        phase=WatchPhase.FINISHED,
        job_state="running",
        verdict="stalled",
        verdict_reason="probe_confirmed_stall",
        escalations=["the coordinator is a zombie"],
        proposals=[proposal(1, ProposalState.DONE), proposal(2, ProposalState.PENDING)],
        timeline=[
            TimelineEntry(
                at=T0, phase=WatchPhase.STEADY, verdict="stalled", reason="x", attempt="a0"
            )
        ],
        next_check_at=T0 + timedelta(minutes=1),
    )


@pytest.mark.parametrize(
    ("result", "job_state", "reason"),
    [
        (
            JobWatchResult(
                job_id="/alice/tokenize", outcome=WatchOutcome.RESTARTED, job_state="killed",
                new_job_id="/alice/tokenize-r1",
            ),
            "killed",
            "restarted as /alice/tokenize-r1 (job killed)",
        ),
        (
            JobWatchResult(
                job_id="/alice/tokenize", outcome=WatchOutcome.STOPPED, job_state="killed"
            ),
            "killed",
            "stopped on an approval (job killed)",
        ),
        (
            JobWatchResult(
                job_id="/alice/tokenize", outcome=WatchOutcome.SUCCEEDED, job_state="succeeded"
            ),
            "succeeded",
            "the job succeeded",
        ),
        (
            JobWatchResult(
                job_id="/alice/tokenize", outcome=WatchOutcome.UNWATCHED, job_state="running"
            ),
            "running",
            "unwatched; the job runs on, no longer judged",
        ),
    ],
    ids=["restarted", "stopped", "succeeded", "unwatched"],
)  # fmt: skip
def test_a_closed_view_is_final_and_leaves_nothing_to_approve(
    result: JobWatchResult, job_state: str, reason: str
) -> None:
    closed = close_view(stalled(), result, T0 + timedelta(minutes=2), timeline_limit=100)
    assert (closed.job_state, closed.verdict, closed.verdict_reason) == (
        job_state, "finished", reason,
    )  # fmt: skip
    assert closed.phase is WatchPhase.FINISHED and closed.next_check_at is None
    assert closed.pending() == [] and closed.escalations == []
    states = {p.id: p.state for p in closed.proposals}
    assert states == {"restart-1": ProposalState.DONE, "restart-2": ProposalState.WITHDRAWN}
    withdrawn = closed.proposals[1]
    assert withdrawn.outcome == f"the watch ended ({result.outcome.value}) before anyone decided"
    last = closed.timeline[-1]
    assert (last.verdict, last.reason, last.attempt) == ("finished", reason, "a0")


def test_the_closing_entry_keeps_the_timeline_bounded() -> None:
    view = stalled()
    full = view.model_copy(update={"timeline": view.timeline * 10})
    result = JobWatchResult(job_id=view.job_id, outcome=WatchOutcome.FAILED, job_state="failed")
    closed = close_view(full, result, T0, timeline_limit=10)
    assert len(closed.timeline) == 10 and closed.timeline_dropped == 1
    assert closed.verdict_reason == "the job ended failed"
