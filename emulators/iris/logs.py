"""The job's log lines, generated on demand from the timeline, one tick at a time.

Tick k is the coordinator's k-th progress beat, `progress_interval` scenario seconds apart.
Every line a job ever writes belongs to one tick and gets the id `k * SLOTS + j` (j: its place
in that tick, job-wide, in time order), so ids grow with time, a cursor is just the last id
seen, and any range of ticks can be produced again, identically, without storing anything:
a tick's noise comes from its own `Random(seed, k)`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from emulators.iris.plan import Plan
from emulators.iris.scenarios import Scenario
from emulators.iris.timeline import (
    CHILD_DELAY,
    FAILURE_ERROR,
    KILL_AFTER_OOM,
    ROOT_START,
    AttemptMoment,
    Moment,
    Progress,
    abort_error,
    failure_times,
    oom_times,
    pipeline_starts,
    preemption_times,
    straggler_window,
)

SLOTS = 4096  # lines one tick may hold, job-wide
MAX_SCAN_TICKS = 50_000  # how far one read walks; older or newer lines need another read
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class Line:
    id: int
    task_id: str
    attempt_id: int
    t: float  # scenario seconds after the launch
    source: str
    level: str
    data: str


@dataclass(frozen=True)
class Event:
    """A line the scenario writes at a known time, besides the beats and the noise."""

    t: float
    who: str  # "root", "coord" or "worker"
    level: str
    text: str
    attempt: int = 0
    worker: int = 0
    source: str = "stdout"
    pipeline: int = 0


@dataclass(frozen=True)
class TaskIds:
    job_id: str
    plan: Plan

    @property
    def root(self) -> str:
        return f"{self.job_id}/0"

    def coord(self, pipeline: int, attempt: int) -> str:
        """The coordinator's task id."""
        return f"{self.job_id}/{self.plan.group(attempt, 'coord', pipeline)}/0"

    def workers(self, pipeline: int, attempt: int) -> str:
        """The workers job id (a task adds /<index>)."""
        return f"{self.job_id}/{self.plan.group(attempt, 'workers', pipeline)}"


COORDINATOR_LOGGER = "zephyr.execution.coordinator"
DRIVER_LOGGER = "zephyr.execution"
WORKER_LOGGER = "zephyr.execution.worker"


def prefixed(level: str, t_unix: float, text: str, logger: str = COORDINATOR_LOGGER) -> str:
    """A line in the format iris's callable runner sets up for the Python a task runs (zephyr's
    actors and driver), written on stderr: `I20261204 17:09:01 zephyr.execution.coordinator `,
    the level's letter, the date and time, the logger's name."""
    when = datetime.fromtimestamp(t_unix, UTC)
    return f"{level[0]}{when:%Y%m%d %H:%M:%S} {logger} {text}"


_LEVEL_LETTER = re.compile(r"^([DIWEC])\d")
_LETTER_LEVELS = {"D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "C": "CRITICAL"}


def classify_level(source: str, data: str) -> str:
    """A line's level as iris gives it: a leading level letter followed by a digit decides
    (`I20261204 ...`); else stdout is INFO, stderr ERROR, any other stream UNKNOWN."""
    match = _LEVEL_LETTER.match(data)
    if match:
        return _LETTER_LEVELS[match.group(1)]
    return {"stdout": "INFO", "stderr": "ERROR"}.get(source, "UNKNOWN")


def unprefixed_source(level: str) -> str:
    """The stream a line without a level prefix goes to so iris reads it at about `level`:
    errors on stderr, anything else (a warning too: iris has no other way) on stdout."""
    return "stderr" if level_rank(level) >= level_rank("ERROR") else "stdout"


def progress_line(s: Scenario, exec_id: str, p: Progress, alive: int, registered: int) -> str:
    dead = registered - alive
    counts = (
        f"[{p.stage}] {p.done}/{p.total} complete, {p.in_flight} in-flight, {p.queued} queued, "
        f"{alive}/{registered} workers alive, {dead} dead"
    )
    items, rate = p.done * 1250, p.in_flight * 181.5
    size, speed = p.done * 67_108_864, p.in_flight * 9_437_184.0
    if s.log_format == "oldest":
        return counts
    if s.log_format == "later":
        return (
            f"[{exec_id}] {counts}; items={items} ({rate:.1f}/s), "
            f"bytes_processed={size} ({speed:.0f}/s)"
        )
    return f"[{exec_id}] {counts}. {rate:.1f} items/s, {speed / 1e6:.1f} MB/s"


def traceback_lines(error: str, where: str) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/app/zephyr/worker.py", line 212, in _execute_shard',
        "    result = self._run_task(shard)",
        f'  File "/app/pipeline/{where}.py", line 88, in process',
        "    return step(batch)",
        error,
    ]


def _traceback(at: float, error: str, where: str, plan: Plan) -> list[Event]:
    """A worker's traceback on stderr at ERROR, a line a millisecond apart from `at`."""
    return [
        Event(at + i * 0.001, "worker", "ERROR", text, worker=plan.culprit_worker,
              source="stderr")
        for i, text in enumerate(traceback_lines(error, where))
    ]  # fmt: skip


OOM_ERROR = (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
    "capacity; 13.90 GiB already allocated)"
)


def scenario_events(s: Scenario, plan: Plan) -> list[Event]:
    """The scenario's own lines: starts, the turn, tracebacks, aborts."""
    events = [Event(ROOT_START, "root", "INFO", f"Running zephyr pipeline {plan.ctx}")]
    exec0 = plan.execution_id(0)
    culprit = plan.zephyr_worker_id(0, plan.culprit_worker)
    shard = plan.culprit_shard

    def coord(at: float, level: str, text: str, attempt: int = 0, pipeline: int = 0) -> None:
        events.append(Event(at, "coord", level, text, attempt=attempt, pipeline=pipeline))

    def started(at: float, attempt: int = 0, pipeline: int = 0) -> None:
        exec_id = plan.execution_id(attempt, pipeline)
        text = f"[{exec_id}] Coordinator started: {s.workers} workers"
        coord(at, "INFO", text, attempt, pipeline)

    def requeued(at: float, shard: int, worker: str) -> None:
        text = f"Shard {shard} requeued from worker {worker} due to infra failure"
        coord(at, "WARNING", f"{text} (preemption/heartbeat)")

    def retried(at: float, attempts: int) -> None:
        coord(at, "WARNING", f"[{exec0}] Shards retried (attempts: shard count): {{{attempts}: 1}}")

    started(CHILD_DELAY + 0.6 * s.startup)
    if s.kind == "killed-retry":
        for n in range(3):
            requeued(s.event_at, shard + n, plan.zephyr_worker_id(0, n))
        coord(
            s.event_at + 1,
            "WARNING",
            "All workers are dead/failed. Waiting for workers to recover...",
        )
        retry_at = s.event_at + s.retry_delay
        events.append(
            Event(retry_at, "root", "WARNING", "Execution attempt 0 lost its workers; retrying")
        )
        started(retry_at + 0.6 * s.startup, attempt=1)
    else:
        for pipeline, appeared in enumerate(pipeline_starts(s)[1:], start=1):
            started(appeared + 0.6 * s.startup, pipeline=pipeline)
    if s.kind == "stragglers":
        start, end = straggler_window(s)
        at, n = start + 1800.0, 2
        while at < end:
            requeued(at, shard, culprit)
            retried(at + 0.1, n)
            memory = f"shard {shard}: memory at 97% of the limit, spilling"
            events.append(Event(at - 5, "worker", "WARNING", memory, worker=plan.culprit_worker))
            at, n = at + 1800.0, n + 1
    elif s.kind == "oom-straggler":
        for k, at in enumerate(oom_times(s), start=1):
            events.extend(_traceback(at - 0.5, OOM_ERROR, "embed", plan))
            requeued(at + 0.5, shard, culprit)
            retried(at + 0.6, k + 1)
    elif s.kind == "repeated-failure":
        times = failure_times(s)
        for k, at in enumerate(times, start=1):
            events.extend(_traceback(at, FAILURE_ERROR, "decode", plan))
            last = k == len(times)
            tail = "aborting pipeline." if last else "re-queuing."
            failed = (
                f"Shard {shard} failed on worker {culprit} (task error {k}/{s.max_task_errors})"
            )
            coord(at + 0.5, "ERROR" if last else "WARNING", f"{failed}, {tail}")
        coord(times[-1] + 0.6, "ERROR", abort_error(s, plan))
        events.append(Event(times[-1] + 1.5, "root", "ERROR", f"zephyr: {abort_error(s, plan)}"))
    elif s.kind == "preempted":
        for attempt, at in enumerate(preemption_times(s)[: s.max_retries_preemption], start=1):
            restart = at + s.retry_delay
            events.append(
                Event(restart, "root", "INFO", f"Running zephyr pipeline {plan.ctx}", attempt)
            )
            started(restart + CHILD_DELAY + 0.6 * s.startup, attempt=attempt)
    elif s.kind == "terminated-by-user":
        events.extend(_traceback(s.event_at, OOM_ERROR, "embed", plan))
        requeued(s.event_at + 3, shard, culprit)
        events.append(
            Event(s.event_at + KILL_AFTER_OOM - 0.5, "root", "WARNING", "Received SIGTERM")
        )
    return sorted(events, key=lambda e: e.t)


class JobLog:
    """Produces any tick's lines for one job, given its (overlaid) timeline."""

    def __init__(
        self,
        scenario: Scenario,
        plan: Plan,
        ids: TaskIds,
        seed: int,
        moment: Callable[[float], Moment],
        stamp: Callable[[float], float],
    ) -> None:
        self.s = scenario
        self.plan = plan
        self.ids = ids
        self.seed = seed
        self.moment = moment
        # Scenario t -> the wall time a line written then carries (RootJob.wall_of).
        self.stamp = stamp
        self.interval = scenario.progress_interval
        self._moments: dict[int, Moment] = {}  # by tick, for the length of one read
        self._events: dict[int, list[Event]] = {}
        for event in scenario_events(scenario, plan):
            self._events.setdefault(self.tick_of(event.t), []).append(event)

    def tick_of(self, t: float) -> int:
        return max(0, math.ceil(t / self.interval - 1e-9))

    # ------------------------------------------------------------ one tick

    def tick(self, k: int) -> list[Line]:
        t = k * self.interval
        now = self._moment(k)
        if not now.reachable:
            return []
        before = self._moment(k - 1) if k > 0 else None
        rows: list[tuple[float, str, int, str, str, str]] = []  # t, task, attempt, src, lvl, text
        for event in self._events.get(k, []):
            row = self._event_row(event, now)
            if row is not None:
                rows.append(row)
        rng = random.Random(self.seed * 1_000_003 + k)
        for attempt in now.attempts:
            prev = next(
                (a for a in (before.attempts if before else ()) if a.key == attempt.key),
                None,
            )
            rows.extend(self._attempt_rows(attempt, prev, t, k, rng))
        rows.sort(key=lambda row: row[0])
        # The level is iris's reading of the line (its letter, else its stream), whatever
        # the scenario meant.
        return [
            Line(k * SLOTS + j, task, att, at, src, classify_level(src, text), text)
            for j, (at, task, att, src, _, text) in enumerate(rows[:SLOTS])
        ]

    def _moment(self, k: int) -> Moment:
        found = self._moments.get(k)
        if found is None:
            found = self._moments[k] = self.moment(k * self.interval)
        return found

    def _event_row(self, event: Event, now: Moment) -> tuple[float, str, int, str, str, str] | None:
        if event.who == "root":
            if _ended_before(now.root.finished, event.t):
                return None
            text, source = self._python_line(event.level, event.t, event.text, DRIVER_LOGGER)
            return (event.t, self.ids.root, event.attempt, source, event.level, text)
        key = (event.pipeline, event.attempt)
        attempt = next((a for a in now.attempts if a.key == key), None)
        if attempt is None:
            return None
        author = attempt.coord if event.who == "coord" else attempt.workers[event.worker]
        if _ended_before(author.finished, event.t):
            return None
        source = event.source
        if event.who == "coord":
            task, att = self.ids.coord(*key), attempt.coord.attempt
            text, source = self._python_line(event.level, event.t, event.text)
        else:
            task = f"{self.ids.workers(*key)}/{event.worker}"
            worker = attempt.workers[event.worker]
            # The line belongs to the attempt that was running when it was written.
            att = next((h.attempt for h in worker.history if (h.finished or 0) >= event.t), None)
            att = worker.attempt if att is None else att
            text = event.text
            if source == "stdout":  # zephyr's worker logging (a traceback is bare on stderr)
                text, source = self._python_line(event.level, event.t, text, WORKER_LOGGER)
        return (event.t, task, att, source, event.level, text)

    def _python_line(
        self, level: str, t: float, text: str, logger: str = COORDINATOR_LOGGER
    ) -> tuple[str, str]:
        """(text, stream) of a line zephyr logs: in iris's format on stderr; in the oldest
        format, bare, on the stream that gives about its level."""
        if self.s.log_format == "oldest":
            return text, unprefixed_source(level)
        return prefixed(level, self.stamp(t), text, logger), "stderr"

    def _coord_row(
        self, at: float, task: str, attempt: int, t: float, text: str
    ) -> tuple[float, str, int, str, str, str]:
        """A coordinator's INFO line written at `at`, stamped as of `t`."""
        line, source = self._python_line("INFO", t, text)
        return (at, task, attempt, source, "INFO", line)

    def _attempt_rows(
        self,
        a: AttemptMoment,
        prev: AttemptMoment | None,
        t: float,
        k: int,
        rng: random.Random,
    ) -> Iterator[tuple[float, str, int, str, str, str]]:
        coord = self.ids.coord(*a.key)
        exec_id = self.plan.execution_id(a.attempt, a.pipeline)
        registered = self.s.workers
        alive = sum(1 for w in a.workers if w.state == "RUNNING")
        if (
            prev is not None
            and prev.progress is not None
            and prev.coord.state == "RUNNING"
            and a.completed_stages > prev.completed_stages
        ):
            stage = prev.progress
            finished = Progress(stage.stage_index, stage.stage, stage.total, stage.total, 0, 0)
            text = progress_line(self.s, exec_id, finished, alive, registered)
            yield self._coord_row(t - 0.002, coord, a.coord.attempt, t, text)
            if a.completed_stages == len(self.s.stages):
                done = f"[{exec_id}] Execution complete: {len(self.s.stages)} stages"
                yield self._coord_row(t - 0.001, coord, a.coord.attempt, t, done)
        if a.progress is not None and a.coord.state == "RUNNING" and a.progress_lines:
            if (
                prev is None
                or prev.progress is None
                or (prev.progress.stage_index != a.progress.stage_index)
            ):
                start = f"[{exec_id}] Starting stage {a.progress.stage} ({a.progress.total} shards)"
                yield self._coord_row(t - 0.0015, coord, a.coord.attempt, t, start)
            if self._beats(t, k):
                text = progress_line(self.s, exec_id, a.progress, alive, registered)
                yield self._coord_row(t, coord, a.coord.attempt, t, text)
        if a.noise and a.coord.state == "RUNNING":
            n = self.s.noise_ratio
            for i in range(n):
                at = t - self.interval + (i + 1) * self.interval / (n + 1)
                if a.coord.started is not None and at < a.coord.started:
                    continue  # a line before the coordinator ran
                index = rng.randrange(self.s.workers)
                worker = self.plan.zephyr_worker_id(a.attempt, index, a.pipeline)
                yield (at, coord, a.coord.attempt, "stdout", "INFO", _noise(rng, worker))
        workers_job = self.ids.workers(*a.key)
        for i, w in enumerate(a.workers):
            if w.dump == "busy" and w.cores > 0 and (k + i) % 20 == 0:
                text = f"Finished shard {rng.randrange(100_000)} in {rng.uniform(5, 90):.1f}s"
                yield (t - 0.01, f"{workers_job}/{i}", w.attempt, "stdout", "INFO", text)

    def silent_from(self, now: Moment) -> float | None:
        """The t after which the job writes no more lines, once that is known."""
        if now.root.finished is not None:
            return now.root.finished + self.interval
        if self.s.kind in ("hung-busy", "dead-worker") and now.t >= self.s.event_at:
            return self.s.event_at + self.interval
        return None

    def _beats(self, t: float, k: int) -> bool:
        quiet = self.s.quiet_interval
        if quiet is None or t < self.s.event_at:
            return True
        return k % max(1, round(quiet / self.interval)) == 0

    # ------------------------------------------------------------ reads

    def read(
        self,
        keep: Callable[[Line], bool],
        now_t: float,
        *,
        after_id: int | None = None,
        since_t: float | None = None,
        limit: int = 1000,
        tail: bool = False,
    ) -> list[Line]:
        """Matching lines up to now, oldest first: the first `limit` after the cursor or
        since_t, or with `tail` the last `limit`."""
        last = int(now_t // self.interval)
        silent = self.silent_from(self.moment(now_t))
        if silent is not None:
            # Nothing is written after this: a read need not walk the hours since.
            last = min(last, self.tick_of(silent))
        first = 0
        if after_id is not None:
            first = max(first, after_id // SLOTS)
        if since_t is not None:
            first = max(first, self.tick_of(since_t))
        if limit <= 0 or last < first:
            return []

        def wanted(line: Line) -> bool:
            if after_id is not None and line.id <= after_id:
                return False
            if since_t is not None and line.t <= since_t:
                return False
            return line.t <= now_t and keep(line)

        self._moments.clear()  # a TerminateJob since the last read changes the timeline
        try:
            return self._scan(wanted, first, last, limit, tail)
        finally:
            self._moments.clear()

    def _scan(
        self, wanted: Callable[[Line], bool], first: int, last: int, limit: int, tail: bool
    ) -> list[Line]:
        found: list[Line] = []
        if tail:
            for k in range(last, max(first, last - MAX_SCAN_TICKS) - 1, -1):
                found[:0] = [line for line in self.tick(k) if wanted(line)]
                if len(found) >= limit:
                    return found[-limit:]
            return found
        for k in range(first, min(last, first + MAX_SCAN_TICKS) + 1):
            found.extend(line for line in self.tick(k) if wanted(line))
            if len(found) >= limit:
                return found[:limit]
        return found


def _ended_before(finished: float | None, t: float) -> bool:
    return finished is not None and t > finished


def _noise(rng: random.Random, worker: str) -> str:
    shard = rng.randrange(100_000)
    kind = rng.randrange(5)
    if kind == 0:
        return f"pull_task: {worker} -> shard {shard}"
    if kind == 1:
        return f"Started operation {rng.getrandbits(48):012x} on {worker}"
    if kind == 2:
        return f"report_result from {worker}: shard {shard} ok ({rng.randrange(20, 900)} ms)"
    if kind == 3:
        return f"Worker {worker} registered with the coordinator"
    return f"{worker}: {rng.randrange(1, 400)} tasks completed"


def level_rank(level: str) -> int:
    name = level.upper().removeprefix("LOG_LEVEL_")
    return LEVELS.index(name) if name in LEVELS else 0
