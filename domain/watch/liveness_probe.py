"""confirm(): what the delta probe the arbiter asked for says (domain/watch/liveness.py has
the table). Two reads of one process's utime+stime a few seconds apart, with its start time
both times: a rise is life (a veto), no rise under the same start time confirms the stall,
and a changed start time or another process is a reset, no signal.

The probe has a clock: `at`, when its readings were taken (no earlier than the caller saw
its answer). A probe that answers later than `observer_gap` after the check that asked for it
(beyond its own two reads' gap) was held up by the watcher itself (a worker down between the
check and the probe): the gate it would confirm was built before that gap, so it confirms
nothing. The verdict is unknown, the counters start over and so does the streak, as after
any observer gap; a probe that could not be taken in time is no fallback persistence either.
"""

from __future__ import annotations

from keeper.domain.watch.liveness_models import (
    CounterIdentity,
    Judgement,
    LivenessPolicy,
    LivenessReason,
    LivenessState,
    LivenessVerdict,
    ProbeReading,
    StallPath,
    answer,
    cleared,
)
from keeper.domain.watch.liveness_read import name, number, seconds

V, R = LivenessVerdict, LivenessReason


def confirm(
    policy: LivenessPolicy,
    state: LivenessState,
    probe: ProbeReading | None,
    *,
    at: float,
) -> Judgement:
    """The verdict after the probe judge() asked for; `probe` None when none could be taken.
    `at`: when the probe answered, on the ticks' clock (its readings were taken no later)."""
    path, target = state.pending, state.probe_target
    earlier = list(state.pending_evidence)
    done = {"pending": None, "probe_target": None, "pending_evidence": ()}
    late = _late(policy, state, probe, at)
    if path is not None and late is not None:
        line = (
            f"the probe answered {seconds(late)} later than it should have after the check "
            "that asked for it: the watcher was held up, so the gate built before it confirms "
            "nothing; the counters start over"
        )
        new = state.model_copy(update={**done, **cleared(), "last_at": at, "readings": ()})
        return answer(new, state, V.UNKNOWN, R.OBSERVER_GAP, [line, *earlier])
    if probe is not None:
        rise = probe.ticks_2 - probe.ticks_1
        who = f"pid {probe.pid}" + (f" on {probe.host}" if probe.host else "")
        other = _other_process(target, probe)
        same = probe.start_time_1 == probe.start_time_2 and other is None
        if same and rise >= policy.probe_min_cpu_ticks:
            line = (
                f"probe: {who} advanced {rise:,} ticks ({number(rise / probe.clk_tck)} core-s) "
                f"in {seconds(probe.seconds_apart)}: alive, the stall is vetoed"
            )
            new = state.model_copy(update={**done, **cleared()})
            return answer(new, state, V.RUNNING, R.PROBE_VETOED, [line, *earlier])
    if path is None:
        lines = ["a probe came with no stall to confirm: it changes nothing"]
        return answer(state, state, state.verdict, R.NO_PROBE_ASKED, lines)
    new = state.model_copy(update=done)
    if probe is None:
        if path is StallPath.FALLBACK:
            line = "no probe could be taken either: stalled on the fallback persistence rule"
            return answer(new, state, V.STALLED, R.FALLBACK_PERSISTENCE, [line, *earlier])
        line = "no probe could be taken: flat counters alone do not make a stall"
        return answer(new, state, V.UNKNOWN, R.PROBE_UNAVAILABLE, [line, *earlier])
    if probe.start_time_1 != probe.start_time_2:
        line = (
            f"probe: {who}'s start time changed {probe.start_time_1} -> {probe.start_time_2}"
            " between its reads: a reset, no signal"
        )
        return answer(new, state, V.UNKNOWN, R.PROBE_RESET, [line, *earlier])
    if other is not None:
        return answer(new, state, V.UNKNOWN, R.PROBE_RESET, [f"probe: {other}", *earlier])
    if rise < 0:
        line = f"probe: {who} fell {probe.ticks_1:,} -> {probe.ticks_2:,} ticks: a reset"
        return answer(new, state, V.UNKNOWN, R.PROBE_RESET, [line, *earlier])
    line = (
        f"probe: {who} at {probe.ticks_2:,} ticks did not advance in "
        f"{seconds(probe.seconds_apart)} (start time unchanged): the stall is confirmed"
    )
    return answer(new, state, V.STALLED, R.PROBE_CONFIRMED_STALL, [line, *earlier])


def _other_process(target: CounterIdentity | None, probe: ProbeReading) -> str | None:
    """Why the probe read another process than the one the ticks watched, if it did."""
    if target is None:
        return None
    if target.pid != probe.pid or (target.host and probe.host and target.host != probe.host):
        return f"read pid {probe.pid}, not {name(target)}: no signal"
    if target.start_time is not None and target.start_time != probe.start_time_1:
        return (
            f"pid {probe.pid} now started at {probe.start_time_1}, not {target.start_time}:"
            " another process, no signal"
        )
    return None


def _late(
    policy: LivenessPolicy, state: LivenessState, probe: ProbeReading | None, at: float
) -> float | None:
    """How much later than its own reads take the probe answered, when beyond the observer
    gap; None when it was on time (or no check came before it)."""
    if state.last_at is None:
        return None
    own = probe.seconds_apart if probe is not None else 0.0
    late = at - state.last_at - own
    return late if late > policy.observer_gap.total_seconds() else None
