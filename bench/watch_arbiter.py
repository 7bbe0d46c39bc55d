"""Figures for the job watch's liveness arbiter: decisions per second over 200,000 ticks.

Run from the repository root:

    python bench/watch_arbiter.py              # 2,000 traces x 100 ticks, 3 repetitions
    python bench/watch_arbiter.py --traces 200 --reps 1

Synthetic traces, built once from a fixed seed, of four kinds in equal shares: a healthy
CPU-bound run whose session total starts over on most reads (the false stall's readings),
a process busy for hours that hangs a third of the way in, a worker that dies (no reading
of any kind) a third of the way in, and a flaky one (failed reads, observer gaps, restarts).
Each tick reads three processes of the task (the workload, an idle helper, a short-lived
shell), the session total and the coordinator's progress counter, with the log, thread and
task signals. Timed, several times (median and range):
  (a) `keeper.domain.watch.liveness.judge` over every tick in order, each trace from a fresh state,
      with `confirm` whenever a probe is asked (the probe read from the same model);
  (b) the state's JSON round trip after every tick (what continue-as-new carries).
Timings are printed, never asserted; raw figures go to bench/results/watch_arbiter.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from run_record import RESULTS_DIR, Run  # noqa: E402

from keeper.domain.watch.liveness import confirm, judge  # noqa: E402
from keeper.domain.watch.liveness_models import (  # noqa: E402
    CounterIdentity,
    CounterKind,
    CounterReading,
    LivenessPolicy,
    LivenessState,
    ProbeReading,
    Source,
    ThreadState,
    Tick,
)

SEED = 20261201
TICKS_PER_TRACE = 100
INTERVAL = 60.0
KINDS = ("healthy", "hung", "dead", "flaky")
K = CounterKind


class Trace:
    """One watched task's ticks, and what a probe would read after each of them."""

    def __init__(self, kind: str, rng: random.Random) -> None:
        self.kind = kind
        self.ticks: list[Tick] = []
        self.probes: list[ProbeReading | None] = []
        cores = rng.uniform(1, 30)
        work = 3 * 3600 * cores  # busy for hours before the watch starts
        helper, shell_pid, pid, start, attempt = 12.0, 40_000, 184_938, 5_000, 0
        session_max, done = work, 400.0
        stop = TICKS_PER_TRACE // 3 if kind in ("hung", "dead") else TICKS_PER_TRACE + 1
        at = 0.0
        for i in range(TICKS_PER_TRACE):
            gap = kind == "flaky" and rng.random() < 0.03
            dt = INTERVAL * rng.uniform(0.9, 1.1) + (400.0 if gap else 0.0)
            at = at + dt if i else 0.0
            working = i < stop
            if working and i:
                if kind == "flaky" and rng.random() < 0.02:
                    pid, start, attempt, work = pid + 1, start + 9_000 + i, attempt + 1, 0.0
                work += cores * dt
                done += rng.random() < 0.3
            down = (kind == "dead" and not working) or (kind == "flaky" and rng.random() < 0.1)
            counters: list[CounterReading] = []
            if not down:
                ident = CounterIdentity(
                    kind=K.PROC, host="w-3", pid=pid, start_time=start, attempt=attempt
                )
                idle = CounterIdentity(kind=K.PROC, host="w-3", pid=7, start_time=7, attempt=0)
                shell_pid += 1
                shell = CounterIdentity(
                    kind=K.PROC, host="w-3", pid=shell_pid, start_time=start + i, attempt=0
                )
                session_max = max(session_max, work)
                scope = rng.random()  # each exec sees some share of the processes
                counters += [
                    CounterReading(identity=ident, value=round(work, 2)),
                    CounterReading(identity=idle, value=helper),
                    CounterReading(identity=shell, value=0.0),
                    CounterReading(
                        identity=CounterIdentity(kind=K.SESSION, host="w-3"),
                        value=round(session_max * scope, 2),
                    ),
                ]
            stage = CounterIdentity(kind=K.PROGRESS, host="coord", attempt=attempt, scope="s1")
            if not (kind == "dead" and not working):
                counters.append(CounterReading(identity=stage, value=done))
            self.ticks.append(
                Tick(
                    at=at, expected_interval=INTERVAL, counters=tuple(counters),
                    threads=None if down else (ThreadState.ACTIVE if working
                                               else ThreadState.ZOMBIE),
                    log_advanced=None if down else working and rng.random() < 0.2,
                    task_running=True,
                    available=frozenset() if down else frozenset({Source.PROC, Source.SESSION}),
                )
            )  # fmt: skip
            ticks = int(work * 100)
            rise = int(cores * 200) if i + 1 < stop else 0
            self.probes.append(
                None
                if down
                else ProbeReading(
                    pid=pid, start_time_1=start, ticks_1=ticks, start_time_2=start,
                    ticks_2=ticks + rise, seconds_apart=2.0, host="w-3",
                )
            )  # fmt: skip


def build(traces: int) -> list[Trace]:
    rng = random.Random(SEED)
    return [Trace(KINDS[n % len(KINDS)], rng) for n in range(traces)]


def decide_all(traces: list[Trace], policy: LivenessPolicy) -> dict[str, Any]:
    verdicts: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
    probes = 0
    max_state = 0
    for trace in traces:
        state = LivenessState()
        for t, probe in zip(trace.ticks, trace.probes, strict=True):
            j = judge(policy, state, t)
            if j.wants_probe:
                probes += 1
                j = confirm(policy, j.state, probe, at=t.at)
            state = j.state
            verdicts[f"{j.verdict}/{j.reason}"] += 1
            by_kind[trace.kind][j.verdict.value] += 1
        max_state = max(max_state, len(state.readings))
    return {
        "verdicts": dict(sorted(verdicts.items())),
        "by_kind": {k: dict(sorted(v.items())) for k, v in by_kind.items()},
        "probes": probes,
        "max_remembered_readings": max_state,
    }


def round_trips(traces: list[Trace], policy: LivenessPolicy) -> int:
    largest = 0
    for trace in traces:
        state = LivenessState()
        for t, probe in zip(trace.ticks, trace.probes, strict=True):
            j = judge(policy, state, t)
            if j.wants_probe:
                j = confirm(policy, j.state, probe, at=t.at)
            text = j.state.model_dump_json()
            state = LivenessState.model_validate_json(text)
            largest = max(largest, len(text))
    return largest


def _timed(fn: Any, reps: int) -> tuple[list[float], Any]:
    times: list[float] = []
    out: Any = None
    for _ in range(reps):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return times, out


def _figure(times: list[float], count: int) -> dict[str, Any]:
    median = statistics.median(times)
    return {
        "median_s": round(median, 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "runs_s": [round(v, 4) for v in times],
        "count": count,
        "per_tick_us": round(median / count * 1e6, 3),
        "ticks_per_s": round(count / median),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2000, help="traces of 100 ticks")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    run = Run("watch_arbiter")
    policy = LivenessPolicy()
    started = time.perf_counter()
    traces = build(args.traces)
    ticks = sum(len(t.ticks) for t in traces)
    print(f"built {len(traces)} traces, {ticks} ticks in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)  # fmt: skip
    times, outcome = _timed(lambda: decide_all(traces, policy), args.reps)
    figures: dict[str, Any] = {"a_judge": {**_figure(times, ticks), **outcome}}
    times, largest = _timed(lambda: round_trips(traces, policy), args.reps)
    figures["b_judge_and_json_round_trip"] = {**_figure(times, ticks), "largest_state_bytes":
                                              largest}  # fmt: skip
    figures["traces"] = {
        "traces": len(traces), "ticks_per_trace": TICKS_PER_TRACE, "kinds": list(KINDS),
        "interval_s": INTERVAL, "seed": SEED, "reps": args.reps,
        "policy": policy.model_dump(mode="json"),
    }  # fmt: skip
    a, b = figures["a_judge"], figures["b_judge_and_json_round_trip"]
    print(f"ticks: {ticks} ({len(traces)} traces x {TICKS_PER_TRACE}), {a['probes']} probes")
    print(f"  judge (+confirm when asked): median {a['median_s']:.3f} s, "
          f"{a['ticks_per_s']:,} decisions/s, {a['per_tick_us']:.1f} us/tick")  # fmt: skip
    print(f"  with the state's JSON round trip: {b['ticks_per_s']:,} ticks/s, "
          f"{b['per_tick_us']:.1f} us/tick, "
          f"largest state {b['largest_state_bytes']} bytes")  # fmt: skip
    for kind, counts in a["by_kind"].items():
        print(f"  {kind:8} {counts}")
    # One file under the name the watch docs quote, in the shape of every bench result.
    with tempfile.TemporaryDirectory() as tmp:
        document = json.loads(run.write(figures, Path(tmp)).read_text())
    path = RESULTS_DIR / "watch_arbiter.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"raw figures: {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
