"""Figures for a worker's CPU per run, per poll and per check: keeper's workflows against
empty workflows of the same shape, each on a worker process of its own, in one run.

Run from the repository root:

    python bench/worker_cpu.py                            # all three, about six minutes
    python bench/worker_cpu.py --runs 200 --window 20     # a quick check that it works
    python bench/worker_cpu.py --workloads deletion --profile /tmp/prof

Each phase has a Temporal dev server of its own (from the venv's bin directory). keeper's
phases run `keeper worker --family <family>` serving the SDK's metrics on a port of its own;
the empty ones run bench/empty_worker.py, a stock SDK worker with the same converter, cache
and slots, and the empty workflows of bench/runner_support.py.

- deletion: N runners (a record in a SQLite store, a registration in the GitHub emulator in
  this process, an instance in the emulated GARM provider, mode "normal"); one deletion runs
  alone first (start-up and first imports are not counted), then all N are requested through
  keeper's own request path. Against: N runs of the empty workflow with as many no-op
  activities as the sampled deletion, started the same way (update-with-start).
- tpu-poll: W bootstraps waiting in assign (a queued resource the TPU emulator in this
  process never assigns), each reading its slice every --poll-interval. Against: W empty
  polls, one activity failing every attempt and retried at the same interval.
- watch-check: J job watches of healthy jobs on the iris emulator in this process (speed 1),
  each checking every second (tests/watch/world.py's cadence). Against: J empty checks, one
  activity whose first attempt answers "not due" and whose second returns, per second.

Each worker's CPU (utime + stime from /proc, its own process only; a deletion's provider
processes are its reaped children, counted apart) is read around the batch, or around a
--window of polls and checks once every workflow has made its first. The SDK's metrics,
scraped from /metrics at the same moments, count the polls (activity attempts) and checks
(workflow tasks) and split the worker's time. Timings are printed, never asserted. Raw
figures: bench/results/worker_cpu-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from runner_deletion import (  # first: bench/runner_support.py puts the root on sys.path
    Batch,
    history_shape,
    requester_client,
    run_batch,
    runner_world,
)
from runner_scaling import children_cpu, runner_worker_config
from runner_support import (
    EMPTY_CHECK_WORKFLOW,
    EMPTY_POLL_WORKFLOW,
    NOT_YET_ACTIVITY,
    EmptyDeletion,
    EmptyInput,
)
from script_runner import progress, run_noting_load, start_dev_server
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.testing import WorkflowEnvironment
from tpu_api_calls import request as reserved_slice

from emulators.iris import IrisEmulatorConfig
from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator
from keeper.domain.runners.models import (
    REQUEST_UPDATE,
    DeletionOutcome,
    DeletionRequest,
    DeletionResult,
    Requester,
    deletion_workflow_id,
)
from keeper.domain.tpu.naming import BOOTSTRAP_WORKFLOW_TYPE, PROJECT_MEMO, bootstrap_workflow_id
from keeper.runtime.runners import search_attributes as runner_sa
from keeper.runtime.runners.requests import request_deletion
from tests.e2e_support import dev_address
from tests.harness import free_port
from tests.watch.world import FAST_CADENCE, watch_world
from tests.worker_processes import (
    REPO,
    WorkerFleet,
    cpu_seconds,
    threads_cpu,
    until_polling,
    write_family_worker_config,
    write_worker_config,
)

DEFAULT_RUNS = 1000
EMPTY_WORKER = REPO / "bench" / "empty_worker.py"
# `keeper worker` under -c: past the fleet's `-m keeper.cli.main` (argv[1:3]), its arguments.
KEEPER_RUN = "sys.argv = ['keeper', *sys.argv[3:]]; from keeper.cli.main import run; run()"
# The empty worker as __main__ under -c (its folder first on the path, as `python FILE`
# puts it), its arguments after the script's path.
EMPTY_RUN = (
    f"import runpy; sys.argv = sys.argv[1:]; sys.path.insert(0, {str(EMPTY_WORKER.parent)!r}); "
    f"runpy.run_path({str(EMPTY_WORKER)!r}, run_name='__main__')"
)
# The SDK histograms a worker's time splits into (temporal_<name>_{sum,count}, seconds).
SDK_HISTOGRAMS = (
    "workflow_task_execution_latency",
    "workflow_task_replay_latency",
    "activity_execution_latency",
)
SDK_COUNTERS = ("sticky_cache_hit", "sticky_cache_miss", "workflow_task_execution_failed")
_SAMPLE = re.compile(r"^temporal_(\w+?)(_sum|_count|_total)(\{[^}]*\})? (\S+)$")
_ACTIVITY_TYPE = re.compile(r'activity_type="([^"]+)"')


def scrape(address: str) -> dict[str, float]:
    """The SDK's series on one worker, summed over their labels; activity latencies also
    by activity type (`activity_execution_latency_sum[runners.deregister]`)."""
    text = httpx.get(f"http://{address}/metrics", timeout=10).text
    totals: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match[1] not in (*SDK_HISTOGRAMS, *SDK_COUNTERS):
            continue
        name, value = match[1] + match[2], float(match[4])
        totals[name] += value
        kind = _ACTIVITY_TYPE.search(match[3] or "")
        if match[1] == "activity_execution_latency" and kind:
            totals[f"{name}[{kind[1]}]"] += value
    return dict(totals)


@dataclass
class Phase:
    label: str
    batch: Batch
    events: int
    activities: int
    worker_cpu_s: float  # the worker process's own, during the batch
    children_cpu_s: float  # its reaped children (provider launches), during the batch
    sdk: dict[str, float]  # SDK metric deltas during the batch

    @property
    def cpu_ms_per_run(self) -> float:
        return self.worker_cpu_s / self.batch.n * 1000 if self.batch.n else 0.0

    def sdk_ms_per_run(self, histogram: str) -> float:
        total = self.sdk.get(f"{histogram}_sum", 0.0)
        return total / self.batch.n * 1000 if self.batch.n else 0.0

    def sdk_count_per_run(self, histogram: str) -> float:
        count = self.sdk.get(f"{histogram}_count", 0.0)
        return count / self.batch.n if self.batch.n else 0.0


Start = Callable[[str], Awaitable[WorkflowHandle[Any, Any]]]


async def measured(
    label: str,
    pid: int,
    metrics: str,
    names: list[str],
    start: Start,
    check: Callable[[str, Any], str | None],
    args: argparse.Namespace,
) -> Phase:
    """One run alone (warm-up and history shape), then the batch, with the worker's CPU and
    SDK metrics read around it."""
    sample = await start(f"{names[0]}-sample")
    await asyncio.wait_for(sample.result(), 120)
    shape = await history_shape(sample)
    cpu, children, sdk = cpu_seconds(pid), children_cpu(pid), scrape(metrics)
    progress(f"{label}: {len(names)} runs ({shape.events} events each)")
    batch, _ = await run_batch(names, start, check, args.submit_concurrency, args.timeout)
    after = scrape(metrics)
    return Phase(
        label=label,
        batch=batch,
        events=shape.events,
        activities=shape.activities,
        worker_cpu_s=round(cpu_seconds(pid) - cpu, 2),
        children_cpu_s=round(children_cpu(pid) - children, 2),
        sdk={k: round(after.get(k, 0.0) - sdk.get(k, 0.0), 4) for k in after},
    )


@dataclass
class PollPhase:
    """Workflows waiting, each polling (a TPU read) or checking (a job watch) at its pace,
    measured over a window once every one has done it once."""

    label: str
    unit: str  # "poll" or "check"
    workflows: int
    window_s: float
    count: int  # polls or checks in the window, from the SDK's metrics
    worker_cpu_s: float
    sdk: dict[str, float]
    # TPU API calls in the window, by method, as the emulator counted them (TPU polls only).
    api_calls: dict[str, int] = field(default_factory=dict)
    # The worker's CPU in the window by thread name: Python's main thread (workflow code,
    # activities, payloads) against the SDK core's and gRPC's own threads.
    threads_cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def api_calls_per_hour(self) -> float:
        return sum(self.api_calls.values()) / self.window_s * 3600 if self.window_s else 0.0

    @property
    def cpu_ms_per_unit(self) -> float:
        return self.worker_cpu_s / self.count * 1000 if self.count else 0.0


Counter = Callable[[dict[str, float]], float]


def attempts_of(activity_type: str) -> Counter:
    """Polls: attempts of the activity whose retry policy is the poll."""
    return lambda sdk: sdk.get(f"activity_execution_latency_count[{activity_type}]", 0.0)


def workflow_tasks(sdk: dict[str, float]) -> float:
    """Checks: one workflow task each (the check's activity completes, it is judged and the
    next one starts)."""
    return sdk.get("workflow_task_execution_latency_count", 0.0)


async def polled(
    label: str,
    unit: str,
    pid: int,
    metrics: str,
    counter: Counter,
    workflows: int,
    window: float,
    api_calls: Callable[[], dict[str, int]] = dict,
) -> PollPhase:
    """Waits until `workflows` polls or checks happened (each one's first), then reads the
    worker's CPU and metrics around `window` seconds of them."""
    deadline = time.monotonic() + 180
    while counter(scrape(metrics)) < workflows:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{label}: not every workflow started its {unit}s within 180 s")
        await asyncio.sleep(0.5)
    threads = threads_cpu(pid)
    cpu, sdk, calls, started = cpu_seconds(pid), scrape(metrics), api_calls(), time.monotonic()
    progress(f"{label}: {workflows} running; measuring {window:.0f} s of {unit}s")
    await asyncio.sleep(window)  # the measurement window itself: they come at their pace
    after, calls_after, elapsed = scrape(metrics), api_calls(), time.monotonic() - started
    worker_cpu = cpu_seconds(pid) - cpu
    threads_after = threads_cpu(pid)
    delta = {k: round(after.get(k, 0.0) - sdk.get(k, 0.0), 4) for k in after}
    return PollPhase(
        label=label,
        unit=unit,
        workflows=workflows,
        window_s=round(elapsed, 1),
        count=int(counter(delta)),
        worker_cpu_s=round(worker_cpu, 2),
        sdk=delta,
        api_calls={k: n - calls.get(k, 0) for k, n in calls_after.items() if n > calls.get(k, 0)},
        threads_cpu_s={
            k: round(v - threads.get(k, 0.0), 2)
            for k, v in sorted(threads_after.items(), key=lambda kv: -kv[1])
            if v - threads.get(k, 0.0) >= 0.01
        },
    )


# The watch worker with its checks' reads answered from memory (bench/reads_from_memory.py).
FROM_MEMORY_RUN = (
    f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); import reads_from_memory; "
    f"reads_from_memory.install(); {KEEPER_RUN}"
)


async def watch_check_phase(
    args: argparse.Namespace, tmp: Path, tag: str, *, from_memory: bool = False
) -> PollPhase:
    """N job watches of healthy jobs on the iris emulator in this process, checking
    every second (tests/watch/world.py's pace). `from_memory`: each job's checks after its
    first whole one are answered from memory, no iris read made."""
    # At speed 1, so a check reads the log lines a job writes between two checks in real
    # time (the tests' speed 60 writes sixty times as many).
    async with (
        dev_server() as (env, requester),
        watch_world(requester, IrisEmulatorConfig(speed=1.0), worker=False) as w,
    ):
        metrics = f"127.0.0.1:{free_port()}"
        address = dev_address(env)
        config = write_family_worker_config(
            tmp / "watch.yaml", address, w.settings, "watch", metrics_address=metrics
        )
        if from_memory:
            run = profiled(args, "watch-from-memory", FROM_MEMORY_RUN) or ["-c", FROM_MEMORY_RUN]
        else:
            run = profiled(args, "watch", KEEPER_RUN)
        fleet = WorkerFleet(config, "watch", interpreter_args=run)
        handles: list[WorkflowHandle[Any, Any]] = []
        try:
            (worker,) = fleet.start(1)
            await until_polling(env.client, w.queue, [worker], within=120)
            for _ in range(args.watches):
                handles.append(await w.watch(w.launch("healthy")))
            return await polled(
                "keeper JobWatch, reads from memory" if from_memory else "keeper JobWatch",
                "check",
                worker.pid,
                metrics,
                workflow_tasks,
                args.watches,
                args.window,
            )
        finally:
            for handle in handles:
                with contextlib.suppress(Exception):
                    await handle.terminate(reason="bench over")
            await fleet.stop()


async def empty_check_phase(args: argparse.Namespace, tmp: Path, tag: str) -> PollPhase:
    """As many empty checks (bench/runner_support.py's EmptyCheck), one a second each."""
    interval = FAST_CADENCE.default_interval.total_seconds()
    async with dev_server() as (env, requester):
        queue = f"keeper-cpu-empty-check-{tag}"
        metrics = f"127.0.0.1:{free_port()}"
        proc = await started_empty_worker(args, "empty-check", env, queue, metrics, tmp)
        try:
            for i in range(args.watches):
                await requester.start_workflow(
                    EMPTY_CHECK_WORKFLOW,
                    interval,
                    id=f"empty-check-{tag}-{i:04d}",
                    task_queue=queue,
                )
            return await polled(
                "empty check, 1 no-op activity due later",
                "check",
                proc.pid,
                metrics,
                workflow_tasks,
                args.watches,
                args.window,
            )
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 15)


async def tpu_poll_phase(args: argparse.Namespace, tmp: Path, tag: str) -> PollPhase:
    """N bootstraps waiting in assign (a queued resource the emulator never assigns), each
    reading its slice every --poll-interval through keeper's zone lister."""
    emu = TpuEmulator(EmulatorConfig(ip_prefix="127.46", vm_health_port=free_port()))
    await emu.start()
    emu.set_default_scenario(Scenario(assign_after=None))
    try:
        async with dev_server() as (env, requester):
            base = f"keeper-cpu-tpu-{tag}"
            metrics = f"127.0.0.1:{free_port()}"
            config = write_worker_config(
                tmp / "tpu.yaml",
                address=dev_address(env),
                task_queue=base,
                families=["tpu"],
                metrics_address=metrics,
                tpu={"endpoint": "emulator", "emulator_address": emu.grpc_target},
            )
            fleet = WorkerFleet(config, "tpu", interpreter_args=profiled(args, "tpu", KEEPER_RUN))
            queue = f"{base}-tpu"
            poll = timedelta(seconds=args.poll_interval)
            try:
                (worker,) = fleet.start(1)
                await until_polling(env.client, queue, [worker], within=120)
                for i in range(args.waiting):
                    req = reserved_slice(f"cpu-{tag}-{i:04d}").model_copy(
                        update={"poll_interval": poll}
                    )
                    await requester.start_workflow(
                        BOOTSTRAP_WORKFLOW_TYPE,
                        req,
                        id=bootstrap_workflow_id(req.slice_name),
                        task_queue=queue,
                        memo={PROJECT_MEMO: req.project},
                    )
                # Steady state: every queued resource created, then one interval, in which
                # each slice has been seen in a zone listing (one made before it was created
                # sends it to a read of its own).
                deadline = time.monotonic() + 300
                while emu.calls["CreateQueuedResource"] < args.waiting:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the bootstraps did not create their slices in 300 s")
                    await asyncio.sleep(0.5)
                await asyncio.sleep(args.poll_interval)
                return await polled(
                    "keeper TPU bootstrap, waiting in assign",
                    "poll",
                    worker.pid,
                    metrics,
                    attempts_of("tpu.observe_slice"),
                    args.waiting,
                    args.window,
                    api_calls=lambda: dict(emu.calls),
                )
            finally:
                await fleet.stop()
    finally:
        await emu.stop()


async def empty_poll_phase(args: argparse.Namespace, tmp: Path, tag: str) -> PollPhase:
    """As many empty polls (bench/runner_support.py's EmptyPoll) at the same interval."""
    async with dev_server() as (env, requester):
        queue = f"keeper-cpu-empty-poll-{tag}"
        metrics = f"127.0.0.1:{free_port()}"
        proc = await started_empty_worker(args, "empty-poll", env, queue, metrics, tmp)
        try:
            for i in range(args.waiting):
                await requester.start_workflow(
                    EMPTY_POLL_WORKFLOW,
                    args.poll_interval,
                    id=f"empty-poll-{tag}-{i:04d}",
                    task_queue=queue,
                )
            return await polled(
                "empty poll, 1 failing no-op activity",
                "poll",
                proc.pid,
                metrics,
                attempts_of(NOT_YET_ACTIVITY),
                args.waiting,
                args.window,
            )
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 15)


@contextlib.asynccontextmanager
async def dev_server() -> AsyncIterator[tuple[WorkflowEnvironment, Client]]:
    env = await start_dev_server()
    try:
        yield env, await requester_client(env)
    finally:
        await env.shutdown()


async def keeper_phase(args: argparse.Namespace, tmp: Path, tag: str) -> Phase:
    async with dev_server() as (env, requester), runner_world(tmp, None) as world:
        names = [f"cpu-{tag}-{i:05d}" for i in range(args.runs)]
        await asyncio.to_thread(world.add_runners, [*names, f"{names[0]}-sample"])
        base = f"keeper-cpu-{tag}"
        metrics = f"127.0.0.1:{free_port()}"
        config = runner_worker_config(world, tmp, dev_address(env), base, metrics)
        fleet = WorkerFleet(
            config, "runners", interpreter_args=profiled(args, "keeper", KEEPER_RUN)
        )
        queue = f"{base}-runners"
        request = DeletionRequest(requested_by=Requester.SCALE_DOWN, reason="keeper bench")

        async def start(name: str) -> WorkflowHandle[Any, DeletionResult]:
            return (await request_deletion(requester, name, request, task_queue=queue)).handle

        def check(name: str, result: DeletionResult) -> str | None:
            ok = result.outcome is DeletionOutcome.DELETED
            return None if ok else f"outcome {result.outcome}"

        try:
            (worker,) = fleet.start(1)
            await until_polling(env.client, queue, [worker], within=120)
            phase = await measured(
                "keeper RunnerDeletion", worker.pid, metrics, names, start, check, args
            )
            if leftovers := world.leftovers(names):
                phase.batch.failures += [f"left behind: {x}" for x in leftovers[:10]]
            return phase
        finally:
            await fleet.stop()


def profiled(args: argparse.Namespace, name: str, run: str) -> list[str]:
    """Interpreter arguments that run `run` (Python code) under cProfile, timing the main
    thread's CPU (where workflow code, activities and conversion run; the SDK core's own
    threads are not in it), into DIR/NAME.prof. Written when `run` returns: `keeper`'s
    own `main` leaves by os._exit, so its `run` is what is called."""
    if args.profile is None:
        return []
    args.profile.mkdir(parents=True, exist_ok=True)
    out = args.profile / f"{name}.prof"
    code = (
        "import cProfile, sys, time; profile = cProfile.Profile(time.thread_time); "
        f"profile.runctx({run!r}, globals(), locals()); profile.dump_stats({str(out)!r})"
    )
    return ["-c", code]


def spawn_empty_worker(
    args: argparse.Namespace, name: str, address: str, queue: str, metrics: str, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, *profiled(args, name, EMPTY_RUN), str(EMPTY_WORKER),
             "--address", address, "--task-queue", queue, "--metrics", metrics],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )  # fmt: skip


async def started_empty_worker(
    args: argparse.Namespace,
    name: str,
    env: WorkflowEnvironment,
    queue: str,
    metrics: str,
    tmp: Path,
) -> subprocess.Popen[bytes]:
    """bench/empty_worker.py on `queue`, once its metrics answer."""
    log = tmp / f"{name}.log"
    proc = spawn_empty_worker(args, name, dev_address(env), queue, metrics, log)
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(httpx.HTTPError):
            scrape(metrics)
            return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the empty worker did not start:\n{log.read_text()}")
        await asyncio.sleep(0.2)


async def empty_phase(args: argparse.Namespace, activities: int, tmp: Path, tag: str) -> Phase:
    async with dev_server() as (env, requester):
        queue = f"keeper-cpu-empty-{tag}"
        metrics = f"127.0.0.1:{free_port()}"
        proc = await started_empty_worker(args, "empty", env, queue, metrics, tmp)
        request = DeletionRequest(requested_by=Requester.SCALE_DOWN, reason="keeper bench")

        async def start(name: str) -> WorkflowHandle[Any, Any]:
            # The submit of runtime.runners.requests.request_deletion, with the empty workflow.
            operation = WithStartWorkflowOperation(
                EmptyDeletion.run,
                EmptyInput(runner=name, activities=activities),
                id=deletion_workflow_id(name),
                task_queue=queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=runner_sa.for_runner(name),
            )
            await requester.execute_update_with_start_workflow(
                REQUEST_UPDATE, request, start_workflow_operation=operation
            )
            return await operation.workflow_handle()

        def check(name: str, result: str) -> str | None:
            return None if result == name else f"returned {result!r}"

        try:
            names = [f"empty-{tag}-{i:05d}" for i in range(args.runs)]
            label = f"empty, {activities} no-op activities"
            return await measured(label, proc.pid, metrics, names, start, check, args)
        finally:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 15)


# Where a profiled worker's main-thread CPU goes: (label, file suffix, function), each the
# cumulative time of that function (coroutines: summed over their resumptions).
PROFILE_PARTS = (
    ("workflow tasks", "temporalio/worker/_workflow.py", "_handle_activation"),
    ("  sandbox: a run's workflow module", "temporalio/worker/_workflow.py",
     "_create_workflow_instance"),
    ("  payloads: decode", "temporalio/bridge/worker.py", "decode_activation"),
    ("  payloads: encode", "temporalio/bridge/worker.py", "encode_completion"),
    ("activities", "temporalio/worker/_activity.py", "_execute_activity"),
    ("  runner store: the lane", "activities/runners/deletion.py", "advance_lane"),
    ("  runner store: deleted", "activities/runners/deletion.py", "finish_deleted"),
    ("  GitHub API (httpx)", "runtime/runners/github_client.py", "remove_runner"),
    ("  provider processes: spawn and wait", "runtime/runners/garm_provider.py", "_call"),
    ("  iris API (aiohttp)", "runtime/watch/iris_client.py", "_call"),
    ("  TPU API (the zone lister)", "activities/tpu/zone_lister.py", "find"),
)  # fmt: skip


def profile_breakdown(path: Path) -> dict[str, float]:
    """Seconds of the profiled main thread, in total and by PROFILE_PARTS."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    parts = {"main thread, in all": round(sum(v[2] for v in stats.values()), 2)}
    for label, suffix, function in PROFILE_PARTS:
        seconds = sum(v[3] for k, v in stats.items() if k[0].endswith(suffix) and k[2] == function)
        if seconds:
            parts[label] = round(seconds, 2)
    return parts


def ratio(keeper: float, empty: float) -> float | None:
    return round(keeper / empty, 3) if empty else None


def render(
    args: argparse.Namespace, runs: list[Phase], polls: list[PollPhase], total: float
) -> tuple[str, bool]:
    failures = [f"{p.label}: {f}" for p in runs for f in p.batch.failures]
    ok = not failures and all(p.batch.n == args.runs for p in runs)
    ok = ok and all(q.count > 0 for q in polls)
    out = [
        f"keeper worker CPU per run - {datetime.now(UTC):%Y-%m-%d %H:%M UTC} - "
        f"{os.cpu_count()} cores - Python {platform.python_version()} - {total:.0f} s - "
        f"load before {args.load_before}",
        "",
        "Setup: Temporal dev server (in-memory, one per phase); one worker process per phase "
        "(its own CPU from /proc; provider processes apart); the SDK's metrics from its "
        "/metrics",
    ]
    if runs:
        out += [
            "",
            f"Runs: {args.runs} per phase, all requested at once (at most "
            f"{args.submit_concurrency} client calls in flight)",
            f"  {'workload':<34} {'runs':>5} {'per min':>8} {'events':>6} {'worker CPU':>11} "
            f"{'per run':>9} {'children':>9} {'wf tasks':>9} {'wf task ms':>10} "
            f"{'activity ms':>11}",
        ]
    for p in runs:
        b = p.batch
        tasks = p.sdk_count_per_run("workflow_task_execution_latency")
        out.append(
            f"  {p.label:<34} {b.n:>5} {b.per_minute:>8,.0f} {p.events:>6} "
            f"{p.worker_cpu_s:>9.1f} s {p.cpu_ms_per_run:>6.1f} ms "
            f"{p.children_cpu_s:>7.1f} s {tasks:>9.1f} "
            f"{p.sdk_ms_per_run('workflow_task_execution_latency'):>10.1f} "
            f"{p.sdk_ms_per_run('activity_execution_latency'):>11.1f}"
        )  # fmt: skip
    if len(runs) == 2:
        out.append(
            f"  worker CPU per run, keeper / empty: {ratio(*(p.cpu_ms_per_run for p in runs))}"
        )
    for unit, pace in (("poll", f"one read every {args.poll_interval:g} s"),
                       ("check", "one check a second")):  # fmt: skip
        phases = [q for q in polls if q.unit == unit]
        if not phases:
            continue
        out += [
            "",
            f"{unit.capitalize()}s: {phases[0].workflows} workflows, {pace} each, measured "
            f"over {args.window:g} s once each had started",
            f"  {'workload':<40} {unit + 's':>6} {'worker CPU':>11} {'per ' + unit:>10}",
        ]
        for q in phases:
            out.append(
                f"  {q.label:<40} {q.count:>6} {q.worker_cpu_s:>9.2f} s "
                f"{q.cpu_ms_per_unit:>7.2f} ms"
            )
            if q.threads_cpu_s:
                split = ", ".join(f"{k} {v:.2f} s" for k, v in q.threads_cpu_s.items())
                out.append(f"    by thread: {split}")
            if q.api_calls:
                per_slice = q.workflows * 3600 / args.poll_interval
                out.append(
                    f"    TPU API calls in the window: {q.api_calls} "
                    f"({q.api_calls_per_hour:,.0f} an hour for {q.workflows} bootstraps; one "
                    f"Get per slice and poll would be {per_slice:,.0f})"
                )
        for q in phases[:-1] if len(phases) >= 2 else []:
            per = ratio(q.cpu_ms_per_unit, phases[-1].cpu_ms_per_unit)
            out.append(f"  worker CPU per {unit}, {q.label} / empty: {per}")
    if args.profile is not None:
        for prof in sorted(args.profile.glob("*.prof")):
            out += ["", f"Profile {prof.name} (main-thread CPU seconds, whole process life):"]
            out += [f"  {k:<40} {v:>7.2f}" for k, v in profile_breakdown(prof).items()]
    out += [
        "",
        "wf task ms and activity ms are the SDK's execution latencies (wall time on the "
        "worker, summed per run); children is the provider processes' CPU.",
        "",
        "Check: PASS - every run completed as expected, every poller polled"
        if ok
        else "Check: FAIL",
        *[f"  {f}" for f in failures[:10]],
    ]
    return "\n".join(out), ok


def run_figures(p: Phase) -> dict[str, Any]:
    return {
        "label": p.label,
        "done": p.batch.n,
        "batch_seconds": round(p.batch.seconds, 2),
        "per_minute": round(p.batch.per_minute, 1),
        "history_events": p.events,
        "activities": p.activities,
        "worker_cpu_seconds": p.worker_cpu_s,
        "worker_cpu_ms_per_run": round(p.cpu_ms_per_run, 2),
        "children_cpu_seconds": p.children_cpu_s,
        "server_cpu_seconds": round(p.batch.cpu.server, 1),
        "sdk": p.sdk,
        "failures": p.batch.failures[:20],
        "timeline": p.batch.timeline,
    }


def poll_figures(q: PollPhase) -> dict[str, Any]:
    return {
        **asdict(q),
        f"worker_cpu_ms_per_{q.unit}": round(q.cpu_ms_per_unit, 3),
        "api_calls_per_hour": round(q.api_calls_per_hour, 1),
    }


async def main(args: argparse.Namespace) -> tuple[str, bool, dict[str, Any]]:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    runs: list[Phase] = []
    polls: list[PollPhase] = []
    with tempfile.TemporaryDirectory(prefix="keeper-cpu-") as tmp:
        if "deletion" in args.workloads:
            keeper = await keeper_phase(args, Path(tmp), tag)
            progress(f"keeper: {keeper.cpu_ms_per_run:.1f} ms of worker CPU per deletion")
            empty = await empty_phase(args, keeper.activities, Path(tmp), tag)
            progress(f"empty: {empty.cpu_ms_per_run:.1f} ms of worker CPU per run")
            runs = [keeper, empty]
        watch_phases: list[PollPhaseOf] = [watch_check_phase, empty_check_phase]
        if args.reads_from_memory:
            watch_phases.insert(1, functools.partial(watch_check_phase, from_memory=True))
        pairs: dict[str, list[PollPhaseOf]] = {
            "tpu-poll": [tpu_poll_phase, empty_poll_phase],
            "watch-check": watch_phases,
        }
        for workload, pair in pairs.items():
            if workload not in args.workloads:
                continue
            for phase in pair:
                q = await phase(args, Path(tmp), tag)
                progress(f"{q.label}: {q.cpu_ms_per_unit:.2f} ms of worker CPU per {q.unit}")
                polls.append(q)
    total = time.monotonic() - started
    text, ok = render(args, runs, polls, total)
    figures = {
        "runs": args.runs,
        "waiting": args.waiting,
        "poll_interval_seconds": args.poll_interval,
        "watches": args.watches,
        "window_seconds": args.window,
        "seconds": round(total, 1),
        "phases": [run_figures(p) for p in runs],
        "polls": [poll_figures(q) for q in polls],
        "keeper_over_empty": {
            "deletion": ratio(*(p.cpu_ms_per_run for p in runs)) if len(runs) == 2 else None,
            **{
                unit: ratio(*(q.cpu_ms_per_unit for q in first_and_last(polls, unit)))
                for unit in ("poll", "check")
                if sum(q.unit == unit for q in polls) >= 2
            },
        },
        "profiles": {}
        if args.profile is None
        else {prof.stem: profile_breakdown(prof) for prof in sorted(args.profile.glob("*.prof"))},
        "check": {"passed": ok},
    }
    return text, ok, figures


WORKLOADS = ("deletion", "tpu-poll", "watch-check")
PollPhaseOf = Callable[[argparse.Namespace, Path, str], Awaitable[PollPhase]]


def first_and_last(polls: list[PollPhase], unit: str) -> tuple[PollPhase, PollPhase]:
    """keeper's phase of `unit` and the empty one (first and last; a variant between)."""
    phases = [q for q in polls if q.unit == unit]
    return phases[0], phases[-1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="deletions (1000)")
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"which comparisons, comma-separated (default {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--waiting", type=int, default=200, help="bootstraps waiting in assign (200)"
    )
    parser.add_argument(
        "--poll-interval", type=float, default=5.0, help="their poll interval, seconds (5)"
    )
    parser.add_argument(
        "--watches", type=int, default=10, help="job watches, each checking every second (10)"
    )
    parser.add_argument(
        "--reads-from-memory",
        action="store_true",
        help="watch-check: also measure keeper's check with its iris reads answered from "
        "memory (bench/reads_from_memory.py), to show what the reads cost",
    )
    parser.add_argument(
        "--window", type=float, default=60.0, help="seconds of polls and checks measured (60)"
    )
    parser.add_argument(
        "--submit-concurrency", type=int, default=100, help="client calls in flight (100)"
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds one batch may take (900)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run each worker under cProfile (its main thread's CPU), writing DIR/<phase>.prof "
        "(slower: the CPU figures are then the profiled ones)",
    )
    parser.add_argument("--verbose", action="store_true", help="keep the SDK's warnings")
    args = parser.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if unknown := set(args.workloads) - set(WORKLOADS):
        parser.error(f"--workloads: unknown {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    if min(args.runs, args.waiting, args.watches) < 1:
        parser.error("--runs, --waiting and --watches must be at least 1")
    if args.poll_interval < 1:
        parser.error("--poll-interval: at least 1 second (a slice request's minimum)")
    return args


if __name__ == "__main__":
    sys.exit(run_noting_load("worker_cpu", parse_args, main))
