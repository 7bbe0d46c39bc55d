"""The liveness arbiter: is a watched job's work running, stalled, or unknown?

A pure function over a bounded state, run inside the watch workflow once per poll tick:
`judge(policy, state, tick)`, and, when it asks, `confirm(policy, state, probe)` with a
delta probe of one process (domain/watch/liveness_probe.py; both importable from here).
Only confirm() ever turns a verdict to stalled, so nothing the counters say on their own (a
flat rate, a negative one, a reset) flags a stall unconfirmed. A lifetime %CPU is no input
at all: a process busy for hours and then hung keeps a high one.

What each counter reading says is domain/watch/liveness_read.py's table. A tick then is one
of these, rows tried top to bottom, the first match winning ("streak": the no-progress ticks):

| # | the tick | verdict | reason | streak |
|---|---|---|---|---|
| 1 | at or before the last tick, or later than the gap threshold | unknown | observer_gap | 0* |
| 2 | the task is not RUNNING | unknown | not_running | cleared |
| 3 | a positive signal (below) | running | advancing | cleared |
| 4 | a process replaced, or a reading hiding progress | unknown | reset, no_baseline | cleared |
| 5 | flat: some process compared flat | see below | | +1 |
| 6 | quiet: no process reading, threads not alive, a quiet sign (below) | see below | | +1 |
| 7 | else (nothing answered; baselines; ambiguous; live threads) | unknown | no_signal | held** |

Positive: a process's utime+stime rose, the progress counter rose, the stage changed within
one attempt, new log lines, or the session total rose with no process reading beside it.
Live threads are never progress by themselves: a coordinator stuck behind one shard shows the
same threads for hours; they only keep the quiet fallback (6) from starting. *An observer
gap also re-baselines every counter: no delta across it counts. **Except the fallback's
quiet streak when a process listing answered (baselines, ambiguous readings): a CPU counter
answered, so that streak of checks with none ends, as on a flat check.

A quiet sign is a source that answered with nothing: no new log lines, a zombie dump, a
progress counter standing still, a process listing with no process of the job. The session
total answering is none (its scope drifts, so it cannot say nothing happens), nor is a RUNNING
task (with every other read failing, that is a control-plane failure).

A flat or quiet tick decides:

| # | condition | verdict | reason |
|---|---|---|---|
| a | the verdict was stalled | stalled | still_stalled |
| b | flat; streak >= stall_ticks AND stall_min_elapsed since it began | same | awaiting_probe |
| c | quiet; quiet streak >= fallback_ticks AND stall_min_elapsed | same | awaiting_probe |
| d | otherwise | running if it was, else unknown | gate_not_met |

(b) and (c) set wants_probe (path cpu, path fallback). confirm() then reads the probe:

| # | the probe | verdict | reason |
|---|---|---|---|
| 0 | answered (or failed) > observer_gap after the check that asked | unknown (0*) | observer_gap |
| 1 | same pid and start time, rose >= probe_min_cpu_ticks | running (streak 0) | probe_vetoed |
| 2 | none was asked for | same | no_probe_asked |
| 3 | unavailable, path fallback (the old persistence rule) | stalled | fallback_persistence |
| 4 | unavailable, path cpu: a flat rate alone is no stall | unknown | probe_unavailable |
| 5 | start time changed, another process, or fell | unknown | probe_reset |
| 6 | same process, no rise | stalled | probe_confirmed_stall |

What the caller keeps to itself: it proposes a destructive step only on stalled, and only
with an operator's approval (never on unknown); it judges the latest attempt only (an attempt
change is an identity change here anyway); it counts restarts to spot flapping
(`state.verdict_changes` helps). A no-signal tick holds the streak rather than clearing it, so
a flaky read does not hide a real stall, and rather than growing it, so it never makes one.
"""

from __future__ import annotations

from enum import StrEnum

from keeper.domain.watch.liveness_models import (
    MAX_EVIDENCE,
    CounterIdentity,
    CounterKind,
    Judgement,
    LivenessPolicy,
    LivenessReason,
    LivenessState,
    LivenessVerdict,
    Remembered,
    StallPath,
    ThreadState,
    Tick,
    answer,
    cap,
    cleared,
)
from keeper.domain.watch.liveness_probe import confirm
from keeper.domain.watch.liveness_read import Reading, distinct, name, read, remember, seconds

__all__ = ["MAX_EVIDENCE", "confirm", "judge"]

V, R = LivenessVerdict, LivenessReason
_ALIVE = {ThreadState.ACTIVE, ThreadState.WAITING}


class _Seen(StrEnum):
    NOT_RUNNING = "not_running"
    ADVANCING = "advancing"
    UNSEEN = "unseen"
    FLAT = "flat"
    QUIET = "quiet"
    NO_SIGNAL = "no_signal"


def _gap(policy: LivenessPolicy, last_at: float | None, tick: Tick) -> str | None:
    if last_at is None:
        return None
    if tick.at <= last_at:
        return f"the clock read {tick.at:g} s after {last_at:g} s: no delta across it counts"
    late = tick.at - last_at - tick.expected_interval
    if late > policy.gap_threshold(tick.expected_interval):
        return (
            f"this tick came {seconds(late)} later than expected ({seconds(tick.at - last_at)}"
            f" after the last): the watcher was paused, so nothing is judged across the gap"
        )
    return None


def _signals(tick: Tick, reading: Reading) -> list[str]:
    """The independent signals beside the counters, as sentences; fills `reading`."""
    notes: list[str] = []
    if tick.log_advanced:
        reading.positive.append("new log lines since the last tick")
    elif tick.log_advanced is False:
        reading.quiet_marks.append("no new log lines")
    if tick.threads is ThreadState.ZOMBIE:
        reading.quiet_marks.append("threads: zombie (the pipeline exited)")
    elif tick.threads in _ALIVE:
        notes.append(f"threads: {tick.threads} (alive, not progress by itself)")
    elif tick.threads is ThreadState.UNKNOWN:
        notes.append("threads: the dump could not be read")
    # A RUNNING task is no quiet mark: with every other read failing it would let the
    # fallback call a stall on control-plane failures alone.
    return notes


def _classify(tick: Tick, reading: Reading) -> _Seen:
    if tick.task_running is False:
        return _Seen.NOT_RUNNING
    if reading.positive:
        return _Seen.ADVANCING
    if reading.unseen or reading.restarted:
        return _Seen.UNSEEN
    if reading.ambiguous:
        return _Seen.NO_SIGNAL
    if reading.flat:
        return _Seen.FLAT
    if not reading.proc_seen and tick.threads not in _ALIVE and reading.quiet_marks:
        return _Seen.QUIET
    return _Seen.NO_SIGNAL


def _no_signal_reason(reading: Reading) -> LivenessReason:
    if reading.identity_changed:
        return R.RESET
    if reading.ambiguous:
        return R.NO_SIGNAL
    return R.NO_BASELINE if reading.proc_seen or reading.unseen else R.NO_SIGNAL


def judge(policy: LivenessPolicy, state: LivenessState, tick: Tick) -> Judgement:
    """The verdict after one poll tick (see the module's tables)."""
    why_gap = _gap(policy, state.last_at, tick)
    if why_gap is not None:
        kept, notes = distinct(tick)
        new = state.model_copy(
            update={
                "last_at": tick.at,
                "readings": remember(state.readings, tick, kept, policy, carry=False),
                **cleared(),
            }
        )
        return answer(new, state, V.UNKNOWN, R.OBSERVER_GAP, [why_gap, *notes], ticked=True)

    memory = {r.identity.key: r for r in state.readings}
    reading, kept = read(tick, memory, policy)
    side = _signals(tick, reading)
    seen = _classify(tick, reading)
    readings = remember(state.readings, tick, kept, policy, carry=True, advanced=reading.advanced)
    base = {"last_at": tick.at, "readings": readings}

    if seen in (_Seen.FLAT, _Seen.QUIET):
        return _no_progress(policy, state, tick, reading, side, seen, base)
    if seen is _Seen.NO_SIGNAL:
        held = {**base, "pending": None, "probe_target": None}
        if reading.proc_seen:
            # The listing showed the job's processes: a CPU counter answered, so the fallback's
            # streak (checks with none at all) ends here, as on a flat check.
            held |= {"quiet_ticks": 0, "quiet_since": None}
        new = state.model_copy(update=held)
        lines = [*reading.notes, *side] or ["no source answered with a usable reading"]
        return answer(new, state, V.UNKNOWN, _no_signal_reason(reading), lines, ticked=True)
    new = state.model_copy(update={**base, **cleared()})
    if seen is _Seen.ADVANCING:
        lines = [*reading.positive, *reading.notes, *side]
        return answer(new, state, V.RUNNING, R.ADVANCING, lines, ticked=True)
    if seen is _Seen.NOT_RUNNING:
        lines = ["the task is not RUNNING: its liveness is not judged", *reading.notes]
        return answer(new, state, V.UNKNOWN, R.NOT_RUNNING, lines, ticked=True)
    why = (
        "a reading may hide progress no delta could see"
        if reading.unseen
        else "the no-progress count starts over with the new process"
    )
    lines = [*reading.notes, why]
    return answer(new, state, V.UNKNOWN, _no_signal_reason(reading), lines, ticked=True)


def _no_progress(
    policy: LivenessPolicy,
    state: LivenessState,
    tick: Tick,
    reading: Reading,
    side: list[str],
    seen: _Seen,
    base: dict[str, object],
) -> Judgement:
    since = tick.at if state.last_at is None else state.last_at
    ticks = state.no_progress_ticks + 1
    began = state.no_progress_since if state.no_progress_ticks else since
    if seen is _Seen.QUIET:
        quiet = state.quiet_ticks + 1
        quiet_began = state.quiet_since if state.quiet_ticks else since
    else:
        quiet, quiet_began = 0, None
    streak = {
        "no_progress_ticks": ticks,
        "no_progress_since": began,
        "quiet_ticks": quiet,
        "quiet_since": quiet_began,
    }
    need = policy.stall_min_elapsed.total_seconds()
    if seen is _Seen.FLAT:
        span = tick.at - (began if began is not None else tick.at)
        gate_met = ticks >= policy.stall_ticks and span >= need
        gate = (
            f"no progress for {_ticks(ticks)} over {seconds(span)}; a stall needs "
            f"{policy.stall_ticks} ticks and {seconds(need)}, both"
        )
        path = StallPath.CPU
        flat_now = {identity.key for identity, _ in reading.flat}
        target = _workhorse([r for r in state.readings if r.identity.key in flat_now])
        lines = [gate, *reading.notes, *side]
    else:
        span = tick.at - (quiet_began if quiet_began is not None else tick.at)
        gate_met = quiet >= policy.fallback_ticks and span >= need
        gate = (
            f"no CPU counter and no sign of progress for {_ticks(quiet)} over {seconds(span)};"
            f" the fallback needs {policy.fallback_ticks} ticks and {seconds(need)}, both"
        )
        path = StallPath.FALLBACK
        # Only a process seen doing the work is worth naming; else the caller probes the
        # busiest process it finds (the largest rise between its two reads).
        procs = [r for r in state.readings if r.identity.kind is CounterKind.PROC]
        target = _workhorse([r for r in procs if r.advanced_at is not None])
        lines = [gate, *reading.quiet_marks, *reading.notes, *side]
    new = state.model_copy(update={**base, **streak, "pending": None, "probe_target": None})
    if state.verdict is V.STALLED:
        return answer(new, state, V.STALLED, R.STILL_STALLED, lines, ticked=True)
    if not gate_met:
        verdict = V.RUNNING if state.verdict is V.RUNNING else V.UNKNOWN
        return answer(new, state, verdict, R.GATE_NOT_MET, lines, ticked=True)
    asked = [*lines, f"a probe{_of(target)} must confirm before the verdict turns stalled"]
    new = new.model_copy(
        update={"pending": path, "probe_target": target, "pending_evidence": cap(asked)}
    )
    judged = answer(new, state, state.verdict, R.AWAITING_PROBE, asked, ticked=True)
    return judged.model_copy(update={"wants_probe": True, "probe_target": target})


def _ticks(n: int) -> str:
    return "1 tick" if n == 1 else f"{n} ticks"


def _of(target: CounterIdentity | None) -> str:
    return "" if target is None else f" of {name(target)}"


def _workhorse(procs: list[Remembered]) -> CounterIdentity | None:
    """The process to probe: the last one seen advancing, else the largest lifetime total."""
    if not procs:
        return None
    never = float("-inf")
    best = max(
        procs,
        key=lambda r: (never if r.advanced_at is None else r.advanced_at, r.value, r.identity.key),
    )
    return best.identity
