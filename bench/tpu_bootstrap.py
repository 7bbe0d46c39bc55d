"""Figures for keeper's TPU slice bootstrap: history size, TPU API calls, health fan-out.

Run from the repository root:

    python bench/tpu_bootstrap.py            # full run, about five minutes
    python bench/tpu_bootstrap.py --quick    # under a minute; the sequential checker is sampled
    python bench/tpu_bootstrap.py --json     # the same figures as JSON on stdout

Everything runs on loopback and is started here: the TPU emulator in-process, Temporal's
time-skipping test server and (full run) the Temporal dev server, both from the venv's bin
directory, never downloaded. Progress goes to stderr. Timings are printed, never asserted:
the machine is shared and noisy. Every run also writes its raw figures, the command line and
the machine's facts to bench/results/tpu_bootstrap-<UTC time>.json (bench/run_record.py).
What each figure means is in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
from google.cloud import tpu_v2
from run_record import Run
from script_runner import (
    Interrupted,
    configure,
    progress,
    run_for_figures,
    start_dev_server,
    tool_path,
)
from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)

from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator
from emulators.tpu.testing import clock_following
from keeper.activities.tpu.cloud import build_queued_resource
from keeper.activities.tpu.health import HealthProber
from keeper.domain.tpu import naming
from keeper.domain.tpu.models import BootstrapFailure, BootstrapResult
from keeper.domain.tpu.observation import VmEndpoint
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.runtime import search_attributes as sa
from keeper.runtime.runners.deps import open_runner_deps
from keeper.runtime.settings import Settings
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import activity_slots
from keeper.workers.registry import (
    WORKFLOW_FAILURE_EXCEPTION_TYPES,
    WORKFLOW_INTERCEPTORS,
    WORKFLOWS,
    build_activities,
)
from keeper.workers.runner import workflow_runner
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap

# Loopback prefixes of our own, so a test suite running next to us never shares an address.
BOOTSTRAP_IP_PREFIX = "127.41"
HEALTH_IP_PREFIX = "127.42"

HOUR = 3600.0
ASSIGN_BUDGET = timedelta(hours=4)
# The 4-hour case waits one minute less than the assign budget so that it is assigned.
HISTORY_WAITS: tuple[tuple[str, timedelta], ...] = (
    ("10m", timedelta(minutes=10)),
    ("1h", timedelta(hours=1)),
    ("3h59m", timedelta(hours=3, minutes=59)),
)
DEFAULT_POLL = timedelta(seconds=30)
OTHER_POLL = timedelta(seconds=60)
OTHER_POLL_WAIT = timedelta(hours=1)
# Real time one time-skipped bootstrap may take before the run is declared stalled.
RUN_LIMIT = timedelta(seconds=90)
HISTORY_REPEATS = 3  # full run; --quick runs each case once
THROTTLE_WAIT = timedelta(hours=2)
THROTTLE_AFTER = timedelta(minutes=10)  # into the wait, when the faults are injected
THROTTLE_FAULTS = 5
# The same faults on the Temporal dev server in real time, at a 1 s poll and a 10 s ceiling
# (see throttle_on_dev_server): the time-skipping server does not give the activity its
# retry policy, so the backoff there starts from another base than on a real server.
DEV_POLL = timedelta(seconds=1)
DEV_MAX_BACKOFF = timedelta(seconds=10)
DEV_THROTTLE_AFTER = timedelta(seconds=5)
DEV_IP_PREFIX = "127.43"

# The incident's slice: a v4-2048 asking for 512 VMs, of which 33 came back as workers nobody
# owned and stopped answering. Its log names 32 of those workers by number; they and the last
# VM (511) are the VMs here that accept a connection and never answer.
INCIDENT_ACCELERATOR = "v4-4096"  # 512 VMs by keeper's topology rule (8 TensorCores a host)
INCIDENT_VMS = 512
INCIDENT_UNREACHABLE = sorted(
    [
        *(124, 248, 227, 214, 109, 117, 13, 35, 88, 157, 230, 166, 27, 198, 23, 177, 29),
        *(242, 62, 179, 48, 173, 113, 236, 169, 4, 46, 205, 103, 40, 246, 159, 511),
    ]
)
assert len(set(INCIDENT_UNREACHABLE)) == 33
# One probe timeout for both checkers, keeper's default (health.timeout), so the comparison
# is of fan-out alone. It is a total per VM on both sides.
PROBE_TIMEOUT = Settings().health.timeout
# keeper's bound before it was derived from the open-file limit (bench/tpu_health_round.py).
KEEPER_CONCURRENCY = 64
CONCURRENCIES = (16, 32, 64)
# --quick samples the sequential checker: each unreachable VM costs a full timeout, so a few
# of them and a run of healthy VMs are measured, and the whole round is only a model.
QUICK_SAMPLE_UNREACHABLE = 3
QUICK_SAMPLE_HEALTHY = 40


def free_port() -> int:
    # The wildcard address, so no (ip, port) pair under any loopback prefix is taken.
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def bench_settings() -> Settings:
    settings = Settings()
    settings.tpu.call_timeout = timedelta(seconds=5)
    settings.worker.graceful_shutdown = timedelta(seconds=1)
    return settings


def make_request(port: int, **overrides: Any) -> SliceRequest:
    fields: dict[str, Any] = {
        "slice_name": f"bench-{uuid.uuid4().hex[:10]}",
        "project": "keeper-bench",
        "zone": "us-central2-b",
        "accelerator_type": "v4-32",
        "runtime_version": "tpu-ubuntu2204-base",
        "capacity": "reserved",
        "reservation_name": "res-bench",
        "health_port": port,
        "poll_interval": DEFAULT_POLL,
    }
    fields.update(overrides)
    return SliceRequest.model_validate(fields)


def fmt_duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours and not (minutes or secs):
        return f"{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m" + (f"{secs:02d}s" if secs else "")
    if minutes:
        return f"{minutes}m" + (f"{secs:02d}s" if secs else "")
    return f"{secs}s"


# --------------------------------------------------------------------------- servers


async def start_time_skipping() -> WorkflowEnvironment:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=tool_path("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in sa.ALL
                },
            )
        )
    except BaseException:
        await env.shutdown()
        raise
    return env


@dataclass
class Attempt:
    activity: str
    number: int
    started: float  # server time the attempt started, seconds since the epoch
    calls: Counter[str]
    failure: str | None  # the error type the attempt ended with, "Waiting" for a plain poll
    qr_state: str | None = None  # what a poll that returned saw


class CallLog(Interceptor):
    """Stamps every TPU API call with the server time of the activity attempt that made it.

    The emulator counts calls per method (`state()["calls"]`); this takes the difference of
    those counts across each activity attempt and files it under the attempt's start time
    on the server, which on the time-skipping server is the skipped-to time. (Not the
    attempt's "scheduled" time: the test server gives a retry the time the previous attempt
    failed.) One bootstrap runs one activity at a time, so the differences never mix two
    attempts. Each hook is called with the start time and type of every attempt before it
    runs, until it returns True.
    """

    def __init__(self, emu: TpuEmulator) -> None:
        self.emu = emu
        self.attempts: list[Attempt] = []
        self.hooks: list[Callable[[float, str], bool]] = []

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Stamping(next, self)

    def first(self, activity_type: str) -> Attempt | None:
        return next((a for a in self.attempts if a.activity == activity_type), None)

    def calls(self, start: float, end: float) -> Counter[str]:
        total: Counter[str] = Counter()
        for attempt in self.attempts:
            if start <= attempt.started < end:
                total.update(attempt.calls)
        return total

    def total(self) -> Counter[str]:
        return self.calls(float("-inf"), float("inf"))


class _Stamping(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, log: CallLog) -> None:
        super().__init__(next)
        self._log = log

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        started = info.started_time.timestamp()
        for hook in list(self._log.hooks):
            if hook(started, info.activity_type):
                self._log.hooks.remove(hook)
        before = Counter(self._log.emu.state()["calls"])
        failure: str | None = None
        seen: str | None = None
        try:
            result = await self.next.execute_activity(input)
            seen = getattr(result, "qr_state", None)
            return result
        except ApplicationError as err:
            failure = err.type or type(err).__name__
            raise
        except BaseException as err:
            failure = type(err).__name__
            raise
        finally:
            after = Counter(self._log.emu.state()["calls"])
            self._log.attempts.append(
                Attempt(info.activity_type, info.attempt, started, after - before, failure, seen)
            )


@contextlib.asynccontextmanager
async def running_worker(
    client: Client, emu: TpuEmulator, log: CallLog, settings: Settings | None = None
) -> AsyncIterator[str]:
    # workers.main.build_worker, plus the call log as an interceptor. The runner family's
    # store and provider state go to a directory of their own; no runner workflow runs.
    settings = (settings or bench_settings()).model_copy(deep=True)
    queue = f"keeper-bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="keeper-bench-") as tmp:
        settings.runners.store_url = f"sqlite:///{Path(tmp) / 'runners.db'}"
        settings.runners.provider.config_file = Path(tmp) / "provider.json"
        settings.runners.github.token_file = None
        runners = open_runner_deps(settings.runners)
        worker = Worker(
            client,
            task_queue=queue,
            workflows=WORKFLOWS,
            interceptors=[*WORKFLOW_INTERCEPTORS, log],
            workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
            # Unversioned, as keeper's worker without deployment options: the server refuses
            # a task completed with the versioning behaviour each workflow declares.
            workflow_runner=workflow_runner(False, client.data_converter),
            activities=build_activities(
                settings, client, emulator_client(emu.grpc_target), runners
            ),
            graceful_shutdown_timeout=settings.worker.graceful_shutdown,
            max_concurrent_activities=activity_slots(settings),
            max_cached_workflows=settings.worker.max_cached_workflows,
        )
        try:
            async with worker:
                yield queue
        finally:
            await runners.github.aclose()
            runners.store.close()


# --------------------------------------------------------------------------- bootstraps


@dataclass
class BootstrapRun:
    case: str
    poll_seconds: float
    wait_seconds: float | None  # None: never assigned
    outcome: str
    supervisor_events: int
    child_events: int
    calls_total: dict[str, int]
    calls_in_wait: dict[str, int]
    wait_hours: float
    real_seconds: float
    log: CallLog
    created: float  # server time of the create attempt

    @property
    def events(self) -> int:
        return self.supervisor_events + self.child_events

    @property
    def observations(self) -> int:
        """Polls that returned to the workflow (progress seen), each a few history events."""
        return sum(
            1 for a in self.log.attempts if a.activity == "tpu.observe_slice" and a.failure is None
        )

    @property
    def get_qr_per_hour(self) -> float:
        """Reads of the queued resource: its own Gets and the lists of its zone."""
        return qr_reads(self.calls_in_wait) / self.wait_hours

    @property
    def all_calls_per_hour(self) -> float:
        return sum(self.calls_in_wait.values()) / self.wait_hours


def qr_reads(calls: dict[str, int]) -> int:
    """Calls that read queued resources: GetQueuedResource and ListQueuedResources pages."""
    return calls.get("GetQueuedResource", 0) + calls.get("ListQueuedResources", 0)


def failure_summary(err: WorkflowFailureError) -> str:
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        failure = BootstrapFailure.model_validate(cause.details[0])
        deleted = len(failure.compensation.deleted) if failure.compensation else 0
        return (
            f"failed: {failure.phase.value} {failure.kind}; compensation deleted {deleted} "
            "resource(s)"
        )
    return f"failed: {cause or err}"


class Bootstraps:
    """Runs whole bootstraps against one emulator, each on a time-skipping server of its own.

    A fresh server per bootstrap costs about 0.1 s and keeps the cases apart: a server that
    one bootstrap left unable to skip time (see docs/benchmarks.md) cannot stall the next.
    """

    def __init__(self, emu: TpuEmulator) -> None:
        self.emu = emu
        self.reset_clears_calls: bool | None = None

    def _reset(self) -> dict[str, int]:
        had_calls = bool(self.emu.state()["calls"])
        self.emu.reset()
        baseline = dict(self.emu.state()["calls"])
        if had_calls and self.reset_clears_calls is None:
            self.reset_clears_calls = baseline == {}
        return baseline

    async def run(
        self,
        case: str,
        wait: timedelta | None,
        poll: timedelta = DEFAULT_POLL,
        prepare: Callable[[CallLog, str], None] | None = None,
    ) -> BootstrapRun:
        env = await start_time_skipping()
        try:
            return await self._run(env, case, wait, poll, prepare)
        finally:
            await env.shutdown()

    async def _run(
        self,
        env: WorkflowEnvironment,
        case: str,
        wait: timedelta | None,
        poll: timedelta,
        prepare: Callable[[CallLog, str], None] | None,
    ) -> BootstrapRun:
        baseline = self._reset()
        request = make_request(self.emu.config.vm_health_port, poll_interval=poll)
        self.emu.set_scenario(
            request.slice_name,
            Scenario(assign_after=None if wait is None else wait.total_seconds()),
        )
        log = CallLog(self.emu)
        if prepare is not None:
            prepare(log, request.slice_name)
        started = time.monotonic()
        async with (
            clock_following(env, self.emu),
            running_worker(env.client, self.emu, log) as queue,
        ):
            handle = await env.client.start_workflow(
                TpuSliceBootstrap.run,
                request,
                id=naming.bootstrap_workflow_id(request.slice_name),
                task_queue=queue,
                result_type=BootstrapResult,
            )
            try:
                async with asyncio.timeout(RUN_LIMIT.total_seconds()):
                    result = await handle.result()
                outcome = f"assigned, {len(result.vms)} VMs healthy"
            except WorkflowFailureError as err:
                outcome = failure_summary(err)
            except TimeoutError:
                raise RuntimeError(
                    f"{case}: the bootstrap did not finish within {RUN_LIMIT.seconds} s of "
                    f"real time (server time {await env.get_current_time():%H:%M:%S}): the "
                    "time-skipping server stopped skipping"
                ) from None
        real_seconds = time.monotonic() - started
        child_id = naming.bootstrap_run_workflow_id(request.slice_name)
        child = env.client.get_workflow_handle(child_id)
        supervisor_events = len((await handle.fetch_history()).events)
        child_events = len((await child.fetch_history()).events)
        after = self.emu.state()["calls"]
        totals = {m: n - baseline.get(m, 0) for m, n in sorted(after.items())}
        if totals != dict(sorted(log.total().items())):
            progress(f"  note: calls outside activity attempts: {totals} vs {dict(log.total())}")
        create = log.first("tpu.create_slice")
        assert create is not None, "the bootstrap never created its queued resource"
        # The wait, as the workflow saw it: from the create until the first poll that found
        # the QR assigned or, never assigned, until compensation started at the deadline.
        assigned = next(
            (a for a in log.attempts if a.qr_state in ("PROVISIONING", "ACTIVE")),
            log.first("tpu.delete_slice"),
        )
        assert assigned is not None, "neither assigned nor compensated"
        end = assigned.started
        in_wait = {m: n for m, n in sorted(log.calls(create.started, end).items()) if n}
        run = BootstrapRun(
            case=case,
            poll_seconds=poll.total_seconds(),
            wait_seconds=None if wait is None else wait.total_seconds(),
            outcome=outcome,
            supervisor_events=supervisor_events,
            child_events=child_events,
            calls_total=totals,
            calls_in_wait=in_wait,
            wait_hours=(end - create.started) / HOUR,
            real_seconds=round(real_seconds, 2),
            log=log,
            created=create.started,
        )
        progress(
            f"  {case}: {run.events} events ({supervisor_events} + {child_events}), "
            f"{run.get_qr_per_hour:.1f} QR reads/h, {real_seconds:.1f} s real; {outcome}"
        )
        return run


def throttle_hook(emu: TpuEmulator, log: CallLog, slice_name: str, after: timedelta) -> None:
    """Arms RESOURCE_EXHAUSTED for the first poll that starts `after` into the wait."""

    def inject(started: float, activity_type: str) -> bool:
        create = log.first("tpu.create_slice")
        if create is None or started < create.started + after.total_seconds():
            return False
        # A poll reads its zone's list and, when that fails, its own QR: both are refused.
        emu.inject_fault("ListQueuedResources", "RESOURCE_EXHAUSTED", THROTTLE_FAULTS)
        emu.inject_fault("GetQueuedResource", "RESOURCE_EXHAUSTED", THROTTLE_FAULTS, slice_name)
        return True

    log.hooks.append(inject)


def backoff_figures(log: CallLog) -> dict[str, Any]:
    """The poll schedule around the injected faults, in seconds of server time.

    Gaps are from one poll to the next; "throttled" runs from the first refused poll to the
    first answered one.
    """
    polls = sorted(
        (a for a in log.attempts if a.activity == "tpu.observe_slice"), key=lambda a: a.started
    )
    refused = [i for i, a in enumerate(polls) if a.failure == "RateLimited"]
    if not refused:
        raise RuntimeError("no poll was refused: the fault was never injected")
    first, last = refused[0], refused[-1]
    times = [a.started for a in polls]
    gaps = [round(b - a) for a, b in itertools.pairwise(times)]
    throttled = times[last + 1] - times[first] if last + 1 < len(times) else float("nan")
    return {
        "refused_polls": len(refused),
        "gaps_before": gaps[max(first - 3, 0) : first],
        "gaps_throttled": gaps[first : last + 1],
        "gaps_after": gaps[last + 1 : last + 4],
        "throttled_seconds": round(throttled),
        "calls_per_hour_throttled": round(len(refused) / (throttled / HOUR), 1),
    }


async def throttle_on_dev_server() -> dict[str, Any]:
    """The throttled poll schedule on a real Temporal server, in real time, with a 1 s poll
    and a 10 s backoff ceiling (the production ratio, 30 s : 5 min, at a thirtieth of the
    time). The figures are what was measured at those settings; the gaps at the defaults
    are given only as a model (each gap x 30), labelled so.
    """
    port = free_port()
    env = await start_dev_server()
    emu = TpuEmulator(
        EmulatorConfig(ip_prefix=DEV_IP_PREFIX, vm_health_port=port, scenario_file=None)
    )
    try:
        await emu.start()
        request = make_request(port, poll_interval=DEV_POLL)
        emu.set_scenario(request.slice_name, Scenario(assign_after=None))
        log = CallLog(emu)
        throttle_hook(emu, log, request.slice_name, DEV_THROTTLE_AFTER)
        settings = bench_settings()
        settings.bootstrap.max_backoff = DEV_MAX_BACKOFF
        async with running_worker(env.client, emu, log, settings) as queue:
            handle = await env.client.start_workflow(
                TpuSliceBootstrap.run,
                request,
                id=naming.bootstrap_workflow_id(request.slice_name),
                task_queue=queue,
            )

            enough = asyncio.Event()

            def watch(started: float, activity_type: str) -> bool:
                # Enough once three polls were answered after the last refused one.
                refused = [i for i, a in enumerate(log.attempts) if a.failure == "RateLimited"]
                if refused and len(log.attempts) - 1 - refused[-1] >= 3:
                    enough.set()
                return enough.is_set()

            log.hooks.append(watch)
            limit = 30 + THROTTLE_FAULTS * DEV_MAX_BACKOFF.total_seconds()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await enough.wait()
            # Done measuring: cancelling is a normal ending (the QR is deleted).
            await handle.cancel()
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()
        leaks = emu.leaks()
    finally:
        await emu.stop()
        await env.shutdown()
    figures = backoff_figures(log)
    figures["poll_seconds"] = DEV_POLL.total_seconds()
    figures["max_backoff_seconds"] = DEV_MAX_BACKOFF.total_seconds()
    scale = DEFAULT_POLL / DEV_POLL
    figures["model_default_gaps_throttled_seconds"] = [
        round(g * scale) for g in figures["gaps_throttled"]
    ]
    figures["model"] = f"gaps x {scale:g}: the same rule at poll 30 s and a 5 min ceiling"
    figures["leaks_after_cancel"] = leaks
    return figures


async def bootstrap_section(full: bool) -> dict[str, Any]:
    port = free_port()
    repeats = HISTORY_REPEATS if full else 1
    progress("starting the TPU emulator; every bootstrap gets a time-skipping server of its own")
    emu = TpuEmulator(
        EmulatorConfig(ip_prefix=BOOTSTRAP_IP_PREFIX, vm_health_port=port, scenario_file=None)
    )
    try:
        await emu.start()
        runs = Bootstraps(emu)
        progress(f"history: bootstraps assigned after each wait (poll 30 s), x{repeats}")
        cases: list[tuple[str, timedelta | None]] = [*HISTORY_WAITS, ("never assigned", None)]
        history: dict[str, list[BootstrapRun]] = {}
        for _ in range(repeats):
            for label, wait in cases:
                history.setdefault(label, []).append(await runs.run(label, wait))
        progress(f"API calls: poll every {OTHER_POLL.total_seconds():g} s")
        label = f"{fmt_duration(OTHER_POLL_WAIT.total_seconds())}, poll 60s"
        slower = await runs.run(label, OTHER_POLL_WAIT, OTHER_POLL)
        progress(f"API calls: {THROTTLE_FAULTS} x RESOURCE_EXHAUSTED injected into a 2h wait")
        throttled = await runs.run(
            "2h, throttled",
            THROTTLE_WAIT,
            prepare=lambda log, name: throttle_hook(emu, log, name, THROTTLE_AFTER),
        )
        skipping_backoff = backoff_figures(throttled.log)
    finally:
        await emu.stop()
    dev_backoff = None
    if full:
        progress(
            f"API calls: the same faults on the Temporal dev server, poll {DEV_POLL.seconds} s "
            f"(about {THROTTLE_FAULTS * DEV_MAX_BACKOFF.seconds} s at most)"
        )
        dev_backoff = await throttle_on_dev_server()
        progress(f"  dev server gaps: {dev_backoff['gaps_throttled']} s")

    first = {label: found[0] for label, found in history.items()}
    one_hour, four_hours = first["1h"], first["3h59m"]
    marginal = (qr_reads(four_hours.calls_in_wait) - qr_reads(one_hour.calls_in_wait)) / (
        four_hours.wait_hours - one_hour.wait_hours
    )

    def history_row(label: str, found: list[BootstrapRun]) -> dict[str, Any]:
        totals = [r.events for r in found]
        return {
            "case": label,
            "wait_seconds": found[0].wait_seconds,
            "outcomes": sorted({r.outcome for r in found}),
            "runs": len(found),
            "supervisor_events": [r.supervisor_events for r in found],
            "child_events": [r.child_events for r in found],
            "total_events": totals,
            "total_events_median": statistics.median(totals),
            "observations": [r.observations for r in found],
            "real_seconds": [r.real_seconds for r in found],
        }

    def calls_row(run: BootstrapRun) -> dict[str, Any]:
        return {
            "case": run.case,
            "poll_seconds": run.poll_seconds,
            "wait_hours": round(run.wait_hours, 3),
            "calls_in_wait": run.calls_in_wait,
            "get_queued_resource_per_hour": round(run.get_qr_per_hour, 1),
            "all_calls_per_hour": round(run.all_calls_per_hour, 1),
            "calls_whole_bootstrap": run.calls_total,
        }

    return {
        "history": [history_row(label, found) for label, found in history.items()],
        "api_calls": [calls_row(r) for r in [*first.values(), slower, throttled]],
        "throttled": {
            "faults": THROTTLE_FAULTS,
            "injected_after_seconds": THROTTLE_AFTER.total_seconds(),
            "time_skipping": skipping_backoff,
            "dev_server": dev_backoff,
        },
        "marginal_get_qr_per_hour": round(marginal, 1),
        "reset_clears_calls": runs.reset_clears_calls,
    }


# --------------------------------------------------------------------------- health


async def sequential_check(
    vms: list[VmEndpoint], port: int, path: str
) -> list[tuple[int, bool, float]]:
    """The incident controller's way: one GET per VM, in order, each with its own timeout
    (the same total per VM as keeper's prober)."""
    out: list[tuple[int, bool, float]] = []
    limit = PROBE_TIMEOUT.total_seconds()
    async with httpx.AsyncClient(timeout=limit) as client:
        for vm in vms:
            started = time.perf_counter()
            try:
                async with asyncio.timeout(limit):
                    response = await client.get(f"http://{vm.ip}:{port}{path}")
                ok = response.status_code == 200
            except (httpx.HTTPError, TimeoutError):
                ok = False
            out.append((vm.index, ok, time.perf_counter() - started))
    return out


async def timed_round(
    prober: HealthProber, vms: list[VmEndpoint], port: int, path: str
) -> tuple[float, int]:
    started = time.perf_counter()
    report = await prober.round(vms, port, path)
    return time.perf_counter() - started, report.healthy


async def wait_until_serving(emu: TpuEmulator, slice_name: str, expected: int) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        emu.advance(1)
        vms = [v for v in emu.state()["vms"] if v["qr"] == slice_name]
        serving = [v for v in vms if v["booted_at"] and v["health"] in ("ok", "unreachable")]
        if len(serving) == expected:
            return loop.time() - started
        if loop.time() - started > 120:
            raise RuntimeError(f"only {len(serving)} of {expected} VMs serving after 120 s")
        await asyncio.sleep(0.1)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def health_section(quick: bool) -> dict[str, Any]:
    port = free_port()
    reps_dead, reps_healthy = (1, 2) if quick else (2, 3)
    emu = TpuEmulator(
        EmulatorConfig(ip_prefix=HEALTH_IP_PREFIX, vm_health_port=port, scenario_file=None)
    )
    await emu.start()
    try:
        request = make_request(port, accelerator_type=INCIDENT_ACCELERATOR)
        assert request.expected_vms == INCIDENT_VMS, request.expected_vms
        incident = Scenario(
            assign_after=0,
            active_after=0,
            ips_after=0,
            phone_home=False,
            unreachable_vms=INCIDENT_UNREACHABLE,
        )
        emu.set_scenario(request.slice_name, incident)
        client = emulator_client(emu.grpc_target)
        progress(f"health: creating a {INCIDENT_ACCELERATOR} queued resource ({INCIDENT_VMS} VMs)")
        await client.create_queued_resource(
            request=tpu_v2.CreateQueuedResourceRequest(
                parent=naming.parent(request.project, request.zone),
                queued_resource_id=request.slice_name,
                queued_resource=build_queued_resource(
                    request, naming.owner_labels("bench", "none"), ASSIGN_BUDGET
                ),
            ),
            timeout=10,
        )
        boot_seconds = await wait_until_serving(emu, request.slice_name, INCIDENT_VMS)
        node = await client.get_node(
            name=naming.node_name(request.project, request.zone, request.slice_name), timeout=10
        )
        vms = [
            VmEndpoint(node=request.slice_name, index=i, ip=ep.ip_address)
            for i, ep in enumerate(node.network_endpoints)
        ]
        assert len(vms) == INCIDENT_VMS and all(vm.ip for vm in vms)
        path = request.health_path
        progress(f"health: {INCIDENT_VMS} VMs serving after {boot_seconds:.1f} s")

        # Warm-up over the healthy VMs, not counted: first connections, the event loop's
        # first growth.
        reachable = [vm for vm in vms if vm.index not in INCIDENT_UNREACHABLE]
        await timed_round(HealthProber(KEEPER_CONCURRENCY, PROBE_TIMEOUT), reachable, port, path)

        dead: dict[int, list[float]] = {c: [] for c in CONCURRENCIES}
        dead_healthy: dict[int, int] = {}
        for rep in range(reps_dead):
            for conc in CONCURRENCIES if rep % 2 == 0 else CONCURRENCIES[::-1]:
                seconds, healthy = await timed_round(
                    HealthProber(conc, PROBE_TIMEOUT), vms, port, path
                )
                dead[conc].append(seconds)
                dead_healthy[conc] = healthy
                progress(f"  keeper, 33 unreachable, c={conc}: {seconds:.2f} s")

        emu.set_scenario(request.slice_name, incident.model_copy(update={"unreachable_vms": []}))
        clean: dict[int, list[float]] = {c: [] for c in CONCURRENCIES}
        for rep in range(reps_healthy):
            for conc in CONCURRENCIES if rep % 2 == 0 else CONCURRENCIES[::-1]:
                seconds, healthy = await timed_round(
                    HealthProber(conc, PROBE_TIMEOUT), vms, port, path
                )
                assert healthy == INCIDENT_VMS, healthy
                clean[conc].append(seconds)
        progress(
            "  keeper, all healthy: "
            + ", ".join(f"c={c} {median(clean[c]):.2f} s" for c in CONCURRENCIES)
        )
        emu.set_scenario(request.slice_name, incident)

        unreachable = set(INCIDENT_UNREACHABLE)
        if quick:
            dead_sample = [vm for vm in vms if vm.index in unreachable][:QUICK_SAMPLE_UNREACHABLE]
            healthy_vms = [vm for vm in vms if vm.index not in unreachable]
            step = len(healthy_vms) // QUICK_SAMPLE_HEALTHY
            sample = sorted(
                dead_sample + healthy_vms[::step][:QUICK_SAMPLE_HEALTHY], key=lambda v: v.index
            )
        else:
            sample = vms
        dead_in_sample = sum(vm.index in unreachable for vm in sample)
        progress(
            f"  sequential checker ({PROBE_TIMEOUT.total_seconds():g} s timeout) over "
            f"{len(sample)} VMs"
            + (" (sample)" if quick else "")
            + f", about {dead_in_sample * PROBE_TIMEOUT.total_seconds():.0f} s"
        )
        started = time.perf_counter()
        checks = await sequential_check(sample, port, path)
        sequential_measured = time.perf_counter() - started
        dead_times = [s for i, ok, s in checks if i in unreachable]
        ok_times = [s for i, ok, s in checks if i not in unreachable]
        wrong = [(i, ok) for i, ok, _ in checks if ok == (i in unreachable)]
        assert not wrong, f"sequential checker saw unexpected results: {wrong[:5]}"
        n_dead = len(INCIDENT_UNREACHABLE)
        n_ok = INCIDENT_VMS - n_dead
        # Measured over all VMs in a full run; over a sample, only a model of the round.
        model_total = statistics.mean(dead_times) * n_dead + statistics.mean(ok_times) * n_ok
        progress(
            f"  sequential checker: {sequential_measured:.1f} s measured"
            + (f"; model for {INCIDENT_VMS} VMs {model_total:.1f} s" if quick else "")
        )
    finally:
        await emu.stop()

    keeper_median = median(dead[KEEPER_CONCURRENCY])
    sequential: dict[str, Any] = {
        "timeout_seconds": PROBE_TIMEOUT.total_seconds(),
        "mode": "sample; total is a model" if quick else "measured, all VMs",
        "vms_checked": len(checks),
        "unreachable_checked": len(dead_times),
        "measured_seconds": round(sequential_measured, 2),
        "per_unreachable_vm_seconds": round(statistics.mean(dead_times), 3),
        "per_healthy_vm_ms": round(statistics.mean(ok_times) * 1000, 2),
    }
    if quick:
        sequential["model_total_seconds"] = round(model_total, 1)
        sequential["model"] = (
            f"{n_dead} x mean per unreachable VM + {n_ok} x mean per healthy VM, "
            f"from {len(checks)} VMs checked"
        )
        ratio_key = "model_ratio_sequential_over_keeper"
        total = model_total
    else:
        sequential["total_seconds"] = round(sequential_measured, 1)
        ratio_key = "ratio_sequential_over_keeper"
        total = sequential_measured
    return {
        "vms": INCIDENT_VMS,
        "unreachable": n_dead,
        "unreachable_indices": INCIDENT_UNREACHABLE,
        "probe_timeout_seconds": PROBE_TIMEOUT.total_seconds(),
        "keeper_default_concurrency": KEEPER_CONCURRENCY,
        "boot_seconds": round(boot_seconds, 1),
        "repetitions": {"with_unreachable": reps_dead, "all_healthy": reps_healthy},
        "keeper_with_unreachable": {
            str(c): {
                "median_seconds": round(median(v), 3),
                "runs": [round(x, 3) for x in v],
                "healthy": dead_healthy[c],
            }
            for c, v in dead.items()
        },
        "keeper_all_healthy": {
            str(c): {"median_seconds": round(median(v), 3), "runs": [round(x, 3) for x in v]}
            for c, v in clean.items()
        },
        "sequential": sequential,
        ratio_key: round(total / keeper_median, 1),
    }


# --------------------------------------------------------------------------- report


def table(headers: list[str], rows: list[list[Any]], right: set[int] | None = None) -> str:
    right = right if right is not None else set(range(1, len(headers)))
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)
        ).rstrip()

    return "\n".join(
        [line(headers), "  ".join("-" * w for w in widths), *[line(r) for r in cells[1:]]]
    )


def spread(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def render(figures: dict[str, Any]) -> str:
    meta = figures["meta"]
    out = [
        f"keeper TPU bootstrap benchmark - {meta['date']} - {meta['cores']} cores - "
        f"{'quick' if meta['quick'] else 'full'} run, {meta['seconds']:.0f} s",
        "",
    ]
    boot = figures.get("bootstrap")
    if boot:
        out += [
            "1. History events per bootstrap (reserved v4-32, time-skipping server, "
            "emulator clock following it, poll 30 s)",
            "   '3h59m' stands for 4 hours: one minute inside the 4h assign budget so that "
            "it is assigned.",
            table(
                [
                    "wait until assigned",
                    "runs",
                    "supervisor",
                    "child",
                    "total (median)",
                    "polls returned",
                    "outcome",
                ],
                [
                    [
                        r["case"],
                        r["runs"],
                        spread(r["supervisor_events"]),
                        spread(r["child_events"]),
                        f"{spread(r['total_events'])} ({r['total_events_median']:g})",
                        spread(r["observations"]),
                        "; ".join(r["outcomes"]),
                    ]
                    for r in boot["history"]
                ],
                right={1, 2, 3, 4, 5},
            ),
            "",
            "2. TPU API calls per hour of waiting (calls the emulator counted between the QR "
            "create and its assignment)",
            table(
                ["case", "poll", "hours", "QR reads/h", "all calls/h", "calls in wait"],
                [
                    [
                        r["case"],
                        f"{r['poll_seconds']:g}s",
                        f"{r['wait_hours']:.2f}",
                        f"{r['get_queued_resource_per_hour']:.1f}",
                        f"{r['all_calls_per_hour']:.1f}",
                        ", ".join(f"{m} {n}" for m, n in r["calls_in_wait"].items()),
                    ]
                    for r in boot["api_calls"]
                ],
                right={1, 2, 3, 4},
            ),
            f"   Marginal rate, (3h59m - 1h) / 2h59m: {boot['marginal_get_qr_per_hour']:.1f} "
            "QR reads/h (no start-up polls).",
        ]
        t = boot["throttled"]
        rows = []
        for label, b in (
            ("time-skipping server", t["time_skipping"]),
            ("dev server, poll 1 s, ceiling 10 s", t["dev_server"]),
        ):
            if b is None:
                rows.append([label, "(full run only)", "", "", "", ""])
                continue
            rows.append(
                [
                    label,
                    " ".join(map(str, b["gaps_before"])),
                    " ".join(map(str, b["gaps_throttled"])),
                    " ".join(map(str, b["gaps_after"])),
                    fmt_duration(b["throttled_seconds"]),
                    f"{b['calls_per_hour_throttled']:.1f}",
                ]
            )
        out += [
            f"   Throttled: the next {t['faults']} ListQueuedResources and GetQueuedResource calls "
            "answered "
            f"RESOURCE_EXHAUSTED, from {fmt_duration(t['injected_after_seconds'])} into a "
            "2h wait (poll 30 s). Seconds between polls:",
            table(
                ["server", "before", "while throttled", "after", "throttled", "calls/h"],
                rows,
                right={4, 5},
            ),
            *(
                [
                    f"   Dev server: faults from {DEV_THROTTLE_AFTER.total_seconds():g} s into "
                    "the wait. Model, not measured: "
                    f"{t['dev_server']['model']} gives "
                    + " ".join(map(str, t["dev_server"]["model_default_gaps_throttled_seconds"]))
                ]
                if t["dev_server"]
                else []
            ),
            f"   emulator reset() clears the call counts: {boot['reset_clears_calls']}",
            "",
        ]
    health = figures.get("health")
    if health:
        dead, clean, seq = (
            health["keeper_with_unreachable"],
            health["keeper_all_healthy"],
            health["sequential"],
        )
        rows = [
            [
                f"keeper HealthProber c={c}, timeout {health['probe_timeout_seconds']:g}s",
                f"{dead[str(c)]['median_seconds']:.2f}",
                f"{clean[str(c)]['median_seconds']:.2f}",
            ]
            for c in CONCURRENCIES
        ]
        seq_label = f"sequential GET, timeout {seq['timeout_seconds']:g}s"
        if "total_seconds" in seq:
            rows.append([f"{seq_label} (all VMs)", f"{seq['total_seconds']:.1f}", ""])
        else:
            model = f"{seq['model_total_seconds']:.1f}"
            rows.append([f"{seq_label} (MODEL, see below)", model, ""])
        out += [
            f"3. One health round over {health['vms']} VMs on loopback, {health['unreachable']} "
            "unreachable (accept, never answer); seconds, median of "
            f"{health['repetitions']['with_unreachable']} / "
            f"{health['repetitions']['all_healthy']} runs",
            table(["checker", f"{health['unreachable']} unreachable", "all healthy"], rows),
            f"   sequential: {seq['per_unreachable_vm_seconds']:.2f} s per unreachable VM, "
            f"{seq['per_healthy_vm_ms']:.1f} ms per healthy VM; {seq['vms_checked']} VMs "
            f"checked in {seq['measured_seconds']:.1f} s",
        ]
        if "total_seconds" in seq:
            out.append(
                f"   sequential / keeper (c={KEEPER_CONCURRENCY}, {health['unreachable']} "
                f"unreachable): {health['ratio_sequential_over_keeper']}x"
            )
        else:
            out += [
                f"   model, not measured: {seq['model']}",
                f"   model sequential / keeper (c={KEEPER_CONCURRENCY}): "
                f"{health['model_ratio_sequential_over_keeper']}x",
            ]
    return "\n".join(out)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    figures: dict[str, Any] = {
        "meta": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["python", "bench/tpu_bootstrap.py", *sys.argv[1:]]),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "temporalio": metadata.version("temporalio"),
            "quick": args.quick,
        }
    }
    if "bootstrap" in args.only:
        # The time-skipping cases cost seconds of real time, so --quick runs them all; only
        # the real-time confirmation on the dev server is left out.
        figures["bootstrap"] = await bootstrap_section(full=not args.quick)
    if "health" in args.only:
        figures["health"] = await health_section(args.quick)
    figures["meta"]["seconds"] = round(time.monotonic() - started, 1)
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="under a minute: sample the sequential checker"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--json-file", type=Path, help="also write the figures as JSON to this file"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="keep the log of failed activity attempts"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["bootstrap", "health"],
        help="run only this section (repeatable); default both",
    )
    args = parser.parse_args(argv)
    args.only = args.only or ["bootstrap", "health"]
    return args


def run() -> int:
    record = Run("tpu_bootstrap")
    args = parse_args()
    configure(args.verbose)
    if not args.verbose:
        # The throttled case fails activity attempts on purpose; each would log a traceback.
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    try:
        figures, out = run_for_figures(lambda: main(args))
    except Interrupted:
        progress("interrupted")
        return 130
    progress(f"raw results: {record.write(figures)}")
    if args.json_file is not None:
        args.json_file.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2) if args.json else render(figures), file=out)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(run())
