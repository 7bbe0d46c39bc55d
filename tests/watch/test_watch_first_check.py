"""The first check of a job reads its coordinator's log from the start: a backlog written
before the watch looked. Lines older than the check's window (the interval it waited plus the
observer gap) are no new progress, judged by their timestamps against the check's time; a job
hung for hours is not reported advancing on its first check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keeper.domain.watch import assess as A
from keeper.domain.watch.calls import CpuSeen, JobWatchInput, Observation, TaskSeen
from keeper.domain.watch.names import AttemptRef, JobPhase
from keeper.domain.watch.policy import WatchPolicy
from keeper.domain.watch.progress import LogLine, digest
from keeper.domain.watch.state import ReadingState
from keeper.domain.watch.threads import DumpReading, ThreadState

POLICY = WatchPolicy()  # smoke interval 30 s, observer gap 1 min: a window of 90 s
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
COORD = "/alice/tok/ab12cd34-p0-a0-coord"
LATEST = AttemptRef(
    parent="/alice/tok",
    group="ab12cd34-p0-a0",
    pipeline=0,
    attempt=0,
    coord=COORD,
    coord_state=JobPhase.RUNNING,
    workers="/alice/tok/ab12cd34-p0-a0-workers",
    workers_state=JobPhase.RUNNING,
)


def _log(newest: datetime, lines: int = 40) -> list[LogLine]:
    """`lines` progress lines a few seconds apart, the newest at `newest`."""
    out = []
    for i in range(lines):
        at = newest - timedelta(seconds=3 * (lines - 1 - i))
        text = (
            f"[stage0-Map] {4000 + i}/5000 complete, 8 in-flight, 992 queued, "
            "8/8 workers alive, 0 dead"
        )
        out.append(
            LogLine(
                at_ms=int(at.timestamp() * 1000),
                level="INFO",
                source="stdout",
                text=text,
                task_id=f"{COORD}/0",
            )
        )
    return out


def _observation(newest: datetime, *, from_start: bool) -> Observation:
    return Observation(
        at=NOW,
        job_state=JobPhase.RUNNING,
        latest=LATEST,
        coordinator=TaskSeen(task_id=f"{COORD}/0", state=JobPhase.RUNNING, worker_id="w-1"),
        coordinator_log=digest(_log(newest)),
        coordinator_log_from_start=from_start,
        threads=DumpReading(state=ThreadState.WAITING, evidence="_coordinator_loop"),
        cpu=[CpuSeen(task_id=f"{COORD}/0", host="w-1", attempt=0, pid=7, start_time=5, ticks=9)],
        reading=ReadingState(attempt=LATEST.group, coordinator_cursor=4096 * 7000),
    )


def _first_check(newest: datetime, *, from_start: bool = True) -> tuple[str, str, list[str]]:
    state = A.new_state(JobWatchInput(job_id="/alice/tok"), NOW)
    done = A.assess(POLICY, state, _observation(newest, from_start=from_start), NOW, 1000.0)
    view = done.state.view
    return view.verdict, view.verdict_reason, list(view.evidence)


@pytest.mark.parametrize(
    "hung_for", [timedelta(hours=3), timedelta(minutes=10), timedelta(seconds=91)]
)
def test_a_backlog_older_than_the_window_is_no_new_progress(hung_for: timedelta) -> None:
    verdict, reason, evidence = _first_check(NOW - hung_for)
    assert (verdict, reason) == ("unknown", "no_baseline"), evidence
    assert not any("new log lines" in line for line in evidence), evidence


@pytest.mark.parametrize("age", [timedelta(0), timedelta(seconds=20), timedelta(seconds=89)])
def test_a_backlog_written_within_the_window_is_progress(age: timedelta) -> None:
    verdict, reason, evidence = _first_check(NOW - age)
    assert (verdict, reason) == ("running", "advancing"), evidence


def test_lines_read_after_a_cursor_are_new_whatever_their_stamps() -> None:
    """Past the first read, the cursor says what is new; a controller clock behind keeper's
    must not turn fresh lines into silence."""
    verdict, reason, _ = _first_check(NOW - timedelta(hours=3), from_start=False)
    assert (verdict, reason) == ("running", "advancing")


def test_the_first_read_of_an_empty_log_is_still_no_new_lines() -> None:
    state = A.new_state(JobWatchInput(job_id="/alice/tok"), NOW)
    obs = _observation(NOW, from_start=True).model_copy(update={"coordinator_log": digest([])})
    tick = A.to_tick(POLICY, state, obs, 1000.0)
    assert tick.log_advanced is False
