"""The keeper worker: one process that serves the workflow families it is given, each on
its own task queue with its own activity slots."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

from google.cloud import tpu_v2
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker

from keeper.domain.common.durations import format_duration
from keeper.runtime.health import Readiness, serve_health
from keeper.runtime.metrics import prometheus_runtime
from keeper.runtime.runners.deps import RunnerDeps, open_runner_deps
from keeper.runtime.settings import Settings
from keeper.runtime.temporal_client import connect
from keeper.runtime.tracing import setup_tracing, shutdown_tracing
from keeper.workers.alerts import publish_alerted_counters
from keeper.workers.families import FAMILIES, Family, ScheduleSpecOf
from keeper.workers.registry import (
    WORKFLOW_FAILURE_EXCEPTION_TYPES,
    WORKFLOW_INTERCEPTORS,
    WORKFLOWS,
    build_activities,
)
from keeper.workers.runner import workflow_runner
from keeper.workers.versioning import deployment_config, worker_version

log = logging.getLogger("keeper.worker")


def activity_slots(settings: Settings) -> int:
    """A worker that serves every family on one queue: the largest family's slots."""
    return max(family.activity_slots(settings) for family in FAMILIES.values())


def _worker(
    client: Client,
    settings: Settings,
    task_queue: str,
    workflows: Sequence[type],
    activities: list[Callable[..., Any]],
    slots: int,
    version: WorkerDeploymentVersion | None,
    cached: int,
) -> Worker:
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=workflows,
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
        deployment_config=deployment_config(version) if version else None,
        workflow_runner=workflow_runner(version is not None, client.data_converter),
        activities=activities,
        graceful_shutdown_timeout=settings.worker.graceful_shutdown,
        max_concurrent_activities=slots,
        max_cached_workflows=cached,
    )
    # Before any workflow counts: an alert rule's increase() misses a counter born at 1.
    publish_alerted_counters(
        client, task_queue, workflows, [c for f in FAMILIES.values() for c in f.alerted_counters]
    )
    return worker


def build_worker(
    client: Client,
    settings: Settings,
    tpu_client: tpu_v2.TpuAsyncClient,
    task_queue: str,
    runners: RunnerDeps | None = None,
    version: WorkerDeploymentVersion | None = None,
) -> Worker:
    """One worker for every family on one task queue (the tests and the benchmarks), of
    `version` of its Worker Deployment, or unversioned when it is None."""
    activities = build_activities(
        settings, client, tpu_client, runners or open_runner_deps(settings.runners)
    )
    return _worker(
        client,
        settings,
        task_queue,
        WORKFLOWS,
        activities,
        activity_slots(settings),
        version,
        settings.worker.max_cached_workflows,
    )


def served_families(settings: Settings) -> list[Family]:
    return [FAMILIES[name] for name in settings.worker.families]


async def ensure_schedules(client: Client, settings: Settings, family: Family) -> None:
    """Creates the family's schedules, or brings an existing one back to the settings.

    The worker owns its schedules: each start applies the configured interval (an operator's
    `sweeper.interval: 2m` takes effect at the next worker start, not at the next schedule
    delete), the overlap policy SKIP (one run at a time: `keeper tpu sweep` relies on it) and
    the family's task queue (a schedule made before the family had a queue of its own must
    not start runs on a queue nobody serves), and the workflow's input (a schedule made by an
    older keeper may carry an input this one refuses). A change made to these by hand is
    replaced and logged; the schedule's paused state and note are left as they are."""
    queue = family.task_queue(settings)
    for spec in family.schedules(settings, queue):
        try:
            await client.create_schedule(spec.schedule_id, spec.schedule)
            log.info("created schedule %s %s", spec.schedule_id, spec.describe)
            continue
        except ScheduleAlreadyRunningError:
            pass
        wanted = spec.schedule.action
        args = (
            await client.data_converter.encode(wanted.args)
            if isinstance(wanted, ScheduleActionStartWorkflow)
            else []
        )
        await client.get_schedule_handle(spec.schedule_id).update(_own(spec, queue, args))


def _own(
    spec: ScheduleSpecOf, queue: str, args: Sequence[Payload]
) -> Callable[[ScheduleUpdateInput], ScheduleUpdate | None]:
    def own(update: ScheduleUpdateInput) -> ScheduleUpdate | None:
        current = update.description.schedule
        wanted = spec.schedule
        changes: list[str] = []
        action = current.action
        if isinstance(action, ScheduleActionStartWorkflow) and action.task_queue != queue:
            changes.append(f"task queue {action.task_queue} -> {queue}")
            action.task_queue = queue
        if isinstance(action, ScheduleActionStartWorkflow) and [p.data for p in action.args] != [
            p.data for p in args
        ]:
            changes.append("workflow input reset")
            action.args = list(args)
        if current.spec != wanted.spec:
            changes.append(f"{_every(current.spec)} -> {_every(wanted.spec)}")
            current.spec = wanted.spec
        if current.policy.overlap != wanted.policy.overlap:
            changes.append(f"overlap {current.policy.overlap.name} -> {wanted.policy.overlap.name}")
            current.policy.overlap = wanted.policy.overlap
        if not changes:
            return None
        log.info("schedule %s: %s", spec.schedule_id, "; ".join(changes))
        return ScheduleUpdate(schedule=current)

    return own


def _every(spec: ScheduleSpec) -> str:
    """A schedule's timing as the log shows it; keeper's own schedules have one interval."""
    shown = [f"every {format_duration(i.every)}" for i in spec.intervals]
    shown += [f"{len(spec.calendars)} calendar spec(s)"] if spec.calendars else []
    return ", ".join(shown) or "no interval"


async def run_worker(settings: Settings) -> None:
    readiness = Readiness()
    async with serve_health(settings.worker.health_address, readiness):
        await _serve(settings, readiness)


async def _serve(settings: Settings, readiness: Readiness) -> None:
    interceptors = setup_tracing(settings.tracing)
    metrics = settings.worker.metrics_address
    client = await connect(
        settings.temporal, interceptors, prometheus_runtime(metrics) if metrics else None
    )
    readiness.client = client
    if metrics:
        log.info("serving metrics on http://%s/metrics", metrics)
    families = served_families(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    version = worker_version(settings.worker)
    async with AsyncExitStack() as stack:
        workers: list[Worker] = []
        for family in families:
            deps = await stack.enter_async_context(family.open_deps(settings))
            activities = family.activities(settings, client, deps)
            await ensure_schedules(client, settings, family)
            queue = family.task_queue(settings)
            slots = family.activity_slots(settings)
            cached = family.cached_workflows(settings)
            workers.append(
                _worker(
                    client, settings, queue, family.workflows, activities, slots, version, cached
                )
            )
            log.info(
                "serving family %s on task queue %s (%d activity slots, %d cached workflows)",
                family.name,
                queue,
                slots,
                cached,
            )
        log.info(
            "worker on %s (namespace %s, TPU endpoint %s) as %s",
            settings.temporal.address,
            settings.temporal.namespace,
            settings.tpu.endpoint.value,
            f"build {version.build_id} of worker deployment {version.deployment_name}"
            if version
            else "an unversioned worker",
        )
        for worker in workers:
            await stack.enter_async_context(worker)
        readiness.workers = workers
        await stop.wait()
        readiness.stopping = True
        log.info(
            "shutting down: finishing running activities (up to %s)",
            settings.worker.graceful_shutdown,
        )
        # Together, so the grace period is spent once, not once per family.
        await asyncio.gather(*(worker.shutdown() for worker in workers))
    shutdown_tracing()
    log.info("worker stopped")
