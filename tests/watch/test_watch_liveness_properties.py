"""Property-based liveness: the arbiter driven by traces of a true process it cannot see.

The model: one process, busy (advancing 0.05-30 cores) until some tick and truly stalled from
then on (or never), beside an idle helper process with a larger or smaller lifetime total.
Before the stall it may restart (PID reuse, a new attempt, another host); on any tick the
/proc read may fail (alone, or with the session read: a dead exec), the session total may
start over in a fresh scope, the tick may come after an observer gap, and the log, thread
dump and progress counter say what a real coordinator would (new lines and shards only
while the work advances). When the arbiter asks, the probe reads the process it names from
the same true process, or fails.

Whatever the trace:

- no stalled verdict while the true process advances within the gate window: a stall is
  entered only after stall_ticks ticks and stall_min_elapsed of true stall, except by the
  documented fail-safe (fallback_persistence: no process reading for fallback_ticks ticks
  and no probe);
- a true stall is flagged within the gate plus the tick that straddles its start, when the
  process reading and the probe answer and no observer gap falls in that window;
- judge() never enters stalled (only confirm() does), unknown and no-signal reasons never
  come with stalled, and an observer gap tick is always unknown;
- the state stays bounded (it does not grow with the trace) and survives a JSON round trip;
- a trace in which only the session CPU total answers (no /proc, no thread dump, no log line
  either way, no progress counter) is never stalled, whatever the true process does: the
  session total is no evidence of a stall;
- a pid reused during a stall by a new process that has not burned a clock tick yet (its
  start CPU under min_cpu_seconds) does not inherit the old process's streak: a stall on the
  CPU path after the reuse needs stall_ticks ticks and stall_min_elapsed from the first tick
  the new process was read.

`make test` runs a modest, derandomized number of examples.
`KEEPER_PROPERTY_EXAMPLES=10000 pytest -s tests/watch/test_watch_liveness_properties.py` runs more,
from KEEPER_PROPERTY_SEED (or a fixed default), which is printed; the same seed and number
replay the same traces.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, replace
from datetime import timedelta

from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

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

EXAMPLES_ENV = os.environ.get("KEEPER_PROPERTY_EXAMPLES")
EXAMPLES = int(EXAMPLES_ENV or "200")
SEED = int(os.environ.get("KEEPER_PROPERTY_SEED", "20261204"))
V, R, K = LivenessVerdict, LivenessReason, CounterKind
HELPER_PID = 7
NOT_STALLED_REASONS = {
    R.ADVANCING, R.RESET, R.NO_BASELINE, R.NO_SIGNAL, R.NOT_RUNNING, R.OBSERVER_GAP,
    R.GATE_NOT_MET, R.AWAITING_PROBE, R.PROBE_VETOED, R.PROBE_RESET, R.PROBE_UNAVAILABLE,
}  # fmt: skip


@dataclass(frozen=True)
class Step:
    """What happens on one tick of the world (some only before the stall)."""

    jitter: float  # fraction of the interval, early or late
    gap: bool  # the watcher was paused before this tick
    proc_down: bool  # the /proc read failed
    session_down: bool  # the session read failed too (a dead exec)
    session_reset: bool  # the session total starts over in a fresh scope
    restart: str  # "", "pid", "attempt", "host": the process restarted in this interval
    logs: bool | None  # new log lines (only while advancing), none, or the read failed
    threads: ThreadState | None
    probe_down: bool
    shard_done: bool  # a shard finished in this interval (only while advancing)


# How often (in percent) each mishap happens on a tick, per kind of trace.
PROFILES = {
    "clean": {"gap": 0, "proc_down": 0, "restart": 0, "probe_down": 0, "session_reset": 30},
    "flaky": {"gap": 5, "proc_down": 15, "restart": 5, "probe_down": 15, "session_reset": 30},
    "stormy": {"gap": 15, "proc_down": 40, "restart": 15, "probe_down": 40, "session_reset": 60},
}


def _step(word: int, odds: dict[str, int]) -> Step:
    """One tick's happenings decoded from one drawn integer (one draw per tick keeps the
    generation cheap: a trace is up to 120 ticks)."""

    def part(shift: int, size: int) -> int:
        return (word >> shift) % size

    def chance(shift: int, name: str) -> bool:
        return part(shift, 100) < odds[name]

    restart = chance(40, "restart")
    return Step(
        jitter=part(0, 41) / 100 - 0.2,
        gap=chance(6, "gap"),
        proc_down=chance(13, "proc_down"),
        session_down=part(20, 2) == 1,
        session_reset=chance(21, "session_reset"),
        restart=("pid", "attempt", "host")[part(47, 3)] if restart else "",
        logs=(None, False, False, True)[part(49, 4)],
        threads=(None, *ThreadState)[part(51, 5)],
        probe_down=chance(54, "probe_down"),
        shard_done=part(61, 2) == 1,
    )


@dataclass(frozen=True)
class Trace:
    policy: LivenessPolicy
    interval: float
    rate: float  # cores while it works
    helper_cpu: float  # the idle helper's lifetime core-seconds
    stall_at: int | None  # the first tick whose interval saw no work (None: never)
    dead: bool  # from the stall on, the worker answers nothing (exec, dump, probe)
    steps: tuple[Step, ...]
    # Only the session total answers, on every tick: /proc, the dump, the logs and the
    # probe all fail (a hardened container whose /proc cannot be read, logs and dumps down).
    session_only: bool = False
    # During the stall, from this tick, the pid belongs to a new process that started with
    # reuse_cpu core-seconds (under one clock tick) and does no work either.
    reuse_at: int | None = None
    reuse_cpu: float = 0.0


WORDS = st.integers(0, 2**64 - 1)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    interval = draw(st.sampled_from([10.0, 30.0, 60.0, 120.0]))
    policy = LivenessPolicy(
        stall_ticks=draw(st.integers(1, 5)),
        stall_min_elapsed=timedelta(seconds=interval * draw(st.integers(0, 12))),
        fallback_ticks=draw(st.integers(1, 4)),
    )
    n = draw(st.integers(30, 120))
    odds = PROFILES[draw(st.sampled_from(sorted(PROFILES)))]
    stall_at = draw(st.one_of(st.none(), st.integers(1, n - 1)))
    # One trace in five reads the session total alone; one in three with a stall has its
    # pid reused by a new, idle process during it.
    session_only = draw(st.integers(0, 4)) == 0
    reuse_at = None
    if stall_at is not None and stall_at + 1 < n and draw(st.integers(0, 2)) == 0:
        reuse_at = draw(st.integers(stall_at + 1, n - 1))
    return Trace(
        policy=policy,
        interval=interval,
        rate=draw(st.floats(0.05, 30.0)),
        helper_cpu=draw(st.floats(0.0, 50_000.0)),
        stall_at=stall_at,
        dead=draw(st.booleans()),
        steps=tuple(_step(w, odds) for w in draw(st.lists(WORDS, min_size=n, max_size=n))),
        session_only=session_only,
        reuse_at=reuse_at,
        reuse_cpu=draw(st.floats(0.0, 0.009)),
    )


@dataclass
class Proc:
    host: str
    pid: int
    start: int
    attempt: int
    cpu: float  # core-seconds

    @property
    def identity(self) -> CounterIdentity:
        return CounterIdentity(
            kind=K.PROC, host=self.host, pid=self.pid, start_time=self.start, attempt=self.attempt
        )


@dataclass
class Observed:
    at: float
    advancing: bool  # the true process advanced in the interval ending at this tick
    proc_read: bool
    gap: bool
    probe_asked: bool
    probe_given: bool
    path: StallPath | None  # which gate asked for the probe
    judged: Judgement  # judge's answer
    final: Judgement  # confirm's when a probe was asked, else judge's


def simulate(trace: Trace) -> list[Observed]:
    policy, interval, rate, stall_at = trace.policy, trace.interval, trace.rate, trace.stall_at
    true = Proc("w-1", 1000, 50_000, 0, 3 * 3600 * rate)
    helper = Proc("w-1", HELPER_PID, 10, 0, trace.helper_cpu)
    done, stage_attempt = 40.0, 0
    session_scope = 0.0  # what a fresh scope adds to (negative: sees less)
    state, at = LivenessState(), 0.0
    out: list[Observed] = []
    for i, step in enumerate(trace.steps):
        advancing = stall_at is None or i < stall_at
        if trace.dead and not advancing:
            step = replace(step, proc_down=True, session_down=True, probe_down=True,
                           threads=None, logs=False)  # fmt: skip
        if trace.session_only:
            step = replace(step, proc_down=True, session_down=False, probe_down=True,
                           threads=None, logs=None)  # fmt: skip
        if i == trace.reuse_at:
            # The stalled process is gone and a new one has its pid: no work, no CPU yet.
            true = _restarted(true, "pid", i)
            true.cpu = trace.reuse_cpu
        dt = interval * (1 + step.jitter)
        if step.gap and i > 0:
            dt = interval + policy.gap_threshold(interval) + interval * (1.5 + step.jitter)
        at = at + dt if i > 0 else 0.0
        if advancing and i > 0:
            if step.restart:
                true = _restarted(true, step.restart, i)
                true.cpu = rate * dt / 2  # it ran half the interval
                if step.restart == "attempt":
                    stage_attempt += 1
                    done = 0.0
            else:
                true.cpu += rate * dt
            if step.shard_done:
                done += 1
        if step.session_reset:
            session_scope = -(true.cpu + helper.cpu) * 0.9
        counters: list[CounterReading] = []
        if not step.proc_down:
            counters += [_reading(true), _reading(helper)]
        if not (step.proc_down and step.session_down):
            sid = CounterIdentity(kind=K.SESSION, host="w-1")
            total = max(0.0, true.cpu + helper.cpu + session_scope)
            counters.append(CounterReading(identity=sid, value=total))
        if not trace.session_only:
            pid = CounterIdentity(kind=K.PROGRESS, host="coord", attempt=stage_attempt, scope="s0")
            counters.append(CounterReading(identity=pid, value=done))
        tick = Tick(
            at=at, expected_interval=interval, counters=tuple(counters), threads=step.threads,
            log_advanced=(step.logs and advancing) if step.logs is not None else None,
            task_running=True,
            available=frozenset() if step.proc_down else frozenset({Source.PROC}),
        )  # fmt: skip
        judged = judge(policy, state, tick)
        final, given_probe = judged, False
        if judged.wants_probe:
            reading = _probe(judged.probe_target, true, helper, step, i, stall_at, rate)
            given_probe = reading is not None
            # Read right after the check that asked for it (2 s apart).
            final = confirm(policy, judged.state, reading, at=at + 2.0)
        state = final.state
        out.append(
            Observed(
                at=at, advancing=advancing and i > 0, proc_read=not step.proc_down,
                gap=step.gap and i > 0, probe_asked=judged.wants_probe, probe_given=given_probe,
                path=judged.state.pending, judged=judged, final=final,
            )
        )  # fmt: skip
    return out


def _restarted(p: Proc, how: str, i: int) -> Proc:
    if how == "pid":
        return Proc(p.host, p.pid, p.start + 1000 + i, p.attempt, 0.0)
    if how == "attempt":
        return Proc(p.host, p.pid + 1, p.start + 1000 + i, p.attempt + 1, 0.0)
    return Proc(f"w-{i + 2}", p.pid, p.start + 1000 + i, p.attempt, 0.0)


def _reading(p: Proc) -> CounterReading:
    return CounterReading(identity=p.identity, value=p.cpu)


def _probe(
    target: CounterIdentity | None, true: Proc, helper: Proc, step: Step, i: int,
    stall_at: int | None, rate: float,
) -> ProbeReading | None:  # fmt: skip
    """The process the arbiter named, read twice 2 s apart (None: the probe failed)."""
    if step.probe_down:
        return None
    p = true if target is None else None
    for candidate in (true, helper):
        if target is not None and (candidate.host, candidate.pid) == (target.host, target.pid):
            p = candidate
    if p is None:
        return None  # the process is gone: nothing to read
    # The true process still works after this tick only if the stall is later.
    working = p is true and (stall_at is None or i + 1 < stall_at)
    ticks = int(p.cpu * 100)
    rise = int(rate * 2 * 100) if working else 0
    return ProbeReading(
        pid=p.pid, start_time_1=p.start, ticks_1=ticks, start_time_2=p.start,
        ticks_2=ticks + rise, seconds_apart=2.0, host=p.host,
    )  # fmt: skip


def _settings():  # type: ignore[no-untyped-def]
    common = {
        "max_examples": EXAMPLES,
        "deadline": None,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow],
        "print_blob": True,
    }
    if EXAMPLES_ENV:
        return settings(**common)
    return settings(derandomize=True, **common)


_printed = itertools.count()


@seed(SEED)
@_settings()
@given(traces())
def test_the_arbiter_is_safe_live_and_bounded(trace: Trace) -> None:
    if EXAMPLES_ENV and next(_printed) == 0:
        print(f"watch liveness properties: {EXAMPLES} examples, KEEPER_PROPERTY_SEED={SEED}")
    seen = simulate(trace)
    for i, o in enumerate(seen):
        note(f"{i} at={o.at:.0f} adv={o.advancing} proc={o.proc_read} gap={o.gap} "
             f"-> {o.final.verdict}/{o.final.reason}")  # fmt: skip
    policy, stall_at = trace.policy, trace.stall_at
    reread = _reread(trace, seen)
    _never_stalled_early(policy, stall_at, seen)
    _stall_is_flagged(policy, stall_at, seen, reread)
    _only_confirm_stalls(seen)
    _bounded(seen)
    _session_alone_is_no_stall(trace, seen)
    _no_inherited_streak(policy, reread, seen)


def _reread(trace: Trace, seen: list[Observed]) -> int | None:
    """The first tick at or after the pid's reuse whose /proc read answered: where the
    arbiter first sees the new process."""
    if trace.reuse_at is None:
        return None
    return next((i for i in range(trace.reuse_at, len(seen)) if seen[i].proc_read), None)


def _session_alone_is_no_stall(trace: Trace, seen: list[Observed]) -> None:
    if not trace.session_only:
        return
    for i, o in enumerate(seen):
        assert o.final.verdict is not V.STALLED, f"tick {i}: stalled on the session total"
        assert not o.probe_asked, f"tick {i}: a probe asked for on the session total"


def _no_inherited_streak(policy: LivenessPolicy, reread: int | None, seen: list[Observed]) -> None:
    if reread is None:
        return
    need = policy.stall_min_elapsed.total_seconds()
    assert seen[reread].final.verdict is not V.STALLED, f"tick {reread}: the old streak went on"
    previous = seen[reread].final.verdict
    for i in range(reread + 1, len(seen)):
        o = seen[i]
        if o.final.verdict is V.STALLED and previous is not V.STALLED and o.path is StallPath.CPU:
            assert i - reread >= policy.stall_ticks, f"tick {i}: fewer ticks than the gate"
            assert o.at - seen[reread].at >= need, f"tick {i}: the new process stalled too soon"
        previous = o.final.verdict


def _never_stalled_early(
    policy: LivenessPolicy, stall_at: int | None, seen: list[Observed]
) -> None:
    need = policy.stall_min_elapsed.total_seconds()
    entry: int | None = None
    for i, o in enumerate(seen):
        if o.final.verdict is not V.STALLED:
            entry = None
            continue
        # A reading that shows the process advancing never comes with stalled.
        assert not (o.advancing and o.proc_read), f"tick {i}: stalled while seen advancing"
        if entry is not None:
            continue
        entry = i
        if o.path is StallPath.FALLBACK:
            # The fail-safe: no process reading for fallback_ticks ticks (the probe may have
            # been flat, or failed); the window of no signal stands in for the gate.
            quiet = seen[max(0, i - policy.fallback_ticks + 1) : i + 1]
            assert not any(q.proc_read for q in quiet), f"tick {i}: fallback with a reading"
            continue
        assert o.path is StallPath.CPU, f"tick {i}: stalled without a probe asked"
        assert stall_at is not None and i >= stall_at, f"tick {i}: stalled while advancing"
        assert i - stall_at + 1 >= policy.stall_ticks, f"tick {i}: fewer ticks than the gate"
        assert seen[i].at - seen[stall_at - 1].at >= need, f"tick {i}: sooner than the gate"


def _stall_is_flagged(
    policy: LivenessPolicy, stall_at: int | None, seen: list[Observed], reread: int | None
) -> None:
    if stall_at is None or stall_at >= len(seen):
        return
    need = policy.stall_min_elapsed.total_seconds()
    # The streak counts from the tick before the first flat one; a reused pid starts it over
    # from the tick the new process was first read.
    base = stall_at - 1 if reread is None else reread
    start = seen[base].at
    due = next(
        (
            j
            for j in range(base + 1, len(seen))
            if j - base >= policy.stall_ticks and seen[j].at - start >= need
        ),
        None,
    )
    if due is None:
        return
    window = seen[stall_at - 1 : due + 1]
    if not all(o.proc_read for o in window) or any(o.gap for o in window[1:]):
        return
    if any(o.probe_asked and not o.probe_given for o in window):
        return
    assert seen[due].final.verdict is V.STALLED, f"tick {due}: a true stall not flagged"


def _only_confirm_stalls(seen: list[Observed]) -> None:
    previous = V.UNKNOWN
    for i, o in enumerate(seen):
        j = o.judged
        if j.verdict is V.STALLED:
            assert previous is V.STALLED and j.reason is R.STILL_STALLED, f"tick {i}"
        if o.gap:
            assert (o.final.verdict, o.final.reason) == (V.UNKNOWN, R.OBSERVER_GAP)
        for answer in (j, o.final):
            if answer.reason in NOT_STALLED_REASONS:
                assert answer.verdict is not V.STALLED, f"tick {i}: {answer.reason} stalled"
            if answer.verdict is V.STALLED:
                assert answer.reason in {
                    R.STILL_STALLED, R.PROBE_CONFIRMED_STALL, R.FALLBACK_PERSISTENCE,
                }  # fmt: skip
        previous = o.final.verdict


def _bounded(seen: list[Observed]) -> None:
    sizes = []
    for o in seen:
        state = o.final.state
        # true process, helper, session, progress: the memory never outgrows one tick's read
        assert len(state.readings) <= 4
        assert len(state.pending_evidence) <= MAX_EVIDENCE
        assert len(o.final.evidence) <= MAX_EVIDENCE
        sizes.append(len(state.model_dump_json()))
    assert max(sizes) < 6000
    last = seen[-1].final.state
    assert LivenessState.model_validate_json(last.model_dump_json()) == last
