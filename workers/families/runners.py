"""The runner family: a runner's deletion lane and the reconciler."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
)

from keeper.activities.runners.deletion import (
    GitHubActivities,
    ProviderActivities,
    RunnerStoreActivities,
)
from keeper.activities.runners.policy import DeletionPolicySource
from keeper.activities.runners.reconciler import ReconcilerActivities
from keeper.domain.common.durations import format_duration
from keeper.domain.runners.models import RECONCILER_SCHEDULE_ID, RECONCILER_WORKFLOW_ID
from keeper.domain.runners.reconcile import ReconcileRequest
from keeper.runtime import metrics as m
from keeper.runtime.runners.deps import RunnerDeps, open_runner_deps
from keeper.runtime.settings import Settings
from keeper.workers.alerts import AlertedCounter, alert_activity
from keeper.workers.families.family import Family, ScheduleSpecOf
from keeper.workers.input_guard import InputHelp
from keeper.workflows.runners.deletion import RunnerDeletion
from keeper.workflows.runners.reconciler import RunnerReconciler

INPUT_HELP: dict[str, InputHelp] = {
    "RunnerDeletion": InputHelp(example={"runner": "r-1"}),
    "RunnerReconciler": InputHelp(
        note="The runner-reconciler schedule starts it with the worker's settings.",
        example={"scopes": ["org:my-org"]},
    ),
}


@asynccontextmanager
async def open_deps(settings: Settings) -> AsyncIterator[RunnerDeps]:
    deps = open_runner_deps(settings.runners)
    try:
        yield deps
    finally:
        await deps.aclose()


def runner_activities(
    settings: Settings, client: Client, deps: RunnerDeps
) -> list[Callable[..., Any]]:
    store = RunnerStoreActivities(deps.store)
    github = GitHubActivities(deps.github, deps.github_token_source)
    provider = ProviderActivities(deps.provider, deps.leases)
    reconciler = ReconcilerActivities(deps.store, deps.github, deps.provider, client, deps.leases)
    return [
        DeletionPolicySource(settings.runners.deletion).policy,
        store.advance_lane,
        store.finish_deleted,
        store.record_leak,
        github.deregister,
        provider.provider_delete,
        reconciler.reconcile_pass,
        alert_activity(settings),
    ]


def reconcile_request(settings: Settings, task_queue: str) -> ReconcileRequest:
    runners = settings.runners
    return ReconcileRequest(
        scopes=runners.github.scopes,
        managed_label=runners.github.managed_label,
        task_queue=task_queue,
        provider_timeout_s=min(120.0, runners.deletion.provider_timeout.total_seconds()),
        tombstone_retention_s=runners.tombstone_retention.total_seconds(),
    )


def runner_schedules(settings: Settings, task_queue: str) -> list[ScheduleSpecOf]:
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(
            RunnerReconciler.run,
            reconcile_request(settings, task_queue),
            id=RECONCILER_WORKFLOW_ID,
            task_queue=task_queue,
            static_summary="reconcile runner records, GitHub registrations and instances",
        ),
        spec=ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=settings.runners.reconcile_interval)]
        ),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )
    return [
        ScheduleSpecOf(
            RECONCILER_SCHEDULE_ID,
            schedule,
            f"every {format_duration(settings.runners.reconcile_interval)}",
        )
    ]


RUNNERS = Family(
    name="runners",
    workflows=[RunnerDeletion, RunnerReconciler],
    input_help=INPUT_HELP,
    open_deps=open_deps,
    activities=runner_activities,
    schedules=runner_schedules,
    # Each in-flight runner deletion may hold a slot for its provider process.
    activity_slots=lambda settings: max(100, settings.runners.max_concurrent_deletions),
    cached_workflows=lambda settings: settings.worker.max_cached_workflows,
    # KeeperRunnerDeletionEscalated
    alerted_counters=[AlertedCounter(m.RUNNER_ESCALATIONS, {}, [RunnerDeletion])],
)
