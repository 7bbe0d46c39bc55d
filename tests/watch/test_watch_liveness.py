"""Table tests for the liveness arbiter (domain/watch/liveness.py): named traces of ticks and
probes, each with the verdict and reason expected after every tick, among them the readings
of the poll_pipeline false stall (a negative session-CPU rate on a healthy 20-core run) and
the process busy for hours then hung."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

from keeper.domain.watch.liveness import MAX_EVIDENCE, confirm, judge
from keeper.domain.watch.liveness_models import (
    CounterIdentity,
    CounterKind,
    CounterReading,
    Judgement,
    LivenessPolicy,
    LivenessReason,
    LivenessState,
    LivenessVerdict,
    ProbeReading,
    Source,
    StallPath,
    ThreadState,
    Tick,
)

V, R, K = LivenessVerdict, LivenessReason, CounterKind
POLICY = LivenessPolicy()  # 3 ticks AND 10 min; fallback 2 ticks; gap max(60 s, 1 x interval)
EVERY = 60.0
PID, HOST, START = 184938, "w-3", 5_000
BUSY_3H = 20 * 3 * 3600.0  # 20 cores for 3 hours: 216,000 core-s of lifetime CPU
PER_TICK = 1_207.2  # 20.12 cores (2,012 % CPU) for 60 s
NO_PROBE = object()  # the tick must not ask for a probe


def proc(
    value: float, pid: int = PID, host: str = HOST, start: int = START, attempt: int = 0
) -> CounterReading:
    identity = CounterIdentity(kind=K.PROC, host=host, pid=pid, start_time=start, attempt=attempt)
    return CounterReading(identity=identity, value=value)


def session(value: float, scope: str = "") -> CounterReading:
    identity = CounterIdentity(kind=K.SESSION, host=HOST, scope=scope)
    return CounterReading(identity=identity, value=value)


def progress(done: float, stage: str = "stage0-Map", attempt: int = 0) -> CounterReading:
    identity = CounterIdentity(kind=K.PROGRESS, host="coord", attempt=attempt, scope=stage)
    return CounterReading(identity=identity, value=done)


def tick(i: float, *counters: CounterReading, every: float = EVERY, **kw: Any) -> Tick:
    kw.setdefault("task_running", True)
    return Tick(at=i * every, expected_interval=every, counters=counters, **kw)


def probe(rise: int, start_2: int = START, pid: int = PID, start_1: int = START) -> ProbeReading:
    base = int(BUSY_3H * 100)
    return ProbeReading(
        pid=pid, start_time_1=start_1, ticks_1=base, start_time_2=start_2, ticks_2=base + rise,
        seconds_apart=2.0, host=HOST,
    )  # fmt: skip


def run(
    ticks: list[Tick], probes: dict[int, ProbeReading | None] | None = None,
    policy: LivenessPolicy = POLICY, state: LivenessState | None = None,
) -> tuple[list[str], list[Judgement]]:  # fmt: skip
    """Each tick judged (and confirmed when asked, with probes[i]): 'verdict/reason' per tick."""
    probes = probes or {}
    state = state or LivenessState()
    seen: list[str] = []
    judged: list[Judgement] = []
    for i, t in enumerate(ticks):
        j = judge(policy, state, t)
        if j.wants_probe:
            assert i in probes, f"tick {i} asked for a probe: {j.evidence}"
            assert j.verdict is not V.STALLED  # only confirm() turns a verdict to stalled
            # The probe is read right after the check that asked for it.
            j = confirm(policy, j.state, probes[i], at=t.at + 2.0)
        else:
            assert i not in probes, f"tick {i} was expected to ask for a probe: {j.evidence}"
        assert j.evidence, f"tick {i} gave no evidence"
        state = j.state
        seen.append(f"{j.verdict}/{j.reason}")
        judged.append(j)
    return seen, judged


def rows(*parts: tuple[str, int]) -> list[str]:
    return [label for label, n in parts for _ in range(n)]


# ---- the traces ----------------------------------------------------------------------------

# The seed's healthy 20-core run: the per-process counter advances ~2,012 % CPU every tick
# while the session total falls from its running max 83,824 to 9,351 and then moves at
# -0.18, -0.88, -0.56 and +0.82 cores (the negative rates that flipped it to stalled).
SESSION_SEED = [83_824.0, 9_351.0, 9_340.2, 9_287.4, 9_253.8, 9_303.0]
SEED_HEALTHY = [
    tick(i, proc(BUSY_3H + PER_TICK * i), session(SESSION_SEED[i % 6]), log_advanced=False,
         threads=ThreadState.ACTIVE)
    for i in range(16)
]  # fmt: skip
# The same run read with no per-process counter: only the session total and the probe.
SEED_SESSION_ONLY = [tick(i, session(SESSION_SEED[i]), log_advanced=False) for i in range(6)]


def hung_after(advancing: int, total: int, **kw: Any) -> list[Tick]:
    """Busy for three hours, advancing for `advancing` ticks, then flat: the lifetime %CPU
    stays near 2,000 while utime+stime stops."""
    out = []
    for i in range(total):
        value = BUSY_3H + PER_TICK * min(i, advancing)
        out.append(tick(i, proc(value), log_advanced=False, **kw))
    return out


def flat(n: int, every: float = EVERY, first: int = 0, **kw: Any) -> list[Tick]:
    return [tick(first + i, proc(BUSY_3H), every=every, log_advanced=False, **kw) for i in range(n)]


DEAD = dict(log_advanced=False, threads=ThreadState.UNKNOWN, task_running=True)
STALLED_AT_13 = rows(("unknown/no_baseline", 1), ("running/advancing", 3),
                     ("running/gate_not_met", 9), ("stalled/probe_confirmed_stall", 1))  # fmt: skip


@dataclass
class Case:
    name: str
    ticks: list[Tick]
    expect: list[str]
    probes: dict[int, ProbeReading | None] = field(default_factory=dict)
    policy: LivenessPolicy = POLICY


CASES = [
    Case("seed: negative session rates on a healthy 20-core run are never a stall", SEED_HEALTHY,
         rows(("unknown/no_baseline", 1), ("running/advancing", 15))),
    Case("seed: session only, negative rates are resets; the probe vetoes the fallback",
         SEED_SESSION_ONLY + [tick(6 + i, session(9_303.0), log_advanced=False)
                              for i in range(10)],
         rows(("unknown/gate_not_met", 5), ("running/advancing", 1), ("running/gate_not_met", 9),
              ("running/probe_vetoed", 1)),
         probes={15: probe(4_024)}),
    Case("busy for hours then hung: stalled once the gate is met, not before",
         hung_after(3, 15), [*STALLED_AT_13, "stalled/still_stalled"],
         probes={13: probe(0)}),
    Case("ticks alone never stall: 20 flat ticks in 95 s",
         [tick(i, proc(BUSY_3H), every=5.0) for i in range(20)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 19))),
    Case("time alone never stalls: 40 min in 4 flat ticks of a 5-tick gate",
         [tick(i, proc(BUSY_3H), every=600.0) for i in range(6)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 4),
              ("stalled/probe_confirmed_stall", 1)),
         probes={5: probe(0)}, policy=LivenessPolicy(stall_ticks=5)),
    Case("pid reuse is a reset, not idle: the streak starts over",
         flat(8) + [tick(8, proc(1_000.0, start=START + 777))]
         + [tick(9 + i, proc(1_000.0, start=START + 777)) for i in range(3)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 7), ("unknown/reset", 1),
              ("unknown/gate_not_met", 3))),
    Case("an attempt change is a reset",
         [*hung_after(2, 5), tick(5, proc(BUSY_3H + 2 * PER_TICK, attempt=1))],
         rows(("unknown/no_baseline", 1), ("running/advancing", 2), ("running/gate_not_met", 2),
              ("unknown/reset", 1))),
    Case("a counter that falls under one identity is a reset",
         [tick(0, proc(500.0)), tick(1, proc(900.0)), tick(2, proc(400.0))],
         ["unknown/no_baseline", "running/advancing", "unknown/reset"]),
    Case("a restarted process with no CPU yet hides nothing: the flat one still counts",
         [tick(0, proc(BUSY_3H)), tick(1, proc(BUSY_3H), proc(0.0, pid=9, start=9))],
         ["unknown/no_baseline", "unknown/gate_not_met"]),
    Case("an observer gap suppresses the stall it would have reached, and re-baselines",
         [*flat(10), tick(10 + 30, proc(BUSY_3H)), *flat(3, first=41)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 9),
              ("unknown/observer_gap", 1), ("unknown/gate_not_met", 3))),
    Case("a clock that reads backwards is an observer gap",
         [tick(0, proc(100.0)), tick(1, proc(200.0)), tick(0.5, proc(300.0))],
         ["unknown/no_baseline", "running/advancing", "unknown/observer_gap"]),
    Case("late within the threshold is no gap: 110 s after a 60 s tick",
         [tick(0, proc(100.0)), Tick(at=110.0, expected_interval=60, counters=(proc(200.0),))],
         ["unknown/no_baseline", "running/advancing"]),
    Case("recovery: the first positive delta after a stall is running at once",
         [*hung_after(3, 15), tick(15, proc(BUSY_3H + 3 * PER_TICK + 0.5))],
         [*STALLED_AT_13, "stalled/still_stalled", "running/advancing"],
         probes={13: probe(0)}),
    Case("probe veto: running, and the no-progress count starts over",
         hung_after(3, 16),
         rows(("unknown/no_baseline", 1), ("running/advancing", 3),
              ("running/gate_not_met", 9), ("running/probe_vetoed", 1),
              ("running/gate_not_met", 2)),
         probes={13: probe(312)}),
    Case("a start-time change inside the probe is a reset; the next tick asks again",
         hung_after(3, 15),
         [*STALLED_AT_13[:-1], "unknown/probe_reset", "stalled/probe_confirmed_stall"],
         probes={13: probe(0, start_2=START + 1), 14: probe(0)}),
    Case("a probe of another process is no signal",
         hung_after(3, 15), [*STALLED_AT_13[:-1], "unknown/probe_reset", "unknown/probe_reset"],
         probes={13: probe(0, pid=PID + 1), 14: probe(0, start_1=START + 5, start_2=START + 5)}),
    Case("no probe with the counters answering: unknown, never stalled on the rate's word",
         hung_after(3, 15),
         [*STALLED_AT_13[:-1], "unknown/probe_unavailable", "unknown/probe_unavailable"],
         probes={13: None, 14: None}),
    Case("fallback: a dead worker with no signal at all is still flagged",
         [tick(i, **DEAD) for i in range(12)],
         rows(("unknown/gate_not_met", 10), ("stalled/fallback_persistence", 1),
              ("stalled/still_stalled", 1)),
         probes={10: None}),
    Case("fallback: a zombie coordinator, flat progress, no CPU counter",
         [tick(i, progress(40.0), threads=ThreadState.ZOMBIE) for i in range(12)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 9),
              ("stalled/fallback_persistence", 1), ("stalled/still_stalled", 1)),
         probes={10: None}),
    Case("fallback: a probe that works vetoes it",
         [tick(i, **DEAD) for i in range(12)],
         rows(("unknown/gate_not_met", 10), ("running/probe_vetoed", 1),
              ("running/gate_not_met", 1)),
         probes={10: probe(50)}),
    Case("fallback: a probe that works and is flat confirms it",
         [tick(i, **DEAD) for i in range(11)],
         rows(("unknown/gate_not_met", 10), ("stalled/probe_confirmed_stall", 1)),
         probes={10: probe(0)}),
    Case("nothing answered (the controller is down): no signal, never stalled",
         [Tick(at=i * EVERY, expected_interval=EVERY) for i in range(15)],
         rows(("unknown/no_signal", 15))),
    Case("a live dispatch loop keeps the no-CPU fallback from starting",
         [tick(i, log_advanced=False, threads=ThreadState.WAITING) for i in range(15)],
         rows(("unknown/no_signal", 15))),
    Case("live threads alone are not progress: a flat process still stalls",
         hung_after(3, 14, threads=ThreadState.ACTIVE), STALLED_AT_13,
         probes={13: probe(0)}),
    Case("new log lines mean running while the CPU is flat",
         [*flat(3), tick(3, proc(BUSY_3H), log_advanced=True)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 2),
              ("running/advancing", 1))),
    Case("the progress counter rising means running while the CPU is flat",
         [tick(i, proc(BUSY_3H), progress(10.0 + (i >= 3))) for i in range(4)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 2),
              ("running/advancing", 1))),
    Case("a stage change within one attempt means running",
         [tick(0, proc(BUSY_3H), progress(10.0)), tick(1, proc(BUSY_3H), progress(10.0)),
          tick(2, proc(BUSY_3H), progress(0.0, stage="stage1-Reduce → Scatter"))],
         ["unknown/no_baseline", "unknown/gate_not_met", "running/advancing"]),
    Case("a new attempt's progress is a reset, not a stage change",
         [tick(0, proc(BUSY_3H), progress(10.0)), tick(1, proc(BUSY_3H), progress(10.0)),
          tick(2, proc(BUSY_3H), progress(3.0, attempt=1))],
         ["unknown/no_baseline", "unknown/gate_not_met", "unknown/reset"]),
    Case("the session rising is outranked by flat per-process counters",
         [tick(i, proc(BUSY_3H), session(1_000.0 * i)) for i in range(3)],
         ["unknown/no_baseline", "unknown/gate_not_met", "unknown/gate_not_met"]),
    Case("the task is not RUNNING: not judged, and the streak starts over",
         [*flat(10), tick(10, proc(BUSY_3H), task_running=False), *flat(1, first=11)],
         rows(("unknown/no_baseline", 1), ("unknown/gate_not_met", 9),
              ("unknown/not_running", 1), ("unknown/gate_not_met", 1))),
    Case("an unavailable read holds the streak and the delta spans it",
         [*hung_after(3, 5), tick(5, log_advanced=False, threads=ThreadState.ACTIVE),
          tick(6, proc(BUSY_3H + 3 * PER_TICK + 60.0))],
         rows(("unknown/no_baseline", 1), ("running/advancing", 3),
              ("running/gate_not_met", 1), ("unknown/no_signal", 1),
              ("running/advancing", 1))),
    Case("an unavailable read while stalled is unknown; flat again asks a new probe",
         [*hung_after(3, 14), tick(14, threads=ThreadState.ACTIVE, log_advanced=False),
          *hung_after(3, 16)[15:]],
         [*STALLED_AT_13, "unknown/no_signal", "stalled/probe_confirmed_stall"],
         probes={13: probe(0), 15: probe(0)}),
    Case("two readings under one identity are ambiguous and ignored",
         [tick(0, proc(100.0)), tick(1, proc(200.0), proc(300.0))],
         ["unknown/no_baseline", "unknown/no_signal"]),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_trace_reaches_each_expected_verdict(case: Case) -> None:
    seen, _ = run(case.ticks, case.probes, case.policy)
    assert seen == case.expect


def test_every_reason_is_reached_by_some_trace() -> None:
    reached = {e.split("/")[1] for c in CASES for e in c.expect}
    # awaiting_probe is what judge() says before confirm(); run() shows confirm's answer.
    asked = {R.NO_PROBE_ASKED.value, R.AWAITING_PROBE.value}
    assert reached | asked == {r.value for r in R}


def test_judge_asks_for_the_probe_and_keeps_the_verdict_until_it_comes() -> None:
    state = LivenessState()
    for t in hung_after(3, 14):
        j = judge(POLICY, state, t)
        state = j.state
    assert (j.verdict, j.reason, j.wants_probe) == (V.RUNNING, R.AWAITING_PROBE, True)
    assert j.probe_target == proc(BUSY_3H).identity
    # The probe's answer carries the tick's evidence after its own sentence.
    confirmed = confirm(POLICY, state, probe(0), at=state.last_at)
    assert confirmed.evidence[1:] == j.evidence
    assert confirmed.state.pending is None and confirmed.state.pending_evidence == ()


# ---- the seed's readings, word for word ----------------------------------------------------


def test_the_seed_run_says_why_in_the_operators_words() -> None:
    _, judged = run(SEED_HEALTHY[:3])
    second = judged[1].evidence
    assert "pid 184938 on w-3 (attempt 0) advanced 1,207 core-s in 60 s (2,012% CPU)" in second
    assert "session CPU on w-3 fell from 83,824 to 9,351: a reset, no signal" in second
    assert (
        judged[2].evidence[1] == "session CPU on w-3 fell from 9,351 to 9,340: a reset, no signal"
    )


def test_a_confirmed_stall_cites_the_probe_and_the_gate() -> None:
    _, judged = run(hung_after(3, 14), {13: probe(0)})
    evidence = judged[13].evidence
    assert evidence[0].startswith("probe: pid 184938 on w-3 at 21,600,000 ticks did not advance")
    assert (
        "no progress for 10 ticks over 10 min; a stall needs 3 ticks and 10 min, both" in evidence
    )


def test_evidence_is_capped() -> None:
    many = [proc(float(p), pid=p, start=p) for p in range(1, 40)]
    j = judge(POLICY, LivenessState(), tick(0, *many))
    assert len(j.evidence) == MAX_EVIDENCE and j.evidence[-1] == "... and 29 more"


# ---- the probe and the state ---------------------------------------------------------------


def test_the_probe_target_is_the_busiest_flat_process() -> None:
    idle_helper = proc(12.0, pid=7, start=7)
    ticks = [tick(i, proc(BUSY_3H), idle_helper, log_advanced=False) for i in range(14)]
    state = LivenessState()
    for t in ticks:
        j = judge(POLICY, state, t)
        state = j.state
    assert j.wants_probe and j.probe_target == proc(BUSY_3H).identity


def test_the_probe_goes_to_the_process_last_seen_working_not_a_bigger_idle_one() -> None:
    big_idle = proc(BUSY_3H * 10, pid=7, start=7)
    ticks = [tick(i, proc(100.0 + 50 * min(i, 2)), big_idle, log_advanced=False)
             for i in range(15)]  # fmt: skip
    state = LivenessState()
    for t in ticks:
        j = judge(POLICY, state, t)
        state = j.state
    assert j.wants_probe and j.probe_target == proc(200.0).identity


def test_the_fallback_names_no_process_it_never_saw_working() -> None:
    state = judge(POLICY, LivenessState(), tick(0, proc(BUSY_3H))).state
    for i in range(1, 12):
        j = judge(POLICY, state, tick(i, **DEAD))
        state = j.state
    assert j.wants_probe and j.probe_target is None
    assert j.state.pending is StallPath.FALLBACK


def test_a_probe_nobody_asked_for_changes_nothing_unless_it_shows_life() -> None:
    state = judge(POLICY, LivenessState(), tick(0, proc(BUSY_3H))).state
    j = confirm(POLICY, state, probe(0), at=2.0)
    assert (j.verdict, j.reason, j.state) == (V.UNKNOWN, R.NO_PROBE_ASKED, state)
    alive = confirm(POLICY, state, probe(5), at=2.0)
    assert (alive.verdict, alive.reason) == (V.RUNNING, R.PROBE_VETOED)


def test_verdict_changes_are_counted() -> None:
    ticks = [*hung_after(3, 15), tick(15, proc(BUSY_3H + 3 * PER_TICK + 9))]
    _, judged = run(ticks, {13: probe(0)})
    # unknown -> running -> stalled -> running
    assert judged[-1].state.verdict_changes == 3
    assert judged[-1].state.ticks == 16


def test_the_state_survives_continue_as_new_and_stays_small() -> None:
    _, judged = run(hung_after(3, 14), {13: probe(0)})
    state = judged[-1].state
    assert LivenessState.model_validate_json(state.model_dump_json()) == state
    assert len(state.readings) == 1


def test_the_memory_is_capped_to_the_largest_readings() -> None:
    policy = LivenessPolicy(max_remembered=3)
    many = [proc(float(p), pid=p, start=p) for p in range(1, 10)]
    state = judge(policy, LivenessState(), tick(0, *many)).state
    assert [r.value for r in state.readings] == [9.0, 8.0, 7.0]


def test_an_answered_empty_listing_forgets_the_processes() -> None:
    state = judge(POLICY, LivenessState(), tick(0, proc(5.0))).state
    kept = judge(POLICY, state, tick(1)).state
    gone = judge(POLICY, state, tick(1, available=frozenset({Source.PROC}))).state
    assert len(kept.readings) == 1 and gone.readings == ()


def test_judge_is_deterministic() -> None:
    first, _ = run(SEED_HEALTHY)
    again, _ = run(SEED_HEALTHY)
    assert first == again


# ---- the policy ----------------------------------------------------------------------------


def test_the_gap_threshold_is_the_larger_of_the_floor_and_the_factor() -> None:
    assert POLICY.gap_threshold(30.0) == 60.0
    assert POLICY.gap_threshold(300.0) == 300.0
    assert LivenessPolicy(observer_gap_factor=0.5).gap_threshold(300.0) == 150.0


@pytest.mark.parametrize(
    "settings",
    [{"stall_ticks": "3"}, {"stall_ticks": 0}, {"stall_min_elapsed": "ten minutes"},
     {"probe_min_cpu_ticks": 0}, {"min_cpu_seconds": 0}, {"surprise": 1}],
)  # fmt: skip
def test_the_policy_rejects_bad_settings_by_name(settings: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as err:
        LivenessPolicy(**settings)
    assert next(iter(settings)) in str(err.value)


def test_the_policy_reads_human_durations() -> None:
    policy = LivenessPolicy.model_validate({"stall_min_elapsed": "15m", "observer_gap": "90s"})
    assert policy.stall_min_elapsed == timedelta(minutes=15)
    assert policy.observer_gap == timedelta(seconds=90)


def test_a_no_signal_tick_holds_the_streak_without_growing_it() -> None:
    _, judged = run([*hung_after(3, 6), tick(6, log_advanced=False, threads=ThreadState.ACTIVE)])
    before, after = judged[5].state, judged[6].state
    assert judged[6].reason is R.NO_SIGNAL
    assert (after.no_progress_ticks, after.no_progress_since) == (
        before.no_progress_ticks,
        before.no_progress_since,
    )
    assert before.no_progress_ticks == 2


def test_a_judgement_and_the_policy_cross_the_temporal_payload_converter() -> None:
    _, judged = run(hung_after(3, 14), {13: probe(0)})
    converter = pydantic_data_converter.payload_converter
    payloads = converter.to_payloads([judged[-1], POLICY])
    back = converter.from_payloads(payloads, [Judgement, LivenessPolicy])
    assert back == [judged[-1], POLICY]
    assert back[0].state.verdict is V.STALLED


def test_a_running_task_alone_is_no_evidence_of_a_stall() -> None:
    """Only ListTasks answers (logs, dumps and execs all fail): control-plane failures, not
    a quiet job. However long it lasts, nothing is stalled and no probe is asked for."""
    ticks = [tick(i, available=frozenset({Source.TASK})) for i in range(40)]
    seen, _ = run(ticks)
    assert all(s.startswith("unknown/") for s in seen), seen


# ---- the session counter alone, reused pids, and a late probe --------------------------------

# The seed's session totals read alone: no /proc answer, no thread dump, no log line either way.
SESSION_FALLING = [83_824.0, 60_000.0, 41_000.0, 9_351.0, 9_000.0, 5_000.0]
SESSION_STANDING = [9_351.0] * 6


def _judge_all(ticks: list[Tick]) -> list[Judgement]:
    """Each tick judged; a probe asked for is not available (no process was ever read), as
    the watch decides when no process can be named."""
    state, seen = LivenessState(), []
    for t in ticks:
        j = judge(POLICY, state, t)
        if j.wants_probe:
            j = confirm(POLICY, j.state, None, at=t.at)
        state = j.state
        seen.append(j)
    return seen


@pytest.mark.parametrize("values", [SESSION_FALLING, SESSION_STANDING], ids=["falling", "standing"])
@pytest.mark.parametrize("every", [60.0, 300.0, 1800.0])
def test_the_session_total_alone_is_never_a_stall(values: list[float], every: float) -> None:
    """The session CPU total answering is no sign of a quiet job: each exec may see another
    set of processes. Read on its own, for hours, it never makes a stall."""
    ticks = [tick(i, session(v), every=every) for i, v in enumerate(values + values[-1:] * 10)]
    seen = _judge_all(ticks)
    assert all(j.verdict is not V.STALLED for j in seen), [f"{j.verdict}/{j.reason}" for j in seen]
    assert not any(j.wants_probe for j in seen)
    assert all(j.verdict is V.UNKNOWN for j in seen)


def test_a_session_total_beside_a_quiet_source_still_lets_the_fallback_start() -> None:
    """The session total does not hide a real quiet sign: no new log lines, the process listing
    answering with no process of the job, or a zombie dump still count."""
    ticks = [tick(i, session(9_351.0), log_advanced=False) for i in range(12)]
    seen = _judge_all(ticks)
    assert seen[10].verdict is V.STALLED and seen[10].reason is R.FALLBACK_PERSISTENCE


REUSED = START + 777
TINY = 0.004  # under min_cpu_seconds: the new process has not burned a clock tick yet


def _reused(value: float) -> CounterReading:
    return proc(value, start=REUSED)


def test_a_reused_pid_with_no_cpu_yet_does_not_inherit_the_old_streak() -> None:
    """pid 184938 stood flat for 8 minutes, then the pid was reused by a new process that has
    not burned a clock tick. The old process's streak is not the new one's: whatever the probe
    says, the new process is not stalled before it was itself seen flat for the gate."""
    reuse_at = 8
    ticks = [*flat(reuse_at)] + [
        tick(reuse_at + i, _reused(TINY + 0.001 * i), log_advanced=False) for i in range(20)
    ]
    need = POLICY.stall_min_elapsed.total_seconds()
    state = LivenessState()
    for i, t in enumerate(ticks):
        j = judge(POLICY, state, t)
        if j.wants_probe:
            assert j.probe_target == _reused(0.0).identity
            assert t.at - reuse_at * EVERY >= need, f"tick {i}: a probe asked for on the old streak"
            flat_new = ProbeReading(
                pid=PID, start_time_1=REUSED, ticks_1=1, start_time_2=REUSED, ticks_2=1,
                seconds_apart=2.0, host=HOST,
            )  # fmt: skip
            j = confirm(POLICY, j.state, flat_new, at=t.at + 2.0)
        if j.verdict is V.STALLED:
            assert t.at - reuse_at * EVERY >= need, f"tick {i}: stalled {t.at - 480:.0f} s in"
        state = j.state
    assert state.verdict is V.STALLED  # the new process, once it met the gate itself


def test_a_reused_pid_is_a_reset_that_starts_the_streak_over() -> None:
    seen, judged = run(
        [*flat(8), tick(8, _reused(TINY)), *[tick(9 + i, _reused(TINY)) for i in range(3)]]
    )
    assert seen[8] == "unknown/reset"
    assert judged[8].state.no_progress_ticks == 0
    assert seen[9:] == ["unknown/gate_not_met"] * 3
    assert judged[-1].state.no_progress_since == 8 * EVERY


LATE = 12 * 60.0  # the worker that was to take the probe was down for 12 minutes


def _asked(ticks: list[Tick]) -> tuple[LivenessState, float]:
    state = LivenessState()
    for t in ticks:
        j = judge(POLICY, state, t)
        state = j.state
    assert j.wants_probe
    return state, ticks[-1].at


def test_a_probe_that_comes_long_after_its_check_is_an_observer_gap() -> None:
    state, asked_at = _asked(hung_after(3, 14))
    j = confirm(POLICY, state, probe(0), at=asked_at + LATE)
    assert (j.verdict, j.reason) == (V.UNKNOWN, R.OBSERVER_GAP)
    # Nothing is judged across the gap: the counters start over, and so does the streak.
    assert j.state.readings == () and j.state.no_progress_ticks == 0
    assert j.state.pending is None and j.state.last_at == asked_at + LATE
    assert any("12 min" in line for line in j.evidence), j.evidence


def test_a_fallback_probe_that_comes_long_after_its_check_is_no_persistence() -> None:
    state, asked_at = _asked([tick(i, **DEAD) for i in range(11)])
    assert state.pending is StallPath.FALLBACK
    j = confirm(POLICY, state, None, at=asked_at + LATE)
    assert (j.verdict, j.reason) == (V.UNKNOWN, R.OBSERVER_GAP)


def test_a_probe_on_time_still_confirms() -> None:
    state, asked_at = _asked(hung_after(3, 14))
    j = confirm(POLICY, state, probe(0), at=asked_at + 2.0 + 30.0)
    assert (j.verdict, j.reason) == (V.STALLED, R.PROBE_CONFIRMED_STALL)


def test_after_a_late_probe_the_stall_needs_a_whole_new_gate() -> None:
    state, asked_at = _asked(hung_after(3, 14))
    j = confirm(POLICY, state, probe(0), at=asked_at + LATE)
    state = j.state
    first = (asked_at + LATE) / EVERY
    verdicts = []
    for i in range(1, 13):
        j = judge(POLICY, state, tick(first + i, proc(BUSY_3H), log_advanced=False))
        if j.wants_probe:
            j = confirm(POLICY, j.state, probe(0), at=(first + i) * EVERY + 2.0)
        state = j.state
        verdicts.append(f"{j.verdict}/{j.reason}")
    assert verdicts[0] == "unknown/no_baseline"
    assert verdicts.index("stalled/probe_confirmed_stall") == 10, verdicts


def test_a_process_listing_that_answers_ends_the_fallback_streak() -> None:
    """The fallback counts checks with no CPU counter at all. A check whose listing shows the
    job's processes (here a new one, first read with no CPU yet: a baseline) is not one: the
    quiet streak starts over after it rather than carry on to a fallback stall."""
    fresh = proc(0.0, pid=9, start=9)
    ticks = [*(tick(i, **DEAD) for i in range(9)), tick(9, fresh, log_advanced=False)]
    ticks += [tick(10 + i, **DEAD) for i in range(12)]
    seen, judged = run(ticks, probes={19: None})
    assert seen[9] == "unknown/no_baseline"
    assert judged[9].state.quiet_ticks == 0
    assert "stalled" not in "".join(seen[:19]), seen
    assert seen[19] == "stalled/fallback_persistence", seen  # a whole new fallback gate
