"""What a job looks like `t` scenario seconds after its launch: a pure function of t.

No state is stepped: each read computes the moment from the scenario and the plan, so a
fast-forward of hours costs nothing and two reads at the same t always agree. A scenario
kind is a small function that starts from the healthy attempt and bends it at its turn.
Task states are iris's names without the `TASK_STATE_` prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from emulators.iris.plan import Plan
from emulators.iris.scenarios import Kind, Scenario

# live: a thread in _wait_for_stage and the _coordinator_loop; waiting: the loop only;
# zombie: neither, every actor thread idle in _worker. A zephyr worker is busy (on CPU in
# _execute_shard), hung (in _execute_shard, off CPU) or idle (polling); driver: the root.
DumpKind = Literal["live", "waiting", "zombie", "busy", "hung", "idle", "driver"]
RpcFault = Literal["hang", "unavailable"]

ROOT_START = 0.5  # launch -> the job RUNNING
CHILD_DELAY = 1.0  # launch -> the coordinator and workers child jobs exist
SETTLE = 2.0  # pipeline end -> its children SUCCEEDED
ROOT_SETTLE = 4.0  # pipeline end -> the job SUCCEEDED
KILL_AFTER_OOM = 20.0  # terminated-by-user: the OOM -> "Terminated by user"
TERMINATED = "Terminated by user"
# iris's terminal task states; a job's terminal states are the first five.
FINISHED = frozenset(
    {
        "SUCCEEDED",
        "FAILED",
        "KILLED",
        "WORKER_FAILED",
        "UNSCHEDULABLE",
        "PREEMPTED",
        "COSCHED_FAILED",
    }
)


@dataclass(frozen=True)
class TaskMoment:
    state: str
    started: float | None = None  # t it became RUNNING
    finished: float | None = None
    error: str = ""
    exit_code: int | None = None
    cores: float = 0.0  # CPU cores its main process burns now
    dump: DumpKind = "idle"
    attempt: int = 0  # current_attempt_id
    history: tuple[TaskMoment, ...] = ()  # earlier attempts, oldest first


@dataclass(frozen=True)
class Progress:
    stage_index: int
    stage: str
    done: int
    total: int
    in_flight: int
    queued: int


@dataclass(frozen=True)
class AttemptMoment:
    attempt: int
    appeared: float
    coord: TaskMoment
    workers: tuple[TaskMoment, ...]
    progress: Progress | None
    # The coordinator writes progress lines now (false: exited, hung, waiting for workers).
    progress_lines: bool
    # Idle workers flood its log with pull_task and friends.
    noise: bool
    # Stages this attempt has finished (frozen where the scenario stops the pipeline).
    completed_stages: int = 0
    pipeline: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.pipeline, self.attempt)


@dataclass(frozen=True)
class Moment:
    t: float
    root: TaskMoment
    attempts: tuple[AttemptMoment, ...]
    # False: the job's workers cannot be reached (exec and profile fail) and log nothing.
    reachable: bool = True
    rpc_fault: RpcFault | None = None


def startup_state(since: float, startup: float) -> str:
    if since < 0.3 * startup:
        return "PENDING"
    if since < 0.6 * startup:
        return "BUILDING"
    return "RUNNING"


def progress_at(scenario: Scenario, elapsed: float) -> Progress | None:
    """The stage being worked on `elapsed` seconds into the pipeline; None outside it."""
    if elapsed < 0:
        return None
    for index, stage in enumerate(scenario.stages):
        if elapsed < stage.seconds:
            done = min(stage.shards - 1, int(stage.shards * elapsed / stage.seconds))
            left = stage.shards - done
            in_flight = min(scenario.workers, left)
            return Progress(index, stage.name, done, stage.shards, in_flight, left - in_flight)
        elapsed -= stage.seconds
    return None


def _task(state: str, running_at: float, cores: float, dump: DumpKind) -> TaskMoment:
    started = running_at if state == "RUNNING" else None
    return TaskMoment(state=state, started=started, cores=cores, dump=dump)


def healthy_attempt(
    s: Scenario, attempt: int, appeared: float, t: float, pipeline: int = 0
) -> tuple[AttemptMoment, float]:
    """One attempt that runs every stage; and the t its pipeline ends."""
    running_at = appeared + 0.6 * s.startup
    stage_start = appeared + s.startup
    end = stage_start + s.pipeline_seconds
    since = t - appeared
    into = t - stage_start
    progress = progress_at(s, into)
    completed = progress.stage_index if progress else (len(s.stages) if into > 0 else 0)
    if t >= end + SETTLE:
        done = TaskMoment("SUCCEEDED", running_at, end + SETTLE, exit_code=0, dump="idle")
        finished = AttemptMoment(
            attempt,
            appeared,
            done,
            (done,) * s.workers,
            None,
            False,
            False,
            len(s.stages),
            pipeline,
        )
        return finished, end
    state = startup_state(since, s.startup)
    busy = progress.in_flight if progress else 0
    coord = _task(
        state,
        running_at,
        cores=s.coord_cores if progress else 0.0,
        dump="live" if progress else "waiting",
    )
    workers = tuple(
        _task(
            state,
            running_at,
            cores=s.worker_cores if i < busy else 0.0,
            dump="busy" if i < busy else "idle",
        )
        for i in range(s.workers)
    )
    lines = state == "RUNNING" and t < end + SETTLE
    moment = AttemptMoment(
        attempt, appeared, coord, workers, progress, lines, lines, completed, pipeline
    )
    return moment, end


def _root(
    state: str, finished: float | None = None, error: str = "", exit_code: int | None = None
) -> TaskMoment:
    started = None if state == "PENDING" else ROOT_START
    return TaskMoment(state, started, finished, error, exit_code, dump="driver")


def _running_root() -> TaskMoment:
    return _root("RUNNING")


def _ended_root(end: float, t: float) -> TaskMoment:
    if t >= end + ROOT_SETTLE:
        return _root("SUCCEEDED", end + ROOT_SETTLE, exit_code=0)
    return _running_root()


def pipeline_starts(s: Scenario) -> list[float]:
    """When each pipeline's children appear: the next one after the previous succeeded."""
    starts = [CHILD_DELAY]
    for _ in range(1, s.pipelines):
        starts.append(starts[-1] + s.startup + s.pipeline_seconds + SETTLE + 1.0)
    return starts


def _pipelines(s: Scenario, t: float) -> tuple[tuple[AttemptMoment, ...], float]:
    """Every pipeline that has appeared by t, and the t the last one ends."""
    shown: list[AttemptMoment] = []
    end = 0.0
    for pipeline, appeared in enumerate(pipeline_starts(s)):
        attempt, end = healthy_attempt(s, 0, appeared, t, pipeline=pipeline)
        if t >= appeared:
            shown.append(attempt)
    return tuple(shown), end


def _visible(attempt: AttemptMoment, t: float) -> tuple[AttemptMoment, ...]:
    return (attempt,) if t >= attempt.appeared else ()


def _stopped(task: TaskMoment, state: str, at: float, error: str, code: int) -> TaskMoment:
    if task.state in FINISHED:
        return task
    return replace(task, state=state, finished=at, error=error, exit_code=code, cores=0.0)


def killed(task: TaskMoment, at: float, error: str) -> TaskMoment:
    return _stopped(task, "KILLED", at, error, 137)


def _ended(
    a: AttemptMoment, at: float, error: str, coord: TaskMoment | None = None
) -> AttemptMoment:
    """The attempt's unfinished tasks KILLED at `at` (its coordinator: `coord` when given),
    its log silent from then on."""
    workers = tuple(killed(w, at, error) for w in a.workers)
    coord = coord or killed(a.coord, at, error)
    return replace(
        a, coord=coord, workers=workers, progress=None, progress_lines=False, noise=False
    )


def kill_all(m: Moment, at: float, error: str = TERMINATED) -> Moment:
    """Every unfinished task KILLED at `at`: what TerminateJob does to the tree."""
    attempts = tuple(_ended(a, at, error) for a in m.attempts)
    return replace(m, root=killed(m.root, at, error), attempts=attempts)


# ------------------------------------------------------------------ the kinds


def _healthy(s: Scenario, plan: Plan, t: float) -> Moment:
    attempts, end = _pipelines(s, t)
    return Moment(t, _ended_root(end, t), attempts)


def _cpu_bound_quiet(s: Scenario, plan: Plan, t: float) -> Moment:
    attempts, end = _pipelines(s, t)

    def flat_out(a: AttemptMoment) -> AttemptMoment:
        if a.coord.state != "RUNNING":
            return a
        # Every worker computes flat out, whatever the shard bookkeeping says.
        workers = tuple(replace(w, cores=s.worker_cores, dump="busy") for w in a.workers)
        return replace(a, workers=workers, noise=False)

    return Moment(t, _ended_root(end, t), tuple(flat_out(a) for a in attempts))


def _rpc_timeouts(s: Scenario, plan: Plan, t: float) -> Moment:
    m = _healthy(s, plan, t)
    half = s.event_at + s.event_for / 2
    fault: RpcFault | None = None
    if s.event_at <= t < half:
        fault = "hang"
    elif half <= t < s.event_at + s.event_for:
        fault = "unavailable"
    return replace(m, rpc_fault=fault)


def _zombie(s: Scenario, plan: Plan, t: float) -> Moment:
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, min(t, s.event_at))
    if t < s.event_at:
        return Moment(t, _running_root(), _visible(attempt, t))
    # The pipeline returned; the coordinator actor never exits, its pool idles.
    coord = replace(attempt.coord, cores=0.0, dump="zombie")
    workers = tuple(replace(w, cores=0.0, dump="idle") for w in attempt.workers)
    zombie = replace(attempt, coord=coord, workers=workers, progress=None, progress_lines=False)
    return Moment(t, _running_root(), (zombie,))


def _killed_retry(s: Scenario, plan: Plan, t: float) -> Moment:
    first, _ = healthy_attempt(s, 0, CHILD_DELAY, min(t, s.event_at))
    if t < s.event_at:
        return Moment(t, _running_root(), _visible(first, t))
    waiting = replace(first.coord, cores=0.0, dump="waiting")
    stale = _ended(first, s.event_at, "Worker killed: preempted", waiting)
    retry_at = s.event_at + s.retry_delay
    if t < retry_at:
        return Moment(t, _running_root(), (stale,))
    second, end = healthy_attempt(s, 1, retry_at, t)
    root = _ended_root(end, t)
    if root.state == "SUCCEEDED":
        # The job's end takes its stale coordinator with it.
        stale = replace(stale, coord=killed(stale.coord, end + ROOT_SETTLE, ""))
    return Moment(t, root, (stale, second))


def _stuck_stage(s: Scenario, plan: Plan, t: float) -> Moment:
    if t < s.event_at:
        return _healthy(s, plan, t)
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, s.event_at)
    # Shards in flight that never finish: the coordinator still waits and logs the same count.
    workers = tuple(replace(w, cores=0.0, dump="idle") for w in attempt.workers)
    stuck = replace(attempt, workers=workers, progress_lines=True, noise=True)
    return Moment(t, _running_root(), (stuck,))


def straggler_window(s: Scenario) -> tuple[float, float]:
    """From when the first stage has one shard left until the straggler finishes."""
    first = s.stages[0]
    reached = CHILD_DELAY + s.startup + first.seconds * (first.shards - 1) / first.shards
    return reached, reached + s.event_for


def _stragglers(s: Scenario, plan: Plan, t: float) -> Moment:
    start, end = straggler_window(s)
    if t < start:
        return _healthy(s, plan, t)
    if t >= end:
        moment = _healthy(s, plan, t - s.event_for)
        return _shifted(moment, t, s.event_for)
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, start)
    first = s.stages[0]
    progress = Progress(0, first.name, first.shards - 1, first.shards, 1, 0)
    workers = tuple(
        replace(w, cores=s.worker_cores, dump="busy")
        if i == plan.culprit_worker
        else replace(w, cores=0.0, dump="idle")
        for i, w in enumerate(attempt.workers)
    )
    coord = replace(attempt.coord, dump="live", cores=s.coord_cores)
    held = replace(attempt, coord=coord, workers=workers, progress=progress, progress_lines=True)
    return Moment(t, _running_root(), (held,))


OOM_EXIT = "RuntimeError: CUDA out of memory"


def oom_times(s: Scenario) -> list[float]:
    """oom-straggler: when the last shard's worker runs out of memory. Each turn of
    failure_gap, the shard runs failure_gap - retry_delay, then waits retry_delay queued."""
    start, end = straggler_window(s)
    runs = s.failure_gap - s.retry_delay
    times, at = [], start + runs
    while at < end:
        times.append(at)
        at += s.failure_gap
    return times


def _oom_straggler(s: Scenario, plan: Plan, t: float) -> Moment:
    start, end = straggler_window(s)
    if t < start:
        return _healthy(s, plan, t)
    if t >= end:
        moment = _shifted(_healthy(s, plan, t - s.event_for), t, s.event_for)
        return _with_oom_attempts(s, plan, moment, end)
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, start)
    first = s.stages[0]
    running = (t - start) % s.failure_gap < s.failure_gap - s.retry_delay
    # In flight, or back in the queue since its worker ran out of memory.
    progress = Progress(
        0, first.name, first.shards - 1, first.shards, int(running), int(not running)
    )
    workers = tuple(
        replace(w, cores=s.worker_cores, dump="busy")
        if i == plan.culprit_worker and running
        else replace(w, cores=0.0, dump="idle")
        for i, w in enumerate(attempt.workers)
    )
    coord = replace(attempt.coord, dump="live", cores=s.coord_cores)
    held = replace(attempt, coord=coord, workers=workers, progress=progress, progress_lines=True)
    return _with_oom_attempts(s, plan, Moment(t, _running_root(), (held,)), t)


def _with_oom_attempts(s: Scenario, plan: Plan, m: Moment, until: float) -> Moment:
    """The culprit worker's process dies at each OOM up to `until`; iris starts a new attempt
    a second later (on the same worker: pid 7 again, with a new start time)."""
    return _with_dead_attempts(plan, m, [at for at in oom_times(s) if at <= until], OOM_EXIT)


def _with_dead_attempts(plan: Plan, m: Moment, deaths: list[float], error: str) -> Moment:
    """The culprit worker's attempts, each ended FAILED with `error` at one of `deaths`;
    iris starts the next a second later."""
    if not deaths or not m.attempts:
        return m
    attempt = m.attempts[0]
    current = attempt.workers[plan.culprit_worker]
    history: list[TaskMoment] = []
    started = current.started
    for at in deaths:
        history.append(
            TaskMoment("FAILED", started, at, error, 1, attempt=len(history), dump="idle")
        )
        started = at + 1.0
    current = replace(current, started=started, attempt=len(history), history=tuple(history))
    workers = list(attempt.workers)
    workers[plan.culprit_worker] = current
    return replace(m, attempts=(replace(attempt, workers=tuple(workers)), *m.attempts[1:]))


def _shifted(m: Moment, t: float, by: float) -> Moment:
    """A moment computed `by` seconds early, its end times moved to where they happen."""

    def move(task: TaskMoment) -> TaskMoment:
        return replace(task, finished=None if task.finished is None else task.finished + by)

    attempts = tuple(
        replace(a, coord=move(a.coord), workers=tuple(move(w) for w in a.workers))
        for a in m.attempts
    )
    return replace(m, t=t, root=move(m.root), attempts=attempts)


def failure_times(s: Scenario) -> list[float]:
    return [s.event_at + k * s.failure_gap for k in range(s.max_task_errors)]


def abort_error(s: Scenario, plan: Plan) -> str:
    return (
        f"Coordinator aborted: shard {plan.culprit_shard} exceeded {s.max_task_errors} "
        f"task errors: {FAILURE_ERROR}"
    )


FAILURE_ERROR = "ValueError: could not decode record 18446744: invalid start byte 0xff"


def with_failed_attempts(s: Scenario, plan: Plan, m: Moment) -> Moment:
    """The culprit worker's process dies at each task error and iris starts a new attempt."""
    failures = [at for at in failure_times(s)[:-1] if at <= m.t]
    return _with_dead_attempts(plan, m, failures, FAILURE_ERROR)


def _repeated_failure(s: Scenario, plan: Plan, t: float) -> Moment:
    return with_failed_attempts(s, plan, _repeated_failure_base(s, plan, t))


def _repeated_failure_base(s: Scenario, plan: Plan, t: float) -> Moment:
    abort = failure_times(s)[-1]
    if t < abort:
        return _healthy(s, plan, t)
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, abort)
    error = abort_error(s, plan)
    coord = _stopped(attempt.coord, "FAILED", abort + 1, error, 1)
    failed = _ended(attempt, abort + 1, "Parent job failed", coord)
    root = _root("FAILED", abort + 2, error, 1) if t >= abort + 2 else _running_root()
    return Moment(t, root, (failed,))


def _terminated_by_user(s: Scenario, plan: Plan, t: float) -> Moment:
    kill_at = s.event_at + KILL_AFTER_OOM
    moment = _healthy(s, plan, min(t, kill_at))
    moment = replace(moment, t=t)
    return kill_all(moment, kill_at) if t >= kill_at else moment


def _hung_busy(s: Scenario, plan: Plan, t: float) -> Moment:
    if t < s.event_at:
        return _healthy(s, plan, t)
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, s.event_at)
    # Between two stages for good: the loop ticks, nothing runs, nothing is logged.
    coord = replace(attempt.coord, state="RUNNING", dump="waiting", cores=0.0)
    workers = tuple(replace(w, state="RUNNING", cores=0.0, dump="hung") for w in attempt.workers)
    hung = replace(
        attempt, coord=coord, workers=workers, progress=None, progress_lines=False, noise=False
    )
    return Moment(t, _running_root(), (hung,))


def _dead_worker(s: Scenario, plan: Plan, t: float) -> Moment:
    if t < s.event_at:
        return _healthy(s, plan, t)
    attempt, _ = healthy_attempt(s, 0, CHILD_DELAY, s.event_at)
    silent = replace(attempt, progress_lines=False, noise=False)
    return Moment(t, _running_root(), (silent,), reachable=False)


# The preemption's reason: the task's error, and its children's when it is retried.
PREEMPTED_BY = "Preempted by /ops/priority-eval"
PARENT_TERMINATED = "Parent job terminated"  # a child killed when its parent job ended


def preemption_times(s: Scenario) -> list[float]:
    return [s.event_at + k * s.failure_gap for k in range(s.preemptions)]


def _preempted(s: Scenario, plan: Plan, t: float) -> Moment:
    """The job's task is preempted at each of preemption_times. Within its budget
    (max_retries_preemption) it goes back to PENDING, its attempt PREEMPTED and its children
    KILLED with the preemption's reason, and after retry_delay a new attempt runs the
    pipeline again (a1); past its budget it stays PREEMPTED, the job WORKER_FAILED, its
    children KILLED "Parent job terminated" (as a local iris cluster does)."""
    history: list[TaskMoment] = []
    shown: list[AttemptMoment] = []
    started, appeared = ROOT_START, CHILD_DELAY
    times = preemption_times(s)
    for attempt in range(len(times) + 1):
        at = times[attempt] if attempt < len(times) else None
        if at is None or t < at:
            pipeline, end = healthy_attempt(s, attempt, appeared, t)
            if t >= appeared:
                shown.append(pipeline)
            root = replace(
                _ended_root(end, t), started=started, attempt=attempt, history=tuple(history)
            )
            return Moment(t, root, tuple(shown))
        pipeline, _ = healthy_attempt(s, attempt, appeared, at)
        retried = attempt + 1 <= s.max_retries_preemption
        reason = PREEMPTED_BY if retried else PARENT_TERMINATED
        if at >= appeared:
            shown.append(_ended(pipeline, at, reason))
        ended = TaskMoment("PREEMPTED", started, at, PREEMPTED_BY, attempt=attempt, dump="driver")
        if not retried:
            return Moment(t, replace(ended, history=tuple(history)), tuple(shown))
        history.append(ended)
        restart = at + s.retry_delay
        if t < restart:
            waiting = TaskMoment("PENDING", attempt=attempt, history=tuple(history), dump="driver")
            return Moment(t, waiting, tuple(shown))
        started, appeared = restart, restart + CHILD_DELAY
    raise AssertionError("unreachable: the last attempt is never preempted")


PLAYS: dict[Kind, Callable[[Scenario, Plan, float], Moment]] = {
    "healthy": _healthy,
    "zombie-coordinator": _zombie,
    "killed-retry": _killed_retry,
    "stuck-stage": _stuck_stage,
    "stragglers": _stragglers,
    "oom-straggler": _oom_straggler,
    "repeated-failure": _repeated_failure,
    "rpc-timeouts": _rpc_timeouts,
    "terminated-by-user": _terminated_by_user,
    "cpu-bound-quiet": _cpu_bound_quiet,
    "hung-busy": _hung_busy,
    "dead-worker": _dead_worker,
    "preempted": _preempted,
}


def play(s: Scenario, plan: Plan, t: float) -> Moment:
    """The job `t` scenario seconds after launch (t < 0: just launched, nothing yet)."""
    t = max(t, 0.0)
    if t < ROOT_START:
        return Moment(t, _root("PENDING"), ())
    return PLAYS[s.kind](s, plan, t)
