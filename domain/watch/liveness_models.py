"""What the liveness arbiter (domain/watch/liveness.py) reads, remembers and answers, and
how an answer is put together.

Every model is a frozen pydantic value, so a workflow carries the state through its history
and continue-as-new as it is. Times are seconds on the caller's monotonic clock (a workflow's
own clock), never wall-clock datetimes: only differences of them are ever used.

There is deliberately no input for a lifetime %CPU (`ps -o pcpu`): a process busy for hours
and then hung still shows a high lifetime average, so it can never be evidence of life.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from functools import cached_property

from pydantic import Field

from keeper.domain.common.durations import HumanDuration
from keeper.domain.watch.threads import ThreadState
from keeper.domain.watch.values import Frozen


class LivenessVerdict(StrEnum):
    RUNNING = "running"
    STALLED = "stalled"
    # Not enough evidence either way: never a reason for a destructive step.
    UNKNOWN = "unknown"


class LivenessReason(StrEnum):
    ADVANCING = "advancing"
    RESET = "reset"
    NO_BASELINE = "no_baseline"
    NO_SIGNAL = "no_signal"
    NOT_RUNNING = "not_running"
    OBSERVER_GAP = "observer_gap"
    GATE_NOT_MET = "gate_not_met"
    AWAITING_PROBE = "awaiting_probe"
    STILL_STALLED = "still_stalled"
    PROBE_CONFIRMED_STALL = "probe_confirmed_stall"
    PROBE_VETOED = "probe_vetoed"
    PROBE_RESET = "probe_reset"
    PROBE_UNAVAILABLE = "probe_unavailable"
    FALLBACK_PERSISTENCE = "fallback_persistence"
    NO_PROBE_ASKED = "no_probe_asked"


class CounterKind(StrEnum):
    PROC = "proc"  # one process's utime+stime, core-seconds
    SESSION = "session"  # the exec session's CPU total, core-seconds; its scope drifts
    PROGRESS = "progress"  # the coordinator's shards done in one stage of one attempt


class Source(StrEnum):
    """What the caller asked on a tick; `Tick.available` names those that answered."""

    PROC = "proc"
    SESSION = "session"
    PROGRESS = "progress"
    THREADS = "threads"
    LOGS = "logs"
    TASK = "task"


SOURCE_OF = {
    CounterKind.PROC: Source.PROC,
    CounterKind.SESSION: Source.SESSION,
    CounterKind.PROGRESS: Source.PROGRESS,
}


class StallPath(StrEnum):
    """Which gate asked for the probe: the CPU counters' or the no-signal fallback's."""

    CPU = "cpu"
    FALLBACK = "fallback"


class LivenessPolicy(Frozen):
    """The arbiter's gates (`watch.liveness:` in the settings)."""

    # Stalled needs this many no-progress ticks in a row AND stall_min_elapsed of them on the
    # monotonic clock: ticks alone (a fast poller) or time alone (a slow one) never suffice.
    stall_ticks: int = Field(default=3, ge=1, le=1000, strict=True)
    stall_min_elapsed: HumanDuration = Field(default=timedelta(minutes=10), ge=timedelta(0))
    # The fail-safe when no CPU counter answers and no probe can be taken: this many ticks
    # with no signal of any kind (and the elapsed gate) still flag a dead worker.
    fallback_ticks: int = Field(default=2, ge=1, le=1000, strict=True)
    # A tick later than expected by more than max(observer_gap, factor x the expected
    # interval) means the watcher itself was paused: no delta across it counts. So does a
    # probe answering more than observer_gap after the check that asked for it (beyond its
    # own gap): it confirms nothing. It is also the slack a first log read's stamps get.
    observer_gap: HumanDuration = Field(default=timedelta(minutes=1), ge=timedelta(0))
    observer_gap_factor: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    # A per-tick utime+stime (or session) rise of at least this is progress: one clock tick.
    min_cpu_seconds: float = Field(default=0.01, gt=0, allow_inf_nan=False)
    # A probe rise of at least this many clock ticks is progress (a veto).
    probe_min_cpu_ticks: int = Field(default=1, ge=1, strict=True)
    # The most counter readings the state keeps (the largest win): the state stays bounded.
    max_remembered: int = Field(default=256, ge=1, le=100_000, strict=True)

    def gap_threshold(self, expected_interval: float) -> float:
        """How many seconds later than expected a tick may come before it is a gap."""
        return max(self.observer_gap.total_seconds(), self.observer_gap_factor * expected_interval)


class CounterIdentity(Frozen):
    """Who a counter belongs to. Values are compared only under one identity, never across.

    proc: host (the task's worker id) + pid + start_time (/proc/PID/stat field 22, clock
    ticks since boot) + attempt (the task's current attempt id): PID reuse, a retry or a
    move to another host is a new identity. session: host (+ scope, as far as the reader
    knows it; it is not trusted either way). progress: host (the coordinator task) +
    attempt (zephyr's a<N>) + scope (pipeline and stage): a new scope under the same host
    and attempt is a stage change, a new attempt a reset.
    """

    kind: CounterKind
    host: str = ""
    pid: int | None = Field(default=None, ge=0)
    start_time: int | None = Field(default=None, ge=0)
    attempt: int | None = None
    scope: str = ""

    @cached_property
    def key(self) -> tuple[str, str, int, int, int, str]:
        """A hashable, orderable form (the arbiter keys its memory by it)."""
        none = -1
        return (
            self.kind.value,
            self.host,
            none if self.pid is None else self.pid,
            none if self.start_time is None else self.start_time,
            none if self.attempt is None else self.attempt,
            self.scope,
        )


class CounterReading(Frozen):
    identity: CounterIdentity
    value: float = Field(allow_inf_nan=False)


class Tick(Frozen):
    """One poll of the job: every reading taken for it, and which sources answered.

    A source that failed (an RPC error, a timeout) is unavailable, never idle: leave its
    field None and it out of `available`. A reading or a non-None signal implies its source
    answered; `available` adds sources that answered with nothing (a /proc listing with no
    process of the job in it).
    """

    at: float = Field(allow_inf_nan=False)
    expected_interval: float = Field(gt=0, allow_inf_nan=False)
    counters: tuple[CounterReading, ...] = ()
    threads: ThreadState | None = None
    # New lines other than the runbook's noise since the last tick.
    log_advanced: bool | None = None
    task_running: bool | None = None
    available: frozenset[Source] = frozenset()

    @cached_property
    def sources(self) -> frozenset[Source]:
        """The sources that answered: those listed, and those a reading or signal implies."""
        implied = {SOURCE_OF[c.identity.kind] for c in self.counters}
        for source, value in (
            (Source.THREADS, self.threads),
            (Source.LOGS, self.log_advanced),
            (Source.TASK, self.task_running),
        ):
            if value is not None:
                implied.add(source)
        return self.available | implied


class ProbeReading(Frozen):
    """Two reads of one process's utime+stime (clock ticks) a few seconds apart, each with the
    process start time: a start-time change between them is a reset, not a delta."""

    pid: int = Field(ge=0)
    start_time_1: int = Field(ge=0)
    ticks_1: int = Field(ge=0)
    start_time_2: int = Field(ge=0)
    ticks_2: int = Field(ge=0)
    seconds_apart: float = Field(gt=0, allow_inf_nan=False)
    host: str = ""
    clk_tck: int = Field(default=100, ge=1)


class Remembered(Frozen):
    """The last reading of one identity, and when (monotonic seconds) it was taken."""

    identity: CounterIdentity
    value: float
    at: float
    # When a delta of this identity last showed progress: the probe goes to the process that
    # was doing the work, not to an idle helper with a larger lifetime total.
    advanced_at: float | None = None


class LivenessState(Frozen):
    """All the arbiter carries between ticks; bounded whatever the length of the watch."""

    verdict: LivenessVerdict = LivenessVerdict.UNKNOWN
    last_at: float | None = None
    # The last reading of each identity the latest answering read of its kind listed.
    readings: tuple[Remembered, ...] = ()
    # No-progress ticks in a row (flat CPU or no signal at all), since when, and how many of
    # the latest of them had no CPU counter at all (the fallback's streak).
    no_progress_ticks: int = Field(default=0, ge=0)
    no_progress_since: float | None = None
    quiet_ticks: int = Field(default=0, ge=0)
    quiet_since: float | None = None
    # Set while a probe was asked for and not yet given to confirm().
    pending: StallPath | None = None
    probe_target: CounterIdentity | None = None
    pending_evidence: tuple[str, ...] = ()
    # For spotting flapping (the caller's rule): how often the verdict changed.
    verdict_changes: int = Field(default=0, ge=0)
    ticks: int = Field(default=0, ge=0)


class Judgement(Frozen):
    """The arbiter's answer for one tick or one probe."""

    state: LivenessState
    verdict: LivenessVerdict
    reason: LivenessReason
    # The caller must take a probe and call confirm() with it (or None when it could not):
    # only confirm() ever turns a verdict to stalled. The probe reads probe_target's pid when
    # set, else the busiest process of the task (the largest rise between its two reads).
    wants_probe: bool = False
    probe_target: CounterIdentity | None = None
    # Short sentences for the operator, most telling first.
    evidence: tuple[str, ...] = ()


# ---- how the arbiter answers (shared by judge() and confirm()) -----------------------------

MAX_EVIDENCE = 12


def cap(lines: list[str]) -> tuple[str, ...]:
    """At most MAX_EVIDENCE sentences: a watched job with many processes stays readable."""
    if len(lines) <= MAX_EVIDENCE:
        return tuple(lines)
    return (*lines[: MAX_EVIDENCE - 1], f"... and {len(lines) - MAX_EVIDENCE + 1} more")


def cleared() -> dict[str, object]:
    """The state's fields after progress (or anything that starts the count over)."""
    return {
        "no_progress_ticks": 0,
        "no_progress_since": None,
        "quiet_ticks": 0,
        "quiet_since": None,
        "pending": None,
        "probe_target": None,
        "pending_evidence": (),
    }


def answer(
    new: LivenessState,
    old: LivenessState,
    verdict: LivenessVerdict,
    reason: LivenessReason,
    lines: list[str],
    ticked: bool = False,
) -> Judgement:
    """The judgement, with the new state's verdict, its change count and (per tick) its ticks."""
    changes = old.verdict_changes + int(verdict is not old.verdict)
    ticks = old.ticks + int(ticked)
    state = new.model_copy(update={"verdict": verdict, "verdict_changes": changes, "ticks": ticks})
    return Judgement(state=state, verdict=verdict, reason=reason, evidence=cap(lines))
