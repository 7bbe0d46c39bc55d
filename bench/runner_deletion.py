"""Figures for keeper's runner deletion: deletions per minute against the server's ceiling.

Run from the repository root:

    python bench/runner_deletion.py            # 2,000 runners, about ten minutes
    python bench/runner_deletion.py --quick    # 200 runners
    python bench/runner_deletion.py --runners 500 --store-url postgresql://user@host/db

Two phases, each on a Temporal dev server of its own (from the venv's bin directory, the
search attributes registered, never downloaded):

1. keeper: N runners, each with a record in the runner store (SQLite unless --store-url), a
   registration in the GitHub emulator (in-process, over HTTP) and an instance in the
   emulated GARM provider (one process per call, mode "normal": no added latency). One
   deletion is run alone first and its history read, then one whose GitHub call answers
   503 three times and whose provider fails twice, each retried by its activity's retry
   policy, and its history read; then all N deletion requests are
   submitted at once through keeper's own request path, and the run is timed from the
   first submit to the last result. At the end every record must be `deleted` and no
   instance or registration may remain.
2. ceiling: the same N, submitted the same way, of a workflow that makes as many activity
   calls as the sampled deletion and whose activities do nothing (bench/runner_support.py).

Both phases use one worker in this process, with the same settings. Requests go through a
client connection of their own, as another process's would. Progress goes to stderr, the
figures to stdout. Timings are printed, never asserted: the machine is shared and noisy.
Every run also writes its raw figures, the command line and the machine's facts to
bench/results/runner_deletion-<UTC time>.json (bench/run_record.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from run_record import Run
from runner_support import EmptyDeletion, EmptyInput, noop  # first: puts the root on sys.path
from script_runner import progress, report_run, start_dev_server
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from emulators.github.server import GitHubEmulator
from emulators.provider import WRAPPER, launcher_env
from emulators.provider import state as provider_state
from keeper.domain.runners.deletion_view import summary
from keeper.domain.runners.models import (
    REQUEST_UPDATE,
    DeletionOutcome,
    DeletionPolicy,
    DeletionRequest,
    DeletionResult,
    Requester,
    RunnerRecord,
    deletion_workflow_id,
)
from keeper.domain.runners.status import AgentStatus, InstanceStatus
from keeper.runtime.runners import search_attributes as sa
from keeper.runtime.runners.deps import RunnerDeps
from keeper.runtime.runners.garm_provider import ExternalProvider
from keeper.runtime.runners.github_client import GitHubClient
from keeper.runtime.runners.requests import request_deletion
from keeper.runtime.settings import Settings
from keeper.runtime.tpu.client import emulator_client
from keeper.store import RunnerStore, open_store
from keeper.workers.main import activity_slots
from keeper.workers.registry import WORKFLOWS, build_activities
from keeper.workers.runner import workflow_runner

SCOPE = "org:keeper-bench"
TOKEN = "ghp_keeper_bench_token"
SCALE_SET = "bench"
DEFAULT_RUNNERS = 2000
QUICK_RUNNERS = 200
# The SDK's default workflow-task slots, which keeper's worker leaves alone, and the cache
# size keeper's worker sets (worker.max_cached_workflows).
SDK_WORKFLOW_TASK_SLOTS = 100
SDK_CACHED_WORKFLOWS = Settings().worker.max_cached_workflows
PROGRESS_EVERY = 10.0
# Completions whose client-side arrival is compared with the server's close time.
LAG_SAMPLE = 50
# Result long polls in flight at once; the dev server refuses more per namespace.
RESULT_WAITERS = 400
# The activity that runs the provider's DeleteInstance (retried by its policy until gone).
PROVIDER_ACTIVITY = "runners.provider_delete"


async def requester_client(env: WorkflowEnvironment) -> Client:
    """A second connection for the requests and result waits, so the worker's polls never
    queue behind thousands of long polls on one connection."""
    return await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=pydantic_data_converter,
    )


# --------------------------------------------------------------------------- CPU accounting


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _server_pids() -> list[int]:
    """The Temporal dev server(s) this process started: children named temporal."""
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        if ppid == me and name.startswith("temporal"):
            pids.append(int(entry))
    return pids


@dataclass
class CpuMark:
    own: float  # this process: worker, requesters, GitHub emulator, store threads
    children: float  # reaped children: the provider processes
    server: float

    @staticmethod
    def now() -> CpuMark:
        usage = os.times()
        server = sum(_proc_cpu(pid) or 0.0 for pid in _server_pids())
        return CpuMark(
            own=usage.user + usage.system,
            children=usage.children_user + usage.children_system,
            server=server,
        )

    def __sub__(self, other: CpuMark) -> CpuMark:
        return CpuMark(
            self.own - other.own, self.children - other.children, self.server - other.server
        )


# --------------------------------------------------------------------------- worker


class ActivityTimes(Interceptor):
    """Wall time of every activity execution, by activity type."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Timed(next, self)

    def clear(self) -> None:
        self.seconds.clear()


class _Timed(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, times: ActivityTimes) -> None:
        super().__init__(next)
        self._times = times

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        started = time.perf_counter()
        try:
            return await self.next.execute_activity(input)
        finally:
            self._times.seconds[activity.info().activity_type].append(time.perf_counter() - started)


@dataclass(frozen=True)
class WorkerKnobs:
    activities: int
    workflow_tasks: int

    def describe(self) -> str:
        return (
            f"max_concurrent_activities={self.activities}, "
            f"max_concurrent_workflow_tasks={self.workflow_tasks}, "
            f"max_cached_workflows={SDK_CACHED_WORKFLOWS} (worker.max_cached_workflows)"
        )


def make_worker(
    client: Client,
    queue: str,
    knobs: WorkerKnobs,
    times: ActivityTimes,
    workflows: list[type],
    activities: list[Callable[..., Any]],
) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=workflows,
        activities=activities,
        graceful_shutdown_timeout=timedelta(seconds=1),
        max_concurrent_activities=knobs.activities,
        max_concurrent_workflow_tasks=knobs.workflow_tasks,
        max_cached_workflows=SDK_CACHED_WORKFLOWS,
        interceptors=[times],
        # As keeper's unversioned worker: without deployment options the server refuses a
        # task completed with the versioning behaviour each keeper workflow declares.
        workflow_runner=workflow_runner(False, client.data_converter),
    )


# --------------------------------------------------------------------------- the world


@dataclass
class World:
    store: RunnerStore
    github: GitHubEmulator
    provider_config: Path
    deps: RunnerDeps
    records: dict[str, RunnerRecord] = field(default_factory=dict)

    def add_runners(self, names: list[str]) -> None:
        for name in names:
            provider_state.add_instance(
                self.provider_config, name, SCALE_SET, provider_id=f"i-{name}"
            )
            github_id = self.github.add_runner(
                SCOPE, name, labels=["self-hosted", "keeper-managed", SCALE_SET]
            )
            self.records[name] = self.store.add(
                RunnerRecord(
                    name=name,
                    scale_set=SCALE_SET,
                    provider_id=f"i-{name}",
                    github_runner_id=github_id,
                    github_scope=SCOPE,
                    instance_status=InstanceStatus.RUNNING,
                    agent_status=AgentStatus.IDLE,
                )
            )

    def leftovers(self, names: list[str]) -> list[str]:
        """What should be gone and is not, one line per kind."""
        problems = []
        not_deleted = [
            n
            for n in names
            if (r := self.store.get(n)) is None or r.instance_status is not InstanceStatus.DELETED
        ]
        if not_deleted:
            problems.append(f"{len(not_deleted)} records not deleted, e.g. {not_deleted[:3]}")
        wanted = set(names)
        instances = [
            r["name"]
            for r in provider_state.instances(self.provider_config).values()
            if r["name"] in wanted
        ]
        if instances:
            problems.append(f"{len(instances)} provider instances remain, e.g. {instances[:3]}")
        registrations = [
            r["name"] for r in self.github.state()["runners"].get(SCOPE, []) if r["name"] in wanted
        ]
        if registrations:
            problems.append(
                f"{len(registrations)} GitHub registrations remain, e.g. {registrations[:3]}"
            )
        return problems


@contextlib.asynccontextmanager
async def runner_world(tmp: Path, store_url: str | None) -> AsyncIterator[World]:
    github = GitHubEmulator(token=TOKEN)
    url = await github.start()
    config = provider_state.write_config(tmp / "provider" / "config.json", default_mode="normal")
    store = open_store(store_url or f"sqlite:///{tmp / 'runners.db'}")
    deps = RunnerDeps(
        store=store,
        github=GitHubClient(url, SecretStr(TOKEN), timeout=30.0),
        provider=ExternalProvider(WRAPPER, config, "keeper-bench", extra_env=launcher_env()),
    )
    try:
        yield World(store=store, github=github, provider_config=config, deps=deps)
    finally:
        await deps.github.aclose()
        await github.stop()
        store.close()


# --------------------------------------------------------------------------- one batch


@dataclass
class Batch:
    n: int
    seconds: float  # first submit to last close
    latencies: list[float]
    failures: list[str]
    lag_ms: float | None  # median of (result seen by the client - server close time)
    cpu: CpuMark
    activity_seconds: dict[str, list[float]]
    timeline: dict[str, float] = field(default_factory=dict)

    @property
    def per_minute(self) -> float:
        return self.n / self.seconds * 60

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


Start = Callable[[str], Awaitable[WorkflowHandle[Any, Any]]]
Check = Callable[[str, Any], str | None]


async def run_batch(
    names: list[str], start: Start, check: Check, concurrency: int, limit: float
) -> tuple[Batch, dict[str, WorkflowHandle[Any, Any]]]:
    """Submits every name at once (at most `concurrency` client calls in flight) and waits
    for every result. Latency is from the submit call to the server's close time, and the
    batch lasts from the first submit to the last close: result waits are long polls, and
    the dev server caps them per namespace, so at most RESULT_WAITERS wait at once and a
    result may be read a little after its workflow closed."""
    gate = asyncio.Semaphore(concurrency)
    waiters = asyncio.Semaphore(RESULT_WAITERS)
    handles: dict[str, WorkflowHandle[Any, Any]] = {}
    submitted: dict[str, float] = {}
    finished_wall: dict[str, float] = {}
    failures: list[str] = []

    async def one(name: str) -> None:
        async with gate:
            submitted[name] = time.time()
            handle = await start(name)
        handles[name] = handle
        try:
            async with waiters:
                result = await handle.result()
        except Exception as err:  # reported, not raised: the batch goes on
            failures.append(f"{name}: {type(err).__name__}: {err}")
            return
        finished_wall[name] = time.time()
        problem = check(name, result)
        if problem:
            failures.append(f"{name}: {problem}")

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            progress(f"  {len(submitted)} submitted, {len(finished_wall)} finished")

    before = CpuMark.now()
    reporter = asyncio.create_task(report())
    try:
        async with asyncio.timeout(limit):
            await asyncio.gather(*(one(n) for n in names))
    except TimeoutError:
        failures.append(
            f"timed out after {limit:.0f} s: {len(finished_wall)}/{len(names)} finished"
        )
    finally:
        reporter.cancel()
    cpu = CpuMark.now() - before
    closed: dict[str, float] = {}
    describe_gate = asyncio.Semaphore(50)

    async def close_time(name: str) -> None:
        async with describe_gate:
            desc = await handles[name].describe()
        if desc.close_time is not None:
            closed[name] = desc.close_time.timestamp()

    await asyncio.gather(*(close_time(n) for n in finished_wall))
    finished = {n: closed[n] for n in finished_wall if n in closed}
    first = min(submitted.values())
    last = max(finished.values(), default=first)
    lags = [
        finished_wall[n] - closed[n] for n in list(finished)[:: max(1, len(finished) // LAG_SAMPLE)]
    ]
    sampled = [handles[n] for n in list(finished)[:: max(1, len(finished) // LAG_SAMPLE)]]
    timeline = await mean_timeline(sampled[:LAG_SAMPLE])
    batch = Batch(
        n=len(finished),
        seconds=last - first,
        latencies=[finished[n] - submitted[n] for n in finished],
        failures=failures,
        lag_ms=statistics.median(lags) * 1000 if lags else None,
        cpu=cpu,
        activity_seconds={},
        timeline=timeline,
    )
    return batch, handles


# Intervals of one execution's history, each from the event that opens it to the one that
# closes it, summed over the execution.
_OPENS = {
    "WORKFLOW_TASK_STARTED": ("WORKFLOW_TASK_SCHEDULED", "workflow task queued"),
    "WORKFLOW_TASK_COMPLETED": ("WORKFLOW_TASK_STARTED", "workflow task on the worker"),
    "ACTIVITY_TASK_STARTED": ("ACTIVITY_TASK_SCHEDULED", "activity queued"),
    "ACTIVITY_TASK_COMPLETED": ("ACTIVITY_TASK_STARTED", "activity running"),
}
TIMELINE_PARTS = tuple(label for _, label in _OPENS.values())


async def mean_timeline(handles: list[WorkflowHandle[Any, Any]]) -> dict[str, float]:
    """Mean seconds per execution in each part of its history, from the server's event
    times; "total" is from the execution's start to its close."""
    sums: dict[str, float] = defaultdict(float)
    for handle in handles:
        history = await handle.fetch_history()
        last: dict[str, float] = {}
        events = history.events
        for event in events:
            kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
            at = event.event_time.ToDatetime().timestamp()
            if kind in _OPENS:
                opener, label = _OPENS[kind]
                if opener in last:
                    sums[label] += at - last[opener]
            last[kind] = at
        if events:
            first = events[0].event_time.ToDatetime().timestamp()
            sums["total"] += events[-1].event_time.ToDatetime().timestamp() - first
    return {label: total / len(handles) for label, total in sums.items()} if handles else {}


@dataclass
class HistoryShape:
    events: int
    activities: int
    by_type: dict[str, int]


async def history_shape(handle: WorkflowHandle[Any, Any]) -> HistoryShape:
    history = await handle.fetch_history()
    by_type: dict[str, int] = defaultdict(int)
    for event in history.events:
        by_type[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")] += 1
    return HistoryShape(
        events=len(history.events),
        activities=by_type.get("ACTIVITY_TASK_SCHEDULED", 0),
        by_type=dict(by_type),
    )


# --------------------------------------------------------------------------- the phases


@dataclass
class RetriedDeletion:
    """One deletion whose GitHub and provider calls failed first and were retried."""

    github_failures: int
    provider_failures: int
    github_calls: int  # DELETE requests GitHub received for the runner
    provider_calls: int  # DeleteInstance processes the provider ran for the instance
    shape: HistoryShape


# The sampled deletion whose calls fail first: GitHub answers 503 this many times, and the
# provider fails this many deletes, before each succeeds. Short retry intervals (the worker's
# policy for the whole phase: the batch's calls never fail, so they never wait) keep it to
# seconds; how long a retry waits does not change what the history records.
GITHUB_FAILURES = 3
PROVIDER_FAILURES = 2
QUICK_RETRIES = DeletionPolicy(
    retry_initial=timedelta(milliseconds=200), retry_max=timedelta(seconds=1)
)


async def retried_deletion(
    world: World, requester: Client, queue: str, name: str
) -> RetriedDeletion:
    record = world.records[name]
    world.github.inject(503, runner_id=record.github_runner_id, times=GITHUB_FAILURES)
    provider_state.set_mode(
        world.provider_config, f"i-{name}", "failing", fail_times=PROVIDER_FAILURES
    )
    request = DeletionRequest(requested_by=Requester.SCALE_DOWN, reason="keeper bench retries")
    handle = (await request_deletion(requester, name, request, task_queue=queue)).handle
    result = await handle.result()
    if result.outcome is not DeletionOutcome.DELETED:
        raise RuntimeError(f"the retried deletion ended {result.outcome}")
    github_calls = sum(
        1
        for r in world.github.requests
        if r["method"] == "DELETE" and r["path"].endswith(f"/{record.github_runner_id}")
    )
    provider_calls = provider_state.attempts(world.provider_config, f"i-{name}")
    return RetriedDeletion(
        github_failures=GITHUB_FAILURES,
        provider_failures=PROVIDER_FAILURES,
        github_calls=github_calls,
        provider_calls=provider_calls,
        shape=await history_shape(handle),
    )


@dataclass
class KeeperPhase:
    batch: Batch
    shape: HistoryShape
    retried: RetriedDeletion
    setup_seconds: float
    leftovers: list[str]
    provider_calls: int
    provider_inside_ms: float | None  # mean, from the emulator's own log (after start-up)
    store_backend: str


async def keeper_phase(
    args: argparse.Namespace, knobs: WorkerKnobs, tmp: Path, tag: str
) -> KeeperPhase:
    env = await start_dev_server()
    try:
        requester = await requester_client(env)
        async with runner_world(tmp, args.store_url) as world:
            names = [f"bench-{tag}-{i:05d}" for i in range(args.runners)]
            sample = f"bench-{tag}-sample"
            retried = f"bench-{tag}-retried"
            progress(f"keeper: adding {args.runners + 2} runners (store {world.store.backend})")
            started = time.perf_counter()
            await asyncio.to_thread(world.add_runners, [sample, retried, *names])
            setup = time.perf_counter() - started
            progress(f"keeper: world ready in {setup:.1f} s")

            queue = f"keeper-bench-{uuid.uuid4().hex[:8]}"
            times = ActivityTimes()
            settings = Settings()
            settings.runners.deletion = QUICK_RETRIES
            activities = build_activities(
                settings, env.client, emulator_client("127.0.0.1:9"), world.deps
            )
            request = DeletionRequest(
                requested_by=Requester.SCALE_DOWN, reason="keeper bench scale-down"
            )

            async def start(name: str) -> WorkflowHandle[Any, DeletionResult]:
                requested = await request_deletion(requester, name, request, task_queue=queue)
                return requested.handle

            def check(name: str, result: DeletionResult) -> str | None:
                if result.outcome is not DeletionOutcome.DELETED:
                    return f"outcome {result.outcome}"
                return None

            worker = make_worker(env.client, queue, knobs, times, WORKFLOWS, activities)
            async with worker:
                handle = await start(sample)
                first = await handle.result()
                shape = await history_shape(handle)
                progress(
                    f"keeper: sampled deletion {first.outcome}: {shape.events} events, "
                    f"{shape.activities} activities"
                )
                retries = await retried_deletion(world, requester, queue, retried)
                progress(
                    f"keeper: deletion with {retries.github_failures} GitHub and "
                    f"{retries.provider_failures} provider failures retried: "
                    f"{retries.shape.events} events"
                )
                times.clear()
                progress(f"keeper: {len(names)} deletions")
                calls_before = len(
                    provider_state.invocations(world.provider_config, command="DeleteInstance")
                )
                batch, _ = await run_batch(
                    names, start, check, args.submit_concurrency, args.timeout
                )
                batch.activity_seconds = dict(times.seconds)
            calls = provider_state.invocations(world.provider_config, command="DeleteInstance")
            calls = calls[calls_before:]
            inside = [c["ended"] - c["started"] for c in calls if c.get("ended") is not None]
            return KeeperPhase(
                batch=batch,
                shape=shape,
                retried=retries,
                setup_seconds=setup,
                leftovers=world.leftovers(names),
                provider_calls=len(calls),
                provider_inside_ms=statistics.mean(inside) * 1000 if inside else None,
                store_backend=world.store.backend,
            )
    finally:
        await env.shutdown()


@dataclass
class CeilingPhase:
    label: str
    batch: Batch
    shape: HistoryShape


async def ceiling_phase(
    args: argparse.Namespace, knobs: WorkerKnobs, activities: int, tag: str, upserts: int
) -> CeilingPhase:
    env = await start_dev_server()
    try:
        requester = await requester_client(env)
        queue = f"keeper-bench-ceiling-{uuid.uuid4().hex[:8]}"
        times = ActivityTimes()
        request = DeletionRequest(requested_by=Requester.SCALE_DOWN, reason="keeper bench")

        async def start(name: str) -> WorkflowHandle[Any, Any]:
            # The submit of runtime.runners.requests.request_deletion, with the empty workflow.
            operation = WithStartWorkflowOperation(
                EmptyDeletion.run,
                EmptyInput(runner=name, activities=activities, upserts=upserts),
                id=deletion_workflow_id(name),
                task_queue=queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=sa.for_runner(name),
                static_summary=summary(name, None, False),
            )
            await requester.execute_update_with_start_workflow(
                REQUEST_UPDATE, request, start_workflow_operation=operation
            )
            return await operation.workflow_handle()

        def check(name: str, result: str) -> str | None:
            return None if result == name else f"returned {result!r}"

        label = f"ceiling: empty, {activities} no-op activities"
        if upserts:
            label += f", {upserts} upserts"
        names = [f"bench-{tag}-{i:05d}" for i in range(args.runners)]
        worker = make_worker(env.client, queue, knobs, times, [EmptyDeletion], [noop])
        async with worker:
            handle = await start(f"bench-{tag}-sample")
            await handle.result()
            shape = await history_shape(handle)
            times.clear()
            progress(f"{label}: {len(names)} workflows ({shape.events} events each)")
            batch, _ = await run_batch(names, start, check, args.submit_concurrency, args.timeout)
            batch.activity_seconds = dict(times.seconds)
        return CeilingPhase(label=label, batch=batch, shape=shape)
    finally:
        await env.shutdown()


# --------------------------------------------------------------------------- report


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def cpu_line(batch: Batch, own_label: str) -> str:
    c = batch.cpu
    return (
        f"CPU during the batch ({batch.seconds:.1f} s wall x {os.cpu_count()} cores): "
        f"dev server {c.server:.1f} s, {own_label} {c.own:.1f} s, "
        f"provider processes {c.children:.1f} s"
    )


def p99(seconds: list[float]) -> float:
    return sorted(seconds)[max(0, round(0.99 * len(seconds)) - 1)]


def batch_figures(label: str, b: Batch) -> dict[str, Any]:
    return {
        "label": label,
        "done": b.n,
        "seconds": round(b.seconds, 2),
        "per_minute": round(b.per_minute, 1),
        "p50_seconds": round(b.percentile(0.50), 3),
        "p99_seconds": round(b.percentile(0.99), 3),
        "failures": len(b.failures),
        "cpu_seconds": {
            "dev_server": round(b.cpu.server, 1),
            "benchmark_process": round(b.cpu.own, 1),
            "provider_processes": round(b.cpu.children, 1),
        },
        "activities": {
            t: {
                "runs": len(v),
                "mean_ms": round(statistics.mean(v) * 1000, 1),
                "p99_ms": round(p99(v) * 1000, 1),
            }
            for t, v in sorted(b.activity_seconds.items())
        },
        "server_timeline_mean_seconds": {k: round(v, 3) for k, v in b.timeline.items()},
        "result_lag_median_ms": None if b.lag_ms is None else round(b.lag_ms, 1),
    }


def figures_of(
    args: argparse.Namespace,
    knobs: WorkerKnobs,
    keeper: KeeperPhase,
    ceilings: list[CeilingPhase],
    total: float,
    ok: bool,
) -> dict[str, Any]:
    """Every figure the report prints, for bench/results/."""
    k = keeper.batch
    spawn = statistics.mean(k.activity_seconds.get(PROVIDER_ACTIVITY, [0.0])) * 1000
    return {
        "runners": args.runners,
        "seconds": round(total, 1),
        "worker": knobs.describe(),
        "submit_concurrency": args.submit_concurrency,
        "store": keeper.store_backend,
        "world_setup_seconds": round(keeper.setup_seconds, 1),
        "history": {
            "keeper": {
                "events": keeper.shape.events,
                "activities": keeper.shape.activities,
                "by_type": dict(sorted(keeper.shape.by_type.items())),
            },
            "keeper_with_retries": {
                "github_503s": keeper.retried.github_failures,
                "github_delete_requests": keeper.retried.github_calls,
                "provider_failures": keeper.retried.provider_failures,
                "provider_delete_calls": keeper.retried.provider_calls,
                "events": keeper.retried.shape.events,
                "activities": keeper.retried.shape.activities,
                "by_type": dict(sorted(keeper.retried.shape.by_type.items())),
            },
            **{
                c.label: {"events": c.shape.events, "activities": c.shape.activities}
                for c in ceilings
            },
        },
        "batches": [
            batch_figures("keeper RunnerDeletion", k),
            *(batch_figures(c.label, c.batch) for c in ceilings),
        ],
        "keeper_over_ceiling": {
            c.label: round(k.per_minute / c.batch.per_minute, 3) for c in ceilings
        },
        "provider": {
            "delete_instance_calls": keeper.provider_calls,
            "mean_activity_ms": round(spawn, 1),
            "mean_inside_provider_ms": None
            if keeper.provider_inside_ms is None
            else round(keeper.provider_inside_ms, 1),
        },
        "lag_sample": LAG_SAMPLE,
        "check": {
            "passed": ok,
            "leftovers": keeper.leftovers,
            "failures": [*k.failures, *(f for c in ceilings for f in c.batch.failures)][:10],
        },
    }


def render(
    args: argparse.Namespace,
    knobs: WorkerKnobs,
    keeper: KeeperPhase,
    ceilings: list[CeilingPhase],
    total: float,
) -> tuple[str, bool]:
    k = keeper.batch
    failures = list(k.failures)
    for c in ceilings:
        failures += [f"{c.label}: {f}" for f in c.batch.failures]
    ok = not failures and not keeper.leftovers and k.n == args.runners
    out = [
        f"keeper runner deletion benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M UTC} - "
        f"{os.cpu_count()} cores - Python {platform.python_version()} - "
        f"{args.runners} runners - {total:.0f} s",
        "",
        "Setup: Temporal dev server (in-memory, a fresh one per phase); one worker, in the "
        "benchmark's own process",
        f"  worker: {knobs.describe()}",
        f"  requests: all {args.runners} submitted at once, at most {args.submit_concurrency} "
        "client calls in flight, on a client connection of their own",
        f"  keeper: store {keeper.store_backend}, GitHub emulator in-process over HTTP, "
        "emulated GARM provider mode normal (one process per call, no added latency)",
        f"  world setup: {args.runners + 2} runners in {keeper.setup_seconds:.1f} s "
        "(not timed below)",
        "",
        f"History per deletion (one sampled deletion): {keeper.shape.events} events, "
        f"{keeper.shape.activities} ActivityTaskScheduled",
        "  " + ", ".join(f"{t} {n}" for t, n in sorted(keeper.shape.by_type.items())),
    ]
    r = keeper.retried
    out.append(
        f"History of a deletion whose calls failed first ({r.github_calls} GitHub DELETEs for "
        f"{r.github_failures} 503s, {r.provider_calls} provider deletes for "
        f"{r.provider_failures} failures, all retried by activity retry policies): "
        f"{r.shape.events} events, {r.shape.activities} ActivityTaskScheduled"
    )
    for c in ceilings:
        out.append(
            f"History per {c.label}: {c.shape.events} events, "
            f"{c.shape.activities} ActivityTaskScheduled"
        )
    out += [
        "",
        "Figures (first submit to last close; latency: submit call to the workflow closing):",
    ]
    rows = [("keeper RunnerDeletion", k)] + [(c.label, c.batch) for c in ceilings]
    width = max(len(label) for label, _ in rows)
    out.append(
        f"  {'':{width}}  {'done':>6}  {'seconds':>8}  {'per min':>8}  {'p50':>9}  {'p99':>9}"
    )
    for label, b in rows:
        out.append(
            f"  {label:{width}}  {b.n:>6}  {b.seconds:>8.1f}  {b.per_minute:>8,.0f}  "
            f"{ms(b.percentile(0.50)):>9}  {ms(b.percentile(0.99)):>9}"
        )
    for c in ceilings:
        out.append(
            f"  keeper / {c.label}: {k.per_minute / c.batch.per_minute:.2f} "
            f"({k.per_minute:,.0f} vs {c.batch.per_minute:,.0f} per minute)"
        )
    out += ["", "Where the time goes (keeper batch):"]
    for activity_type, seconds in sorted(k.activity_seconds.items()):
        out.append(
            f"  {activity_type:<28} {len(seconds):>6} runs, mean {ms(statistics.mean(seconds))},"
            f" p99 {ms(p99(seconds))}"
        )
    if keeper.provider_inside_ms is not None:
        spawn = statistics.mean(k.activity_seconds.get(PROVIDER_ACTIVITY, [0.0])) * 1000
        out.append(
            f"  provider: {keeper.provider_calls} DeleteInstance calls; mean {spawn:,.0f} ms per "
            f"activity, of which {keeper.provider_inside_ms:,.1f} ms inside the provider after "
            f"its start-up; the rest ({spawn - keeper.provider_inside_ms:,.0f} ms) is spawning "
            "the process, interpreter start-up and waiting for a core"
        )
    out.append("  " + cpu_line(k, "benchmark process (worker, requesters, GitHub)"))
    for c in ceilings:
        out.append(f"Where the time goes ({c.label}):")
        no_op = c.batch.activity_seconds.get("bench.noop", [])
        if no_op:
            out.append(f"  bench.noop {len(no_op)} runs, mean {ms(statistics.mean(no_op))}")
        out.append("  " + cpu_line(c.batch, "benchmark process (worker, requesters)"))
    out.append(
        f"Server-side timeline, mean seconds per execution ({LAG_SAMPLE} sampled histories):"
    )
    parts = [*TIMELINE_PARTS, "total"]
    width_t = max(len(label) for label, _ in rows)
    out.append(f"  {'':{width_t}}" + "".join(f"  {p:>27}" for p in parts))
    for label, b in rows:
        if b.timeline:
            out.append(
                f"  {label:{width_t}}"
                + "".join(f"  {b.timeline.get(p, 0.0):>27.2f}" for p in parts)
            )
    out.append("Result delivery (sampled: client saw the result, minus the server's close time):")
    for label, b in rows:
        if b.lag_ms is not None:
            out.append(f"  {label}: median {b.lag_ms:,.0f} ms")
    out.append("")
    if ok:
        out.append(
            f"Check: PASS - {args.runners} records deleted, no provider instance and no "
            "GitHub registration left"
        )
    else:
        out.append("Check: FAIL")
        out += [f"  {p}" for p in keeper.leftovers]
        if k.n != args.runners:
            out.append(f"  {k.n} of {args.runners} deletions finished")
        out += [f"  {f}" for f in failures[:10]]
        if len(failures) > 10:
            out.append(f"  ... and {len(failures) - 10} more failures")
    return "\n".join(out), ok


async def main(args: argparse.Namespace) -> tuple[str, bool, dict[str, Any]]:
    started = time.monotonic()
    knobs = WorkerKnobs(args.max_activities, args.max_workflow_tasks)
    tag = uuid.uuid4().hex[:6]
    progress(f"{args.runners} runners; worker {knobs.describe()}")
    with tempfile.TemporaryDirectory(prefix="keeper-bench-") as tmp:
        keeper = await keeper_phase(args, knobs, Path(tmp), tag)
    k = keeper.batch
    progress(
        f"keeper: {k.n} deletions in {k.seconds:.1f} s ({k.per_minute:,.0f}/min)"
        + (f", {len(k.failures)} failures" if k.failures else "")
    )
    ceilings: list[CeilingPhase] = []
    variants = [] if args.skip_ceiling else [False, *([True] if args.upsert_ceiling else [])]
    for with_upserts in variants:
        upserts = (
            keeper.shape.by_type.get("UPSERT_WORKFLOW_SEARCH_ATTRIBUTES", 0) if with_upserts else 0
        )
        ceiling = await ceiling_phase(args, knobs, keeper.shape.activities, tag, upserts)
        c = ceiling.batch
        progress(f"{ceiling.label}: {c.n} in {c.seconds:.1f} s ({c.per_minute:,.0f}/min)")
        ceilings.append(ceiling)
    total = time.monotonic() - started
    text, ok = render(args, knobs, keeper, ceilings, total)
    return text, ok, figures_of(args, knobs, keeper, ceilings, total, ok)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runners", type=int, default=DEFAULT_RUNNERS, help="runners deleted (default 2000)"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_RUNNERS} runners instead of the default"
    )
    parser.add_argument(
        "--store-url", help="runner store URL (postgresql://...); default a fresh SQLite file"
    )
    parser.add_argument(
        "--submit-concurrency", type=int, default=100, help="client calls in flight (100)"
    )
    parser.add_argument(
        "--max-activities",
        type=int,
        default=activity_slots(Settings()),
        help="worker max_concurrent_activities (default: what keeper's worker uses)",
    )
    parser.add_argument(
        "--max-workflow-tasks",
        type=int,
        default=SDK_WORKFLOW_TASK_SLOTS,
        help="worker max_concurrent_workflow_tasks (default: the SDK's, as keeper's worker)",
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds one batch may take (900)"
    )
    parser.add_argument("--skip-ceiling", action="store_true", help="keeper's figures only")
    parser.add_argument(
        "--upsert-ceiling",
        action="store_true",
        help="also run the ceiling workflow with as many search-attribute upserts as keeper's",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="keep the SDK's warnings and activity logs"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runners = QUICK_RUNNERS
    if args.runners < 1:
        parser.error("--runners must be at least 1")
    return args


def run() -> int:
    record = Run("runner_deletion")
    args = parse_args()
    return report_run(record, args.verbose, lambda: main(args))


if __name__ == "__main__":
    sys.exit(run())
