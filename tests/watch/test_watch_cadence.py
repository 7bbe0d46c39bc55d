"""Table tests for the check cadence and the monitoring lifecycle's phases
(domain/watch/cadence.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from keeper.domain.watch.cadence import (
    CadencePolicy,
    PhaseSignals,
    PhaseState,
    StageTimes,
    WatchPhase,
    next_interval,
    next_phase,
)
from keeper.domain.watch.names import JobPhase

W, P = WatchPhase, JobPhase
POLICY = CadencePolicy()
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
M = timedelta(minutes=1)

# (case, phase, recent stage durations, interval)
INTERVALS: list[tuple[str, WatchPhase, list[timedelta], timedelta]] = [
    ("smoke checks every smoke_interval", W.SMOKE, [20 * M], timedelta(seconds=30)),
    ("failure follows the retry closely", W.FAILURE, [20 * M], M),
    ("steady before any transition", W.STEADY, [], 5 * M),
    ("steady: the median stage duration", W.STEADY, [4 * M, 7 * M, 30 * M], 7 * M),
    ("steady: an even count's median", W.STEADY, [4 * M, 6 * M], 5 * M),
    ("steady: short stages clamp to min_interval", W.STEADY, [10 * timedelta(seconds=1)], 2 * M),
    ("steady: long stages clamp to max_interval", W.STEADY, [3 * 60 * M, 2 * 60 * M], 30 * M),
    ("steady: only the recent stages count", W.STEADY, [60 * M] * 10 + [3 * M] * 5, 3 * M),
    ("steady: non-positive durations are ignored", W.STEADY, [timedelta(0), -M, 8 * M], 8 * M),
    ("escalated keeps the steady cadence", W.ESCALATED, [12 * M], 12 * M),
    ("finished: nothing more to check", W.FINISHED, [12 * M], timedelta(0)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "phase", "durations", "interval"), INTERVALS,
                         ids=[r[0] for r in INTERVALS])  # fmt: skip
def test_each_phase_checks_at_its_own_interval_and_steady_at_the_clamped_median_stage(
    case: str, phase: WatchPhase, durations: list[timedelta], interval: timedelta
) -> None:
    assert next_interval(POLICY, phase, durations) == interval


def test_every_phase_has_an_interval_row() -> None:
    assert {row[1] for row in INTERVALS} == set(WatchPhase)


def test_policy_rejects_a_min_above_the_max() -> None:
    with pytest.raises(ValueError, match="min_interval"):
        CadencePolicy(min_interval="1h", max_interval="30m")
    assert CadencePolicy(smoke_duration="2m").smoke_duration == 2 * M


def _state(phase: WatchPhase, since: float = 0, attempt: str | None = "a0", **kw: Any):
    return PhaseState(phase=phase, since=T0 + since * M, attempt=attempt, **kw)


def _signals(minutes: float, attempt: str | None = "a0", **kw: Any) -> PhaseSignals:
    return PhaseSignals(at=T0 + minutes * M, attempt=attempt, **kw)


RUNNING = {"coordinator": P.RUNNING, "workers": P.RUNNING}

# (row of the table, case, state, signals, next phase)
PHASES: list[tuple[int, str, PhaseState, PhaseSignals, WatchPhase]] = [
    (1, "the job ended", _state(W.STEADY), _signals(9, job_terminal=True), W.FINISHED),
    (1, "even during smoke", _state(W.SMOKE), _signals(1, job_terminal=True), W.FINISHED),
    (2, "finished stays finished", _state(W.FINISHED), _signals(9, **RUNNING), W.FINISHED),
    (3, "a retry during steady", _state(W.STEADY), _signals(9, "a1", **RUNNING), W.FAILURE),
    (3, "a retry during smoke", _state(W.SMOKE), _signals(1, "a1"), W.FAILURE),
    (3, "the first attempt seen is no retry", _state(W.SMOKE, attempt=None),
     _signals(1, "a0"), W.SMOKE),
    (3, "a tick that lists no attempt is no retry", _state(W.STEADY), _signals(9, None),
     W.STEADY),
    (4, "the new attempt's coordinator appears", _state(W.FAILURE, attempt="a1",
     failed_attempt="a0"), _signals(10, "a1", coordinator=P.PENDING), W.SMOKE),
    (5, "the new attempt has no coordinator yet", _state(W.FAILURE, attempt="a1",
     failed_attempt="a0"), _signals(10, "a1"), W.FAILURE),
    (5, "failed and no retry came", _state(W.FAILURE, failed_attempt="a0"),
     _signals(10, **RUNNING), W.FAILURE),
    (6, "an early error", _state(W.SMOKE), _signals(1, early_error=True, **RUNNING), W.FAILURE),
    (6, "the workers died in smoke", _state(W.SMOKE),
     _signals(1, coordinator=P.RUNNING, workers=P.KILLED), W.FAILURE),
    (7, "running and the smoke window passed", _state(W.SMOKE), _signals(5, **RUNNING),
     W.STEADY),
    (7, "running but the window has not passed", _state(W.SMOKE), _signals(4.9, **RUNNING),
     W.SMOKE),
    (7, "the window passed but workers not running", _state(W.SMOKE),
     _signals(9, coordinator=P.RUNNING, workers=P.BUILDING), W.SMOKE),
    (8, "the coordinator died in steady", _state(W.STEADY),
     _signals(60, coordinator=P.FAILED, workers=P.RUNNING), W.FAILURE),
    (8, "a succeeded coordinator is no failure", _state(W.STEADY),
     _signals(60, coordinator=P.SUCCEEDED, workers=P.RUNNING), W.STEADY),
    (9, "an escalation opens", _state(W.STEADY), _signals(60, escalated=True, **RUNNING),
     W.ESCALATED),
    (10, "the escalation clears", _state(W.ESCALATED), _signals(60, **RUNNING), W.STEADY),
    (11, "still escalated", _state(W.ESCALATED), _signals(60, escalated=True), W.ESCALATED),
    (11, "steady stays steady", _state(W.STEADY), _signals(60, **RUNNING), W.STEADY),
    (11, "an escalation in smoke keeps smoke", _state(W.SMOKE), _signals(1, escalated=True),
     W.SMOKE),
]  # fmt: skip


@pytest.mark.parametrize(("row", "case", "state", "signals", "phase"), PHASES,
                         ids=[f"{r[0]}: {r[1]}" for r in PHASES])  # fmt: skip
def test_each_case_moves_the_watch_to_the_phase_its_table_row_gives(
    row: int, case: str, state: PhaseState, signals: PhaseSignals, phase: WatchPhase
) -> None:
    assert next_phase(POLICY, state, signals).phase is phase


def test_every_row_of_the_phase_table_is_reached() -> None:
    assert {row[0] for row in PHASES} == set(range(1, 12))


def test_a_retry_goes_through_failure_and_back_to_smoke_for_the_new_attempt() -> None:
    state = PhaseState()
    trace = []
    ticks = [
        _signals(0, "a0", coordinator=P.PENDING),
        _signals(2, "a0", **RUNNING),
        _signals(6, "a0", **RUNNING),  # the smoke window passed
        _signals(30, "a0", coordinator=P.RUNNING, workers=P.KILLED),  # workers killed
        _signals(31, "a1"),  # the retry's children are listed, no coordinator state yet
        _signals(32, "a1", coordinator=P.BUILDING),
        _signals(35, "a1", **RUNNING),
        _signals(37.5, "a1", **RUNNING),  # 5 minutes after the new smoke began
        _signals(90, "a1", job_terminal=True),
    ]
    for signals in ticks:
        state = next_phase(POLICY, state, signals)
        trace.append((state.phase, state.attempt, state.failed_attempt))
    assert trace == [
        (W.SMOKE, "a0", None),
        (W.SMOKE, "a0", None),
        (W.STEADY, "a0", None),
        (W.FAILURE, "a0", "a0"),
        (W.FAILURE, "a1", "a0"),
        (W.SMOKE, "a1", "a0"),
        (W.SMOKE, "a1", "a0"),
        (W.STEADY, "a1", "a0"),
        (W.FINISHED, "a1", "a0"),
    ]
    assert state.since == T0 + 90 * M


def test_the_phase_clock_starts_when_the_phase_does() -> None:
    state = next_phase(POLICY, PhaseState(), _signals(0, **RUNNING))
    assert state.since == T0
    state = next_phase(POLICY, state, _signals(3, **RUNNING))
    assert state.since == T0  # still smoke: the window counts from its start
    state = next_phase(POLICY, state, _signals(5, **RUNNING))
    assert (state.phase, state.since) == (W.STEADY, T0 + 5 * M)


def test_stage_times_record_transition_durations() -> None:
    times = StageTimes()
    for minute, stage in [(0, "e|s0"), (3, "e|s0"), (4, "e|s1"), (10, "e|s2"), (10, "e|s2")]:
        times = times.seen(stage, T0 + minute * M)
    assert times.stage == "e|s2" and times.since == T0 + 10 * M
    assert times.durations == (4 * M, 6 * M)
    assert next_interval(POLICY, W.STEADY, times.durations) == 5 * M


def test_stage_times_stay_bounded() -> None:
    times = StageTimes()
    for i in range(50):
        times = times.seen(f"s{i}", T0 + i * M, keep=10)
    assert len(times.durations) == 10
