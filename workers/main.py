"""The keeper worker: one process that serves every workflow and activity."""

from __future__ import annotations

import asyncio
import logging
import signal

from google.cloud import tpu_v2
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.common import WorkerDeploymentVersion
from temporalio.worker import Worker

from domain.bootstrap_models import SweepRequest
from domain.naming import SWEEPER_SCHEDULE_ID, SWEEPER_WORKFLOW_ID
from domain.reconcile import ReconcileRequest
from domain.runner_models import RECONCILER_SCHEDULE_ID, RECONCILER_WORKFLOW_ID
from runtime.runner_deps import RunnerDeps, open_runner_deps
from runtime.settings import Settings
from runtime.temporal_client import connect
from runtime.tpu_client import make_tpu_client
from runtime.tracing import setup_tracing, shutdown_tracing
from workers.registry import (
    WORKFLOW_FAILURE_EXCEPTION_TYPES,
    WORKFLOW_INTERCEPTORS,
    WORKFLOWS,
    build_activities,
)
from workers.versioning import deployment_config, worker_version, workflow_runner
from workflows.runner_reconciler import RunnerReconciler
from workflows.tpu_sweeper import TpuSweeper

log = logging.getLogger("keeper.worker")


def activity_slots(settings: Settings) -> int:
    # Each in-flight runner deletion may hold a slot for its provider process.
    return max(100, settings.runners.max_concurrent_deletions)


def build_worker(
    client: Client,
    settings: Settings,
    tpu_client: tpu_v2.TpuAsyncClient,
    task_queue: str,
    runners: RunnerDeps | None = None,
    version: WorkerDeploymentVersion | None = None,
) -> Worker:
    """A worker of `version` of its Worker Deployment, or unversioned when it is None."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
        deployment_config=deployment_config(version) if version else None,
        workflow_runner=workflow_runner(version),
        activities=build_activities(
            settings, client, tpu_client, runners or open_runner_deps(settings.runners)
        ),
        graceful_shutdown_timeout=settings.worker.graceful_shutdown,
        max_concurrent_activities=activity_slots(settings),
        max_cached_workflows=settings.worker.max_cached_workflows,
    )


async def ensure_sweeper_schedule(client: Client, settings: Settings) -> None:
    """Creates the sweeper's schedule once; an existing one is left as the operator set it."""
    try:
        await client.create_schedule(
            SWEEPER_SCHEDULE_ID,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    TpuSweeper.run,
                    SweepRequest(project=settings.tpu.project, zone=settings.tpu.zone),
                    id=SWEEPER_WORKFLOW_ID,
                    task_queue=settings.temporal.task_queue,
                    static_summary=f"sweep orphaned TPU resources in {settings.tpu.zone}",
                ),
                spec=ScheduleSpec(
                    intervals=[ScheduleIntervalSpec(every=settings.sweeper.interval)]
                ),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            ),
        )
        log.info("created schedule %s every %s", SWEEPER_SCHEDULE_ID, settings.sweeper.interval)
    except ScheduleAlreadyRunningError:
        pass


def reconcile_request(settings: Settings) -> ReconcileRequest:
    runners = settings.runners
    return ReconcileRequest(
        scopes=runners.github.scopes,
        managed_label=runners.github.managed_label,
        task_queue=settings.temporal.task_queue,
        provider_timeout_s=min(120.0, runners.deletion.provider_timeout.total_seconds()),
        policy=runners.deletion,
        tombstone_retention_s=runners.tombstone_retention.total_seconds(),
    )


async def ensure_reconciler_schedule(client: Client, settings: Settings) -> None:
    """Creates the runner reconciler's schedule once, like the sweeper's."""
    try:
        await client.create_schedule(
            RECONCILER_SCHEDULE_ID,
            Schedule(
                action=ScheduleActionStartWorkflow(
                    RunnerReconciler.run,
                    reconcile_request(settings),
                    id=RECONCILER_WORKFLOW_ID,
                    task_queue=settings.temporal.task_queue,
                    static_summary="reconcile runner records, GitHub registrations and instances",
                ),
                spec=ScheduleSpec(
                    intervals=[ScheduleIntervalSpec(every=settings.runners.reconcile_interval)]
                ),
                policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            ),
        )
        log.info(
            "created schedule %s every %s",
            RECONCILER_SCHEDULE_ID,
            settings.runners.reconcile_interval,
        )
    except ScheduleAlreadyRunningError:
        pass


async def run_worker(settings: Settings) -> None:
    interceptors = setup_tracing(settings.tracing)
    client = await connect(settings.temporal, interceptors)
    tpu_client = make_tpu_client(settings.tpu)
    await ensure_sweeper_schedule(client, settings)
    await ensure_reconciler_schedule(client, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    version = worker_version(settings.worker)
    worker = build_worker(
        client, settings, tpu_client, settings.temporal.task_queue, version=version
    )
    log.info(
        "worker polling %s on %s (namespace %s, TPU endpoint %s) as %s",
        settings.temporal.task_queue,
        settings.temporal.address,
        settings.temporal.namespace,
        settings.tpu.endpoint.value,
        f"build {version.build_id} of worker deployment {version.deployment_name}"
        if version
        else "an unversioned worker",
    )
    async with worker:
        await stop.wait()
        log.info(
            "shutting down: finishing running activities (up to %s)",
            settings.worker.graceful_shutdown,
        )
    shutdown_tracing()
    log.info("worker stopped")
