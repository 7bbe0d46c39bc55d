"""The emulated controller: root jobs playing scenarios, their children, tasks and counters.

A root job is stored; its children, tasks, logs and dumps are computed from its timeline at
the current scenario time, with TerminateJob calls laid over it. No I/O here: the Connect
handlers (service.py) turn these answers into wire messages.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from emulators.iris.clock import ScenarioClock
from emulators.iris.launch import stored_request
from emulators.iris.logs import JobLog, Line, TaskIds
from emulators.iris.plan import Plan, make_plan
from emulators.iris.procs import Container, new_container, session_reading
from emulators.iris.scenarios import Scenario
from emulators.iris.timeline import (
    CHILD_DELAY,
    FINISHED,
    PARENT_TERMINATED,
    TERMINATED,
    AttemptMoment,
    Moment,
    TaskMoment,
    kill_all,
    killed,
    play,
    startup_state,
)
from keeper.wire.iris.exec_commands import (
    CLK_TCK,
    COORDINATOR_CPU_COMMAND,
    PROC_STAT_COMMAND,
    SESSION_CPU_COMMAND,
    STAT_EXIT,
)

# When the first of a scenario's extra_children appears (just after the pipeline's).
EXTRA_CHILD_AT = CHILD_DELAY + 0.5


class IrisError(Exception):
    """An RPC failure with its Connect code name (not_found, already_exists, ...)."""

    def __init__(self, code: str, message: str, exception_type: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        # The Python exception iris's interceptor wrapped (ErrorDetails), for `internal` ones.
        self.exception_type = exception_type


@dataclass(frozen=True)
class TaskView:
    task_id: str
    job_id: str
    index: int
    host: str
    moment: TaskMoment
    dump_name: str  # the zephyr worker id, for a worker's thread names


@dataclass(frozen=True)
class JobView:
    job_id: str
    name: str
    parent: str
    tasks: tuple[TaskView, ...]
    submitted: float  # t
    has_children: bool

    @property
    def state(self) -> str:
        started = any(t.moment.started is not None or t.moment.history for t in self.tasks)
        return job_state([task.moment.state for task in self.tasks], started)


def _ended(states: list[str]) -> bool:
    return all(s in FINISHED for s in states)


# A job's state from its tasks' states (and whether any task ever started): the first row
# whose test holds. iris's rules, where they differ from the scenarios' needs no further: a
# job whose tasks all ended with one PREEMPTED (its preemption budget spent) or WORKER_FAILED
# is WORKER_FAILED; a job whose task went back to PENDING after it started is RUNNING.
_JOB_STATE_RULES: tuple[tuple[str, Callable[[list[str], bool], bool]], ...] = (
    ("PENDING", lambda states, started: not states),
    ("SUCCEEDED", lambda states, started: all(s == "SUCCEEDED" for s in states)),
    ("FAILED", lambda states, started: _ended(states) and "FAILED" in states),
    ("UNSCHEDULABLE", lambda states, started: _ended(states) and "UNSCHEDULABLE" in states),
    ("KILLED", lambda states, started: _ended(states) and "KILLED" in states),
    ("WORKER_FAILED", lambda states, started: _ended(states)),
    ("RUNNING", lambda states, started: "RUNNING" in states),
    ("BUILDING", lambda states, started: "BUILDING" in states),
    ("PENDING", lambda states, started: all(s == "PENDING" for s in states) and not started),
    ("RUNNING", lambda states, started: True),
)


def job_state(states: list[str], started: bool = False) -> str:
    return next(state for state, holds in _JOB_STATE_RULES if holds(states, started))


@dataclass
class RootJob:
    job_id: str
    user: str
    request: dict[str, Any]  # the LaunchJobRequest as received (the action log shows it)
    scenario: Scenario
    seed: int
    plan: Plan
    launched_scene: float  # scenario Unix seconds of t = 0 (backdated when asked)
    launched_wall: float
    generation: int
    terminated: dict[str, float] = field(default_factory=dict)  # job id -> t of TerminateJob
    containers: dict[tuple[str, int], Container] = field(default_factory=dict)
    session_rng: random.Random = field(default_factory=random.Random)
    log: JobLog | None = None
    # The scenario clock when the job was launched (launched_scene + backdate - queued), and
    # the clock, which maps scenario time to the wall time iris stamps.
    scene_at_launch: float = 0.0
    clock: ScenarioClock | None = None
    # What the controller keeps of the request, rebuilt as GetJobStatus returns it before it
    # redacts (emulators/iris/launch.py).
    stored: dict[str, Any] = field(default_factory=dict)
    _extras_cache: tuple[Any, list[JobView]] | None = field(default=None, repr=False)

    def t(self, scene_now: float) -> float:
        return scene_now - self.launched_scene

    def wall_of(self, t: float) -> float:
        """The wall time iris stamps on what happened at scenario time t: before the launch
        (a backdated job's past), its real age; after it, when the scenario clock passed it."""
        scene = self.launched_scene + t
        if self.clock is None:
            return scene
        if scene <= self.scene_at_launch:
            return self.launched_wall - (self.scene_at_launch - scene)
        return max(self.launched_wall, self.clock.wall_at(scene))

    def t_of_wall(self, wall: float) -> float:
        """The scenario time t of wall time `wall` (a `since` filter given in wall time)."""
        if self.clock is None:
            return wall - self.launched_scene
        if wall <= self.launched_wall:
            scene = self.scene_at_launch - (self.launched_wall - wall)
        else:
            scene = max(self.scene_at_launch, self.clock.scene_at(wall))
        return scene - self.launched_scene

    # ----------------------------------------------------------- the tree

    def coord_job(self, a: AttemptMoment) -> str:
        return f"{self.job_id}/{self.plan.group(a.attempt, 'coord', a.pipeline)}"

    def workers_job(self, a: AttemptMoment) -> str:
        return f"{self.job_id}/{self.plan.group(a.attempt, 'workers', a.pipeline)}"

    def moment(self, t: float) -> Moment:
        """The timeline at t with every TerminateJob laid over it."""
        m = play(self.scenario, self.plan, t)
        if self.job_id in self.terminated and t >= self.terminated[self.job_id]:
            return kill_all(m, self.terminated[self.job_id])
        attempts = []
        for a in m.attempts:
            for role in ("coord", "workers"):
                child = self.coord_job(a) if role == "coord" else self.workers_job(a)
                at = self.terminated.get(child)
                if at is not None and t >= at:
                    a = _kill_role(a, role, at)
            attempts.append(a)
        return replace(m, attempts=tuple(attempts))

    def jobs(self, t: float, extras: bool = True) -> list[JobView]:
        """The job and its children at t; `extras`: with the scenario's extra_children."""
        m = self.moment(t)
        root_task = TaskView(f"{self.job_id}/0", self.job_id, 0, self.plan.root_host, m.root, "")
        extra = self.scenario.extra_children > 0 and t >= EXTRA_CHILD_AT
        views = [
            JobView(self.job_id, self.job_id, "", (root_task,), 0.0, bool(m.attempts) or extra)
        ]
        for a in m.attempts:
            coord = self.coord_job(a)
            host = self.plan.coord_hosts[a.attempt]
            ctask = TaskView(f"{coord}/0", coord, 0, host, a.coord, "")
            views.append(JobView(coord, coord, self.job_id, (ctask,), a.appeared, False))
            workers = self.workers_job(a)
            wtasks = tuple(
                TaskView(
                    f"{workers}/{i}",
                    workers,
                    i,
                    self.plan.worker_hosts[i],
                    w,
                    self.plan.zephyr_worker_id(a.attempt, i, a.pipeline),
                )
                for i, w in enumerate(a.workers)
            )
            views.append(JobView(workers, workers, self.job_id, wtasks, a.appeared, False))
        if extras and self.scenario.extra_children:
            views.extend(self._extra_children(t, m))
        return views

    def _extra_children(self, t: float, m: Moment) -> list[JobView]:
        """The scenario's plain child jobs (`<job>/shard-00000`, one task each): they appear
        a millisecond apart after the pipeline's children and end one by one while its
        stages run; a TerminateJob, or the job's end, kills the ones still running."""
        s, n = self.scenario, self.scenario.extra_children
        ends = [at for at in (self.terminated.get(self.job_id), m.root.finished) if at is not None]
        job_end = min(ends) if ends else None
        job_end_error = TERMINATED if self.job_id in self.terminated else PARENT_TERMINATED
        key = (t, job_end, tuple(sorted(self.terminated.items())))
        if self._extras_cache is not None and self._extras_cache[0] == key:
            return self._extras_cache[1]
        views: list[JobView] = []
        hosts = self.plan.worker_hosts
        for i in range(n):
            appeared = EXTRA_CHILD_AT + i * 0.001
            if t < appeared:
                break
            job_id = f"{self.job_id}/shard-{i:05d}"
            running_at = appeared + 0.6 * s.startup
            done_at = max(CHILD_DELAY + s.startup + s.pipeline_seconds * (i + 1) / (n + 1),
                          running_at + 1.0)  # fmt: skip
            own_end = self.terminated.get(job_id)
            killed_at = min(at for at in (own_end, job_end, float("inf")) if at is not None)
            error = TERMINATED if own_end is not None and own_end == killed_at else job_end_error
            if t >= done_at and done_at <= killed_at:
                task = TaskMoment("SUCCEEDED", running_at, done_at, exit_code=0)
            elif t >= killed_at:
                started = running_at if killed_at >= running_at else None
                task = TaskMoment("KILLED", started, killed_at, error, 137)
            else:
                state = startup_state(t - appeared, s.startup)
                task = TaskMoment(state, running_at if state == "RUNNING" else None)
            view = TaskView(f"{job_id}/0", job_id, 0, hosts[i % len(hosts)], task, "")
            views.append(JobView(job_id, job_id, self.job_id, (view,), appeared, False))
        self._extras_cache = (key, views)
        return views

    def finished(self, t: float) -> bool:
        return self.moment(t).root.state in FINISHED

    # ----------------------------------------------------------- CPU

    def container(self, task: TaskView, wall: float) -> Container | None:
        """The task's current attempt's processes (created when first seen running)."""
        if task.moment.state != "RUNNING":
            return None
        key = (task.task_id, task.moment.attempt)
        found = self.containers.get(key)
        if found is None:
            boot = self.launched_wall - self.plan.boot_offsets[self.plan.hosts.index(task.host)]
            start, history = wall, 0.0
            if self.scenario.backdate and task.moment.attempt == 0:
                start = wall - self.scenario.backdate
                busy = min(self.scenario.backdate, self.scenario.event_at)
                rate = self.scenario.worker_cores if task.dump_name else self.scenario.coord_cores
                history = rate * CLK_TCK * busy
                boot = min(boot, start - 600)
            found = new_container(task.host, boot, start, task.moment.cores, history)
            self.containers[key] = found
        return found

    def settle(self, t: float, wall: float) -> None:
        """Bring every container's ticks to `wall` at the rates of the moment t (the extra
        children burn no CPU: their containers are made only when asked for)."""
        running: set[tuple[str, int]] = set()
        for job in self.jobs(t, extras=False):
            for task in job.tasks:
                container = self.container(task, wall)
                if container is not None:
                    container.set_cores(wall, task.moment.cores)
                    running.add((task.task_id, task.moment.attempt))
        for key, container in self.containers.items():
            if key not in running:
                container.set_cores(wall, 0.0)


def _kill_role(a: AttemptMoment, role: str, at: float) -> AttemptMoment:
    if role == "coord":
        coord = killed(a.coord, at, TERMINATED)
        return replace(a, coord=coord, progress=None, progress_lines=False, noise=False)
    return replace(a, workers=tuple(killed(w, at, TERMINATED) for w in a.workers))


@dataclass(frozen=True)
class Action:
    at_wall: float
    method: str
    job_id: str
    user: str
    detail: dict[str, Any]


class Controller:
    """Every root job, by id; the newest generation of a name wins."""

    def __init__(self, clock: ScenarioClock, default_scenario: Scenario) -> None:
        self.clock = clock
        self.jobs: dict[str, RootJob] = {}
        self.next_scenario: Scenario = default_scenario
        self.actions: list[Action] = []
        self._generation = 0

    # ----------------------------------------------------------- lookup

    def now_t(self, job: RootJob) -> float:
        return job.t(self.clock.now())

    def root_of(self, any_id: str) -> RootJob:
        parts = any_id.split("/")
        if len(parts) < 3 or parts[0] != "":
            raise IrisError("invalid_argument", f"not a job or task id: {any_id!r}")
        root = "/".join(parts[:3])
        job = self.jobs.get(root)
        if job is None:
            raise IrisError("not_found", f"job {root} not found")
        return job

    def find_job(self, job_id: str) -> tuple[RootJob, JobView]:
        root = self.root_of(job_id)
        for view in root.jobs(self.now_t(root)):
            if view.job_id == job_id:
                return root, view
        raise IrisError("not_found", f"job {job_id} not found")

    def find_task(self, task_id: str) -> tuple[RootJob, TaskView]:
        base = task_id.partition(":")[0]
        job_id, _, index = base.rpartition("/")
        if not index.isdigit():
            raise IrisError("invalid_argument", f"not a task id: {task_id!r}")
        root, view = self.find_job(job_id)
        for task in view.tasks:
            if task.index == int(index):
                return root, task
        raise IrisError("not_found", f"task {base} not found")

    def all_jobs(self) -> Iterator[tuple[RootJob, JobView]]:
        for root in self.jobs.values():
            for view in root.jobs(self.now_t(root)):
                yield root, view

    # ----------------------------------------------------------- launch, terminate

    def launch(
        self,
        job_id: str,
        user: str,
        request: dict[str, Any],
        scenario: Scenario,
        seed: int | None = None,
    ) -> RootJob:
        existing = self.jobs.get(job_id)
        if existing is not None and not existing.finished(self.now_t(existing)):
            raise IrisError("already_exists", f"job {job_id} already exists and is running")
        self._generation += 1
        seed = self._generation if seed is None else seed
        scene_now = self.clock.now()
        job = RootJob(
            job_id=job_id,
            user=user,
            request=request,
            scenario=scenario,
            seed=seed,
            plan=make_plan(job_id, scenario, seed),
            launched_scene=scene_now - scenario.backdate + scenario.queued,
            launched_wall=self.clock.wall.now(),
            scene_at_launch=scene_now,
            clock=self.clock,
            generation=self._generation,
            session_rng=random.Random(seed + 7_777),
            stored=stored_request(request, job_id),
        )
        job.log = JobLog(
            scenario, job.plan, TaskIds(job_id, job.plan), seed, job.moment, job.wall_of
        )
        self.jobs[job_id] = job
        return job

    def terminate(self, job_id: str) -> list[str]:
        """Depth first: children before the parent; finished jobs are skipped."""
        root, view = self.find_job(job_id)
        t = self.now_t(root)
        killed: list[str] = []
        children = [v for v in root.jobs(t) if v.parent == view.job_id]
        for child in children:
            if child.state not in FINISHED:
                root.terminated.setdefault(child.job_id, t)
                killed.append(child.job_id)
        if view.state not in FINISHED:
            root.terminated.setdefault(view.job_id, t)
            killed.append(view.job_id)
        return killed

    def record(self, method: str, job_id: str, user: str, **detail: Any) -> None:
        self.actions.append(Action(self.clock.wall.now(), method, job_id, user, detail))

    # ----------------------------------------------------------- CPU

    def settle_all(self) -> None:
        wall = self.clock.wall.now()
        for root in self.jobs.values():
            root.settle(self.now_t(root), wall)

    def exec_in(self, task_id: str, command: list[str]) -> tuple[int, str, str, str]:
        """exit code, stdout, stderr, error of a command in the task's container."""
        root, task = self.find_task(task_id)
        t = self.now_t(root)
        if not root.moment(t).reachable:
            return -1, "", "", f"failed to reach worker {task.host}: connection refused"
        if task.moment.state != "RUNNING":
            return -1, "", "", f"task {task.task_id} is not running ({task.moment.state})"
        wall = self.clock.wall.now()
        root.settle(t, wall)
        container = root.container(task, wall)
        assert container is not None

        def stat() -> tuple[int, str]:
            denied = root.scenario.proc_stat == "denied"
            return (1 if denied else 0), container.proc_stat(wall, denied)

        def session() -> str:
            reset = root.scenario.session_reset == "every-read"
            return session_reading(container.total_seconds(wall), reset, root.session_rng)

        if list(command) == PROC_STAT_COMMAND:
            return *stat(), "", ""
        if list(command) == SESSION_CPU_COMMAND:
            return 0, session(), "", ""
        if list(command) == COORDINATOR_CPU_COMMAND:
            code, lines = stat()
            return 0, f"{lines}{STAT_EXIT} {code}\n{session()}", "", ""
        name = command[0] if command else ""
        return 127, "", f"sh: 1: {name}: not found\n", ""

    # ----------------------------------------------------------- logs

    def lines(
        self,
        root: RootJob,
        keep: Any,
        *,
        after_id: int | None,
        since_t: float | None,
        limit: int,
        tail: bool,
    ) -> list[Line]:
        assert root.log is not None
        return root.log.read(
            keep, self.now_t(root), after_id=after_id, since_t=since_t, limit=limit, tail=tail
        )
