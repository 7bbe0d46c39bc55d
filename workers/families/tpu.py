"""The TPU slice family: bootstrap, its phase child, teardown and the sweeper."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from google.cloud import tpu_v2
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)

from keeper.activities.tpu.cloud import TpuActivities
from keeper.activities.tpu.health import HealthActivities, HealthProber
from keeper.activities.tpu.policy import PolicyActivities
from keeper.activities.tpu.sweeper import SweeperActivities
from keeper.domain.common.durations import format_duration
from keeper.domain.tpu.health_round import in_flight_bound
from keeper.domain.tpu.models import (
    CompensationPolicy,
    HealthPolicy,
    SweepPolicy,
    SweepRequest,
    TpuPolicy,
)
from keeper.domain.tpu.naming import SWEEPER_SCHEDULE_ID, SWEEPER_WORKFLOW_ID
from keeper.runtime import metrics as m
from keeper.runtime.open_files import raise_open_files_limit
from keeper.runtime.settings import Settings
from keeper.runtime.tpu.client import make_tpu_client
from keeper.workers.alerts import AlertedCounter, alert_activity
from keeper.workers.families.family import Family, ScheduleSpecOf
from keeper.workers.input_guard import InputHelp
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.bootstrap_run import TpuSliceBootstrapRun
from keeper.workflows.tpu.sweeper import TpuSweeper
from keeper.workflows.tpu.teardown import TpuSliceTeardown

_PLACE = {"project": "my-project", "zone": "us-central2-b"}
INPUT_HELP: dict[str, InputHelp] = {
    "TpuSliceBootstrap": InputHelp(
        example={
            "slice_name": "train-a",
            **_PLACE,
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-ubuntu2204-base",
            "capacity": "on-demand",
        }
    ),
    "TpuSliceBootstrapRun": InputHelp(
        note="TpuSliceBootstrap starts this phase workflow itself; start TpuSliceBootstrap."
    ),
    "TpuSliceTeardown": InputHelp(
        example={"slice_name": "train-a", **_PLACE, "reason": "job finished"}
    ),
    "TpuSweeper": InputHelp(example={**_PLACE, "dry_run": True}),
}


@dataclass
class TpuDeps:
    tpu: tpu_v2.TpuAsyncClient


@asynccontextmanager
async def open_tpu_deps(settings: Settings) -> AsyncIterator[TpuDeps]:
    yield TpuDeps(make_tpu_client(settings.tpu))


def health_prober(settings: Settings) -> HealthProber:
    """The worker's one prober: its probes in flight are what the open-file limit, raised
    to the hard limit first, leaves them (capped by health.concurrency when set)."""
    bound = in_flight_bound(raise_open_files_limit(), settings.health.concurrency)
    return HealthProber(concurrency=bound, timeout=settings.health.timeout)


def tpu_policy(settings: Settings, prober: HealthProber) -> TpuPolicy:
    """What the family's workflows read from these settings (`tpu.policy`)."""
    return TpuPolicy(
        compensation=CompensationPolicy(stuck_after=settings.bootstrap.compensation_stuck_after),
        sweep=SweepPolicy(
            delete_timeout=settings.sweeper.delete_timeout,
            max_concurrent_deletes=settings.sweeper.max_concurrent_deletes,
        ),
        health=HealthPolicy(probe_timeout=prober.timeout, in_flight=prober.concurrency),
    )


def tpu_activities(settings: Settings, client: Client, deps: TpuDeps) -> list[Callable[..., Any]]:
    tpu = TpuActivities(
        deps.tpu, call_timeout=settings.tpu.call_timeout, max_backoff=settings.bootstrap.max_backoff
    )
    prober = health_prober(settings)
    health = HealthActivities(prober)
    sweeper = SweeperActivities(tpu, client)
    return [
        tpu.create_slice,
        tpu.observe_slice,
        tpu.delete_slice,
        PolicyActivities(tpu_policy(settings, prober)).policy,
        health.check_health,
        sweeper.survey_owned_resources,
        alert_activity(settings),
    ]


def tpu_schedules(settings: Settings, task_queue: str) -> list[ScheduleSpecOf]:
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            TpuSweeper.run,
            SweepRequest(project=settings.tpu.project, zone=settings.tpu.zone),
            id=SWEEPER_WORKFLOW_ID,
            task_queue=task_queue,
            static_summary=f"sweep orphaned TPU resources in {settings.tpu.zone}",
        ),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=settings.sweeper.interval)]),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    every = f"every {format_duration(settings.sweeper.interval)}"
    return [ScheduleSpecOf(SWEEPER_SCHEDULE_ID, schedule, every)]


TPU = Family(
    name="tpu",
    workflows=[TpuSliceBootstrap, TpuSliceBootstrapRun, TpuSliceTeardown, TpuSweeper],
    input_help=INPUT_HELP,
    open_deps=open_tpu_deps,
    activities=tpu_activities,
    schedules=tpu_schedules,
    activity_slots=lambda settings: settings.worker.tpu_activity_slots,
    cached_workflows=lambda settings: settings.worker.tpu_max_cached_workflows,
    # KeeperCompensationStuck; both the supervisor and its phase child may count it.
    alerted_counters=[
        AlertedCounter(
            m.COMPENSATIONS,
            {"family": "tpu", "event": "stuck"},
            [TpuSliceBootstrap, TpuSliceBootstrapRun],
        )
    ],
)
