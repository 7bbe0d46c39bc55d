"""The job-reclaim family: one JobReclaim per stale holding an agent reports.

Its workflows are started by the intake behind the heartbeat tap (`keeper reclaim tap`),
which runs as a process of its own so that agents keep reaching their controller while
workers restart; the worker only runs the workflows and their activities.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import Client

from keeper.activities.reclaim.reclaim import ReclaimActivities
from keeper.runtime import metrics as m
from keeper.runtime.reclaim.deps import ReclaimDeps, open_reclaim_deps
from keeper.runtime.settings import Settings
from keeper.workers.alerts import AlertedCounter, alert_activity
from keeper.workers.families.family import Family, ScheduleSpecOf
from keeper.workers.input_guard import InputHelp
from keeper.workflows.reclaim.job_reclaim import JobReclaim

INPUT_HELP: dict[str, InputHelp] = {
    "JobReclaim": InputHelp(
        note="The reclaim intake starts it (`keeper reclaim tap`, `keeper reclaim report`); "
        "the workflow reads the controller again before it acts.",
        example={
            "holding": {
                "node": "gpu-node-07",
                "job_id": 1234,
                "epoch": 1,
                "first_seen": "2026-12-01T09:00:00Z",
            },
            "first": {
                "verdict": "reclaim",
                "reason": "terminal",
                "detail": "job 1234 ended 1h ago (COMPLETED)",
            },
        },
    ),
}


@asynccontextmanager
async def open_deps(settings: Settings) -> AsyncIterator[ReclaimDeps]:
    deps = open_reclaim_deps(settings.reclaim)
    try:
        yield deps
    finally:
        await deps.aclose()


def reclaim_activities(
    settings: Settings, client: Client, deps: ReclaimDeps
) -> list[Callable[..., Any]]:
    acts = ReclaimActivities(deps.settings, deps.controller, deps.agents, deps.memory)
    return [
        acts.policy,
        acts.assess,
        acts.cancel,
        acts.drain,
        acts.undrain,
        acts.close,
        alert_activity(settings),
    ]


def reclaim_schedules(settings: Settings, task_queue: str) -> list[ScheduleSpecOf]:
    return []


RECLAIM = Family(
    name="reclaim",
    workflows=[JobReclaim],
    input_help=INPUT_HELP,
    open_deps=open_deps,
    activities=reclaim_activities,
    schedules=reclaim_schedules,
    activity_slots=lambda settings: 100,
    cached_workflows=lambda settings: settings.worker.max_cached_workflows,
    # KeeperReclaimDrainedNode
    alerted_counters=[AlertedCounter(m.DRAINED_NODES, {}, [JobReclaim])],
)
