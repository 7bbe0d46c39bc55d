"""The runbook's "When to escalate", as rules over a short history the watch keeps.

The watch calls `observe` once per tick with what it read (a `Sample`); the history
(`EscalationState`) is bounded and serialisable, so it travels in a workflow's carry. Every
escalation names the evidence, a `key` that stays the same for one episode (notify when
`first`, not on every tick), and the step it suggests proposing to the operator, who always
decides (keeper never stops or restarts a job on its own).

| kind | raised when (for the policy's time or count) | proposal |
|---|---|---|
| stuck_stage | one stage shows the same done count for stuck_after | restart |
| stragglers | few shards left, most workers idle, for straggler_after (below) | none (a setting) |
| repeated_error | one normalised error repeated_error_count times | stop (restarts repeat it) |
| controller_timeouts | rpc_failures ticks in a row had a failed controller call | none |
| stale_coordinators | coordinators of older attempts are still active | none (report them) |
| retry_flapping | the latest attempt changed retry_flaps times | stop (retries keep failing) |
| zombie_coordinator | the coordinator is a zombie or died, zombie_ticks ticks in a row | restart |
| worker_failures | worker_failures worker attempts of the latest attempt failed | none (read why) |

A stragglers episode hides the stuck_stage one of the same stage (it is the more specific).
Few shards left means at most max(straggler_in_flight_floor, straggler_in_flight_fraction of
the shards) in flight plus queued, and none queued, or the tail's shard in an OOM loop: it
runs, its worker runs out of memory, it waits in the queue and runs again, so the tail
alternates between in flight and queued (the 12-hour straggler at 4999/5000 was one). A tail
back in the queue counts only once an out-of-memory error was seen while it held; without
one, a queued shard is ordinary scheduling and the straggler clock starts over.
A tick without a progress line leaves the stage clocks alone: silence is not evidence of no
progress (a log-quiet CPU-bound stage), so only progress lines showing the same count are.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from keeper.domain.common.durations import HumanDuration
from keeper.domain.watch.names import JobPhase, Phase
from keeper.domain.watch.progress import StageProgress, normalise_error
from keeper.domain.watch.threads import ThreadState
from keeper.domain.watch.values import Frozen


class EscalationKind(StrEnum):
    STUCK_STAGE = "stuck_stage"
    STRAGGLERS = "stragglers"
    REPEATED_ERROR = "repeated_error"
    CONTROLLER_TIMEOUTS = "controller_timeouts"
    STALE_COORDINATORS = "stale_coordinators"
    RETRY_FLAPPING = "retry_flapping"
    ZOMBIE_COORDINATOR = "zombie_coordinator"
    WORKER_FAILURES = "worker_failures"


class Proposal(StrEnum):
    NONE = "none"
    STOP = "stop"
    RESTART = "restart"


K = EscalationKind
PROPOSALS: dict[EscalationKind, Proposal] = {
    K.STUCK_STAGE: Proposal.RESTART,
    # The runbook escalates stragglers to debug: a restart reruns every shard to stall behind
    # the same one (the 12-hour OOM loop). `straggler_step` may ask for a restart instead.
    K.STRAGGLERS: Proposal.NONE,
    K.REPEATED_ERROR: Proposal.STOP,
    K.CONTROLLER_TIMEOUTS: Proposal.NONE,
    K.STALE_COORDINATORS: Proposal.NONE,
    K.RETRY_FLAPPING: Proposal.STOP,
    K.ZOMBIE_COORDINATOR: Proposal.RESTART,
    K.WORKER_FAILURES: Proposal.NONE,
}
assert set(PROPOSALS) == set(EscalationKind)


class EscalationPolicy(Frozen):
    stuck_after: HumanDuration = Field(default=timedelta(minutes=30), gt=timedelta(0))
    straggler_after: HumanDuration = Field(default=timedelta(minutes=20), gt=timedelta(0))
    # Stragglers are at most max(floor, fraction of the stage's shards) in flight.
    straggler_in_flight_floor: int = Field(default=2, ge=1, strict=True)
    straggler_in_flight_fraction: float = Field(default=0.01, ge=0, le=1)
    straggler_idle_fraction: float = Field(default=0.9, gt=0, le=1)
    # What a stragglers episode proposes: none (escalate to debug) or restart.
    straggler_step: Proposal = Proposal.NONE
    repeated_error_count: int = Field(default=3, ge=2, strict=True)
    rpc_failures: int = Field(default=3, ge=1, strict=True)
    retry_flaps: int = Field(default=3, ge=1, strict=True)
    zombie_ticks: int = Field(default=2, ge=1, strict=True)
    worker_failures: int = Field(default=20, ge=1, strict=True)
    # Bounds of the history.
    max_signatures: int = Field(default=32, ge=1, le=1000, strict=True)
    max_notified: int = Field(default=64, ge=8, le=1000, strict=True)

    @field_validator("straggler_step")
    @classmethod
    def _straggler_step(cls, value: Proposal) -> Proposal:
        if value is Proposal.STOP:
            raise ValueError("straggler_step is none or restart (a stop ends the job unfinished)")
        return value

    @model_validator(mode="after")
    def _room_for_every_key(self) -> EscalationPolicy:
        # Every open episode's key must fit, or a dropped key would be notified again.
        if self.max_notified < self.max_signatures + len(EscalationKind):
            raise ValueError("max_notified must be at least max_signatures + 8")
        return self

    def straggler_max_in_flight(self, total: int) -> int:
        return max(self.straggler_in_flight_floor, int(total * self.straggler_in_flight_fraction))


class Sample(Frozen):
    """What one tick read about the latest attempt (plain values; the activity converts)."""

    at: datetime
    # AttemptRef.group of the latest attempt (None before any child appeared).
    attempt: str | None = None
    progress: StageProgress | None = None
    # The workers job's tasks by phase ({"running": 2990, "killed": 10}).
    worker_states: dict[Phase, int] = Field(default_factory=dict)
    coordinator: Phase | None = None
    # The coordinator's thread dump, read (None when no dump was taken this tick).
    coordinator_threads: ThreadState | None = None
    # Worker task attempts of the latest attempt that ended failed, killed or preempted.
    failed_worker_attempts: int = Field(default=0, ge=0)
    # One entry per error occurrence since the last tick (normalised again here).
    errors: tuple[str, ...] = ()
    # Controller methods whose call failed this tick.
    rpc_failed: tuple[str, ...] = ()
    stale_coordinators: tuple[str, ...] = ()


class EscalationState(Frozen):
    """The bounded history `observe` keeps between ticks."""

    attempt: str | None = None
    attempt_changes: int = 0
    # The stage clock: the stage and done count last seen, and since when they stand.
    stage: str | None = None
    done: int | None = None
    stage_since: datetime | None = None
    straggling_since: datetime | None = None
    # Out-of-memory errors seen while the stage's tail was few shards (its OOM loop).
    straggler_ooms: int = 0
    # Normalised error → occurrences, the most frequent max_signatures kept.
    errors: dict[str, int] = Field(default_factory=dict)
    rpc_failed_ticks: int = 0
    rpc_failing_since: datetime | None = None
    rpc_methods: tuple[str, ...] = ()
    coordinator_down_ticks: int = 0
    # Keys already returned, newest last (at most max_notified).
    notified: tuple[str, ...] = ()


class Escalation(Frozen):
    kind: EscalationKind
    key: str
    summary: str
    evidence: tuple[str, ...] = ()
    proposal: Proposal
    # The first tick of this episode: notify now, not on the ticks after.
    first: bool = True


# (kind, key, summary, evidence) of each escalation a rule raises.
_Raised = list[tuple[EscalationKind, str, str, tuple[str, ...]]]


_PIPELINE = re.compile(r"-p(\d+)-a\d+$")


def _pipeline(group: str) -> str | None:
    """`...-p2-a1` -> "2": the pipeline of an attempt's group name."""
    found = _PIPELINE.search(group)
    return found.group(1) if found else None


def observe(
    policy: EscalationPolicy, state: EscalationState, obs: Sample
) -> tuple[EscalationState, list[Escalation]]:
    """The history after `obs`, and the escalations that hold at `obs.at` (table above)."""
    update: dict[str, object] = {}
    raised: _Raised = []

    # The attempt: a change is a retry (or the next pipeline), and restarts the stage clocks.
    changes = state.attempt_changes
    if obs.attempt is not None and obs.attempt != state.attempt:
        if state.attempt is not None:
            # A retry of the same pipeline counts; the next pipeline is progress, and starts
            # the count over.
            same = _pipeline(obs.attempt) == _pipeline(state.attempt)
            changes = changes + 1 if same else 0
        update |= {"attempt": obs.attempt, "attempt_changes": changes, "stage": None,
                   "done": None, "stage_since": None, "straggling_since": None,
                   "straggler_ooms": 0, "coordinator_down_ticks": 0}  # fmt: skip
    fresh = state.model_copy(update=update)
    attempt = fresh.attempt or "-"

    raised += _stage_rules(policy, fresh, obs, attempt, update)
    raised += _error_rule(policy, fresh, obs, update)
    raised += _rpc_rule(policy, fresh, obs, update)
    raised += _coordinator_rule(policy, fresh, obs, attempt, update)

    if obs.stale_coordinators:
        ids = sorted(obs.stale_coordinators)
        raised.append((
            K.STALE_COORDINATORS, f"stale_coordinators:{_short(','.join(ids))}",
            f"{len(ids)} coordinator(s) of older attempts are still active",
            tuple(ids[:10]),
        ))  # fmt: skip
    if changes >= policy.retry_flaps and fresh.attempt is not None:
        raised.append((
            K.RETRY_FLAPPING, f"retry_flapping:{fresh.attempt}",
            f"the latest attempt changed {changes} times; now following {fresh.attempt}",
            (f"attempt changes: {changes} (threshold {policy.retry_flaps})",),
        ))  # fmt: skip
    if obs.failed_worker_attempts >= policy.worker_failures:
        raised.append((
            K.WORKER_FAILURES, f"worker_failures:{attempt}",
            f"{obs.failed_worker_attempts} worker attempts of {attempt} ended failed or killed",
            (_states(obs.worker_states),),
        ))  # fmt: skip

    order = list(EscalationKind)
    raised.sort(key=lambda row: order.index(row[0]))
    notified = list(state.notified)
    out: list[Escalation] = []
    for kind, key, summary, evidence in raised:
        first = key not in notified
        if first:
            notified.append(key)
        step = policy.straggler_step if kind is K.STRAGGLERS else PROPOSALS[kind]
        out.append(Escalation(kind=kind, key=key, summary=summary, evidence=evidence,
                              proposal=step, first=first))  # fmt: skip
    update["notified"] = tuple(notified[-policy.max_notified :])
    return state.model_copy(update=update), out


def _stage_rules(
    policy: EscalationPolicy,
    state: EscalationState,
    obs: Sample,
    attempt: str,
    update: dict[str, object],
) -> _Raised:
    progress = obs.progress
    if progress is None:
        return []
    stage = f"{progress.execution_id or ''}|{progress.stage}"
    since = state.stage_since
    if stage != state.stage or progress.done != state.done or since is None:
        since = obs.at
    update |= {"stage": stage, "done": progress.done, "stage_since": since}

    tail = progress.in_flight + progress.queued
    few_left = (
        not progress.complete
        and 0 < tail <= policy.straggler_max_in_flight(progress.total)
        and _idle_fraction(progress, obs) >= policy.straggler_idle_fraction
    )
    ooms = 0
    if few_left:
        ooms = (state.straggler_ooms if stage == state.stage else 0) + _ooms(obs.errors)
    # A tail shard back in the queue is ordinary scheduling, unless it keeps running out of
    # memory: then it is the straggler in its OOM loop.
    straggling = few_left and (progress.queued == 0 or ooms > 0)
    straggling_since = (state.straggling_since or obs.at) if straggling else None
    if stage != state.stage and straggling:
        straggling_since = obs.at
    update |= {"straggling_since": straggling_since, "straggler_ooms": ooms}

    line = progress.line()
    if straggling_since is not None and obs.at - straggling_since >= policy.straggler_after:
        how = f", out of memory and queued again {_times(ooms)}," if ooms else " with 0 queued"
        return [(
            K.STRAGGLERS, f"stragglers:{attempt}:{_short(stage)}:{straggling_since.isoformat()}",
            f"{tail} straggler shard(s) hold stage {progress.stage!r}{how} and "
            f"{progress.idle_workers} of {_alive(progress, obs)} workers idle for "
            f"{_span(obs.at - straggling_since)}",
            (line,),
        )]  # fmt: skip
    if not progress.complete and obs.at - since >= policy.stuck_after:
        return [(
            K.STUCK_STAGE, f"stuck_stage:{attempt}:{_short(stage)}:{progress.done}",
            f"stage {progress.stage!r} has stood at {progress.done}/{progress.total} for "
            f"{_span(obs.at - since)}",
            (line,),
        )]  # fmt: skip
    return []


# An out-of-memory error as Python, CUDA, the JVM or the kernel's OOM killer words it.
_OOM = re.compile(r"out of memory|MemoryError|OutOfMemory|\bOOM", re.IGNORECASE)


def _ooms(errors: tuple[str, ...]) -> int:
    return sum(1 for error in errors if _OOM.search(error))


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _alive(progress: StageProgress, obs: Sample) -> int:
    # The progress line's count, or the workers job's running tasks when the line has none.
    return progress.alive or obs.worker_states.get(JobPhase.RUNNING, 0)


def _idle_fraction(progress: StageProgress, obs: Sample) -> float:
    alive = _alive(progress, obs)
    return max(0, alive - progress.in_flight) / alive if alive else 0.0


def _error_rule(
    policy: EscalationPolicy, state: EscalationState, obs: Sample, update: dict[str, object]
) -> _Raised:
    counts = dict(state.errors)
    for error in obs.errors:
        signature = normalise_error(error)
        if signature:
            counts[signature] = counts.get(signature, 0) + 1
    if len(counts) > policy.max_signatures:
        # Keep the most frequent; among equals the newest (dicts keep insertion order).
        ranked = sorted(enumerate(counts.items()), key=lambda row: (row[1][1], row[0]))
        counts = dict(item for _, item in ranked[-policy.max_signatures :])
    update["errors"] = counts
    return [
        (K.REPEATED_ERROR, f"repeated_error:{_short(signature)}",
         f"the same error was seen {n} times: {signature}", (signature,))
        for signature, n in counts.items()
        if n >= policy.repeated_error_count
    ]  # fmt: skip


def _rpc_rule(
    policy: EscalationPolicy, state: EscalationState, obs: Sample, update: dict[str, object]
) -> _Raised:
    if not obs.rpc_failed:
        update |= {"rpc_failed_ticks": 0, "rpc_failing_since": None, "rpc_methods": ()}
        return []
    ticks = state.rpc_failed_ticks + 1
    since = state.rpc_failing_since or obs.at
    methods = tuple(dict.fromkeys((*state.rpc_methods, *obs.rpc_failed)))[-10:]
    update |= {"rpc_failed_ticks": ticks, "rpc_failing_since": since, "rpc_methods": methods}
    if ticks < policy.rpc_failures:
        return []
    return [(
        K.CONTROLLER_TIMEOUTS, f"controller_timeouts:{since.isoformat()}",
        f"controller calls failed on {ticks} ticks in a row since {since.isoformat()}",
        (f"failed: {', '.join(methods)}",),
    )]  # fmt: skip


def _coordinator_rule(
    policy: EscalationPolicy,
    state: EscalationState,
    obs: Sample,
    attempt: str,
    update: dict[str, object],
) -> _Raised:
    coordinator = obs.coordinator
    died = coordinator is not None and coordinator.is_terminal
    died = died and coordinator is not JobPhase.SUCCEEDED
    zombie = obs.coordinator_threads is ThreadState.ZOMBIE
    alive = obs.coordinator_threads in (ThreadState.ACTIVE, ThreadState.WAITING)
    if died or zombie:
        ticks = state.coordinator_down_ticks + 1
    elif alive:
        ticks = 0
    else:
        # No dump this tick and a coordinator not known dead: no evidence either way.
        ticks = state.coordinator_down_ticks
    update["coordinator_down_ticks"] = ticks
    if ticks < policy.zombie_ticks or not (died or zombie):
        return []
    how = f"is {obs.coordinator}" if died else "is a zombie (its pipeline exited)"
    evidence = [f"{ticks} ticks in a row", _states(obs.worker_states)]
    if obs.failed_worker_attempts:
        evidence.append(f"{obs.failed_worker_attempts} worker attempts ended failed or killed")
    return [(
        K.ZOMBIE_COORDINATOR, f"zombie_coordinator:{attempt}",
        f"the coordinator of {attempt} {how}", tuple(evidence),
    )]  # fmt: skip


def _states(states: dict[JobPhase, int]) -> str:
    counts = ", ".join(f"{n} {phase}" for phase, n in sorted(states.items()) if n)
    return f"worker tasks: {counts or 'none listed'}"


def _short(text: str) -> str:
    """A stable short name for `text` inside a key."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _span(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
