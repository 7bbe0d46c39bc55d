"""Reading a watched job: one check, the delta probe, and the wait for a queued job.

A thin adapter over the iris client: each read has its own deadline (watch.call_timeout), and
a read the controller did not answer is reported in the observation as unavailable, never as
"idle" and never retried here (the escalation counts such ticks; Temporal retries only a
crashed attempt). What is read is reduced at once by the domain's readers (names, logs, dumps,
/proc lines), so the history holds a small, secret-free observation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from keeper.activities.heartbeat import heartbeating
from keeper.domain.watch.calls import (
    CpuSeen,
    Observation,
    ObserveCall,
    ProbeCall,
    ProbeSeen,
    TaskSeen,
)
from keeper.domain.watch.names import ChildRef, JobPhase, phase_of, pick_latest
from keeper.domain.watch.progress import LogDigest, LogLine, digest
from keeper.domain.watch.state import ReadingState
from keeper.domain.watch.threads import DumpReading, read_dump
from keeper.runtime.waiting import waiting
from keeper.runtime.watch.iris_client import ExecResult, IrisController
from keeper.runtime.watch.iris_errors import IrisError, JobNotFound
from keeper.wire.iris.exec_commands import (
    CLK_TCK,
    COORDINATOR_CPU_COMMAND,
    PROC_STAT_COMMAND,
    ProcStat,
    parse_proc_stat,
    parse_session_cpu,
    proc_stat_answer,
    split_coordinator_cpu,
)
from keeper.wire.iris.messages import LogEntry, TaskStatus

T = TypeVar("T")

MAX_WORKER_ERRORS = 20
MAX_LINE = 500
# Per check, what the digest keeps of the coordinator's events and error lines.
MAX_EVENTS = 40
MAX_ERRORS = 20
# Worker attempts that ended badly: a preempted one (PREEMPTED, or WORKER_FAILED) included.
_FAILED_TASK = frozenset(
    {JobPhase.FAILED, JobPhase.KILLED, JobPhase.WORKER_FAILED, JobPhase.PREEMPTED}
)


def raise_unless_due(call: ObserveCall) -> None:
    """The wait before a check, on Temporal's clock: the first attempt of a check that waits
    answers "not due", and Temporal retries it `wait_s` later (the retry is the timer, and
    it is written to no history). Every `watch.observe` implementation calls this first."""
    if call.wait_s > 0 and activity.info().attempt == 1:
        raise waiting(
            f"the check of {call.job_id} to be due",
            seen=f"due in {call.wait_s:g} s",
            next_look=timedelta(seconds=call.wait_s),
        )


class WatchObserver:
    def __init__(
        self,
        iris: IrisController,
        *,
        call_timeout_s: float,
        cpu_sample_workers: int,
        log_lines: int,
    ) -> None:
        self._iris = iris
        self._deadline = call_timeout_s
        self._sample_workers = cpu_sample_workers
        self._log_lines = log_lines

    @activity.defn(name="watch.await_scheduled")
    async def await_scheduled(self, job_id: str) -> str:
        """Fails while the job waits in the queue, so its retry policy is the poll."""
        try:
            status, _ = await self._iris.get_job_status(job_id, deadline_s=self._deadline)
        except JobNotFound:
            raise ApplicationError(f"{job_id} is not known", type="JobNotFound") from None
        phase = phase_of(status.state)
        if phase in (JobPhase.PENDING, JobPhase.UNSPECIFIED):
            raise waiting(f"{job_id} to leave the queue", seen=f"still {phase.value}")
        return phase.value

    @activity.defn(name="watch.observe")
    async def observe(self, call: ObserveCall) -> Observation:
        raise_unless_due(call)
        # The first beat waits an interval: the server times an attempt out a heartbeat
        # timeout after its start whether or not it beat, so a beat at once says nothing, and
        # a check (tens of milliseconds) would pay a heartbeat call every time.
        async with heartbeating(f"checking {call.job_id}", at_start=False):
            return await self._observe(call)

    async def _observe(self, call: ObserveCall) -> Observation:
        failed: list[str] = []
        iris, d = self._iris, self._deadline

        async def read(what: str, call_: Awaitable[T]) -> T | None:
            try:
                return await call_
            except JobNotFound:
                if what == "GetJobStatus":
                    raise  # the job itself: the watch ends (outcome missing)
                failed.append(f"{what}: not found")
                return None
            except IrisError as err:
                # Unavailable, timed out, refused (a bad token): the read did not answer,
                # which says nothing of the job. The escalation counts the ticks.
                failed.append(f"{what}: {err}")
                return None

        async def log(
            job: str, cursor: int = 0, max_lines: int = self._log_lines, min_level: str = ""
        ) -> tuple[list[LogLine], int] | None:
            """The tail of `job`'s log after `cursor`, and the cursor after it."""
            page = await read(
                "GetTaskLogs",
                iris.task_logs(
                    job,
                    cursor=cursor,
                    max_lines=max_lines,
                    tail=True,
                    min_level=min_level,
                    deadline_s=d,
                ),
            )
            if page is None:
                return None
            return [_line(e, job) for e in page.entries], max(page.cursor, cursor)

        try:
            got = await read("GetJobStatus", iris.get_job_status(call.job_id, deadline_s=d))
        except JobNotFound:
            return Observation(at=datetime.now(UTC), job_found=False, reading=call.reading)
        children = await read("ListJobs", iris.list_children(call.job_id, deadline_s=d))
        if children is not None and not children.complete:
            # Beyond what ListJobs pages (11,000 children of one state): the newest are seen.
            activity.logger.warning("%s: ListJobs %s", call.job_id, children.describe())
        job_state, job_error = JobPhase.UNSPECIFIED, ""
        if got is not None:
            job_state, job_error = phase_of(got[0].state), got[0].error
        latest = None
        if children is not None:
            refs = [
                ChildRef(
                    job_id=c.job_id,
                    state=phase_of(c.state),
                    submitted_at_ms=c.submitted_at.epoch_ms if c.submitted_at else 0,
                )
                for c in children
            ]
            latest = pick_latest(refs, call.job_id)
        reading = call.reading
        if latest is not None and latest.group != reading.attempt:
            # A new attempt: its logs start over.
            reading = ReadingState(attempt=latest.group)

        coordinator: TaskSeen | None = None
        coord_log: LogDigest | None = None
        # No cursor yet: the read starts at the log's beginning (its backlog, tail-limited).
        from_start = reading.coordinator_cursor == 0
        threads: DumpReading | None = None
        cpu: list[CpuSeen] | None = None
        session: float | None = None
        worker_states: dict[JobPhase, int] = {}
        worker_failed, worker_errors = 0, list[str]()
        tasks_by_host: dict[str, str] = {}
        if latest is not None and latest.coord is not None:
            coord_tasks = await read("ListTasks", iris.list_tasks(latest.coord, deadline_s=d))
            if coord_tasks:
                t = coord_tasks[0]
                coordinator = TaskSeen(
                    task_id=t.task_id,
                    state=phase_of(t.state),
                    worker_id=t.worker_id,
                    attempt_id=t.current_attempt_id,
                    error=t.error[:300],
                )
            coord_read = await log(latest.coord, reading.coordinator_cursor)
            if coord_read is not None:
                coord_log = digest(coord_read[0], max_events=MAX_EVENTS, max_errors=MAX_ERRORS)
                reading = reading.model_copy(update={"coordinator_cursor": coord_read[1]})
            worker_tasks: list[TaskStatus] = []
            if latest.workers is not None:
                worker_tasks = (
                    await read("ListTasks", iris.list_tasks(latest.workers, deadline_s=d)) or []
                )
                for t in worker_tasks:
                    phase = phase_of(t.state)
                    worker_states[phase] = worker_states.get(phase, 0) + 1
                    worker_failed += sum(1 for a in t.attempts if phase_of(a.state) in _FAILED_TASK)
                workers_read = await log(latest.workers, reading.workers_cursor, min_level="ERROR")
                if workers_read is not None:
                    worker_errors = _errors(workers_read[0])
                    reading = reading.model_copy(update={"workers_cursor": workers_read[1]})
            running = [t for t in worker_tasks if phase_of(t.state) is JobPhase.RUNNING][
                : self._sample_workers
            ]
            if coord_tasks and coordinator is not None and coordinator.state is JobPhase.RUNNING:
                threads = await self._threads(coordinator.task_id)
                cpu, tasks_by_host, session = await self._cpu(coord_tasks[0], running)
        reading = reading.model_copy(update={"tasks_by_host": tasks_by_host})
        parent_errors = None
        if job_state.is_terminal and job_state is not JobPhase.SUCCEEDED:
            # Before a cause is named: the job's own log too, not only its children's.
            parent_read = await log(call.job_id, max_lines=200, min_level="ERROR")
            if parent_read is not None:
                parent_errors = _errors(parent_read[0])
        return Observation(
            at=datetime.now(UTC),
            job_state=job_state,
            job_error=job_error,
            children=children.total if children is not None else 0,
            children_unseen=children.unseen if children is not None else 0,
            latest=latest,
            coordinator=coordinator,
            worker_states=worker_states,
            worker_failed_attempts=worker_failed,
            worker_errors=worker_errors,
            parent_errors=parent_errors,
            coordinator_log=coord_log,
            coordinator_log_from_start=from_start and coord_log is not None,
            threads=threads,
            cpu=cpu,
            session_cpu=session,
            failed=failed,
            reading=reading,
        )

    @activity.defn(name="watch.probe")
    async def probe(self, call: ProbeCall) -> ProbeSeen:
        """Two reads of one process's utime+stime, `gap_s` apart (a lifetime %CPU is never
        asked: a process busy for hours and then hung keeps a high one)."""
        async with heartbeating(f"probing {call.describe()}"):
            first = await self._proc(call.task_id, call.host, call.pid)
            started = time.monotonic()
            await asyncio.sleep(call.gap_s)
            second = await self._proc(call.task_id, call.host, call.pid)
            apart = time.monotonic() - started
        error = "" if first is not None and second is not None else "the process was not read"
        return ProbeSeen(first=first, second=second, seconds_apart=apart, error=error)

    # ---- the reads ---------------------------------------------------------------------

    async def _threads(self, task: str) -> DumpReading | None:
        try:
            text = await self._iris.profile_threads(task, deadline_s=self._deadline)
        except IrisError:
            return None
        return read_dump(text)

    async def _exec(self, task: str, command: list[str]) -> ExecResult | None:
        try:
            result = await self._iris.exec_in_container(
                task, command, timeout_s=int(self._deadline), deadline_s=self._deadline + 5
            )
        except IrisError:
            return None
        return None if result.error else result

    async def _proc_stat(self, task: str) -> str | None:
        result = await self._exec(task, PROC_STAT_COMMAND)
        return None if result is None else proc_stat_answer(result.stdout, result.exit_code)

    async def _cpu(
        self, coordinator: TaskStatus, workers: list[TaskStatus]
    ) -> tuple[list[CpuSeen] | None, dict[str, str], float | None]:
        """The processes of the coordinator and the sampled workers, and the coordinator's
        session CPU: one exec a task, all at once."""
        both, *outs = await asyncio.gather(
            self._exec(coordinator.task_id, COORDINATOR_CPU_COMMAND),
            *(self._proc_stat(t.task_id) for t in workers),
        )
        stat, session = split_coordinator_cpu(both.stdout) if both is not None else (None, None)
        tasks = [coordinator, *workers]
        outs = [stat, *outs]
        seen: list[CpuSeen] = []
        hosts: dict[str, str] = {}
        for t, out in zip(tasks, outs, strict=True):
            if out is None:
                continue
            host = t.worker_id or t.task_id
            hosts[host] = t.task_id
            procs = parse_proc_stat(out)
            kept = started_last(procs, MAX_PROCESSES_PER_TASK)
            if len(kept) < len(procs):
                activity.logger.info(
                    "%s: the exec listed %d processes (a host-wide view); kept the %d started last",
                    t.task_id,
                    len(procs),
                    len(kept),
                )
            seen += [_cpu_seen(t.task_id, host, t.current_attempt_id, p) for p in kept]
        # No exec answered: the CPU read is unavailable, not idle.
        session_cpu = parse_session_cpu(session) if session is not None else None
        return (seen if hosts else None), hosts, session_cpu

    async def _proc(self, task: str, host: str, pid: int) -> CpuSeen | None:
        out = await self._proc_stat(task)
        if out is None:
            return None
        return next(
            (_cpu_seen(task, host, 0, p) for p in parse_proc_stat(out) if p.pid == pid), None
        )


# A container lists its task's few processes. An exec that runs on the host (iris's process
# runtime, a host-PID container) lists every process of the machine: the task's are among
# those started last (the host's daemons started at boot), and keeping only those bounds a
# check's history event whatever the machine runs.
MAX_PROCESSES_PER_TASK = 64


def started_last(procs: list[ProcStat], limit: int) -> list[ProcStat]:
    """At most `limit` of `procs`, the ones started last, in their listed order."""
    if len(procs) <= limit:
        return procs
    keep = {id(p) for p in sorted(procs, key=lambda p: (p.starttime, p.pid))[-limit:]}
    return [p for p in procs if id(p) in keep]


def _cpu_seen(task: str, host: str, attempt: int, p: ProcStat) -> CpuSeen:
    return CpuSeen(
        task_id=task,
        host=host,
        attempt=attempt,
        pid=p.pid,
        comm=p.comm[:40],
        start_time=p.starttime,
        ticks=p.cpu_ticks,
        clk_tck=CLK_TCK,
    )


def _errors(lines: list[LogLine]) -> list[str]:
    """The error lines among `lines`, the newest MAX_WORKER_ERRORS."""
    return [e.text for e in digest(lines).errors][-MAX_WORKER_ERRORS:]


def _line(entry: LogEntry, task: str) -> LogLine:
    return LogLine(
        at_ms=entry.timestamp.epoch_ms if entry.timestamp is not None else 0,
        level=entry.level.name,
        source=entry.source,
        # A traceback line can be long; what the rules need is its start.
        text=entry.data[:MAX_LINE],
        task_id=entry.key or task,
    )
