"""The job-watch family: one JobWatch per iris job an operator asks keeper to babysit.

`keeper job watch JOB` (or `temporal workflow start --type JobWatch`) starts it; the worker
runs the workflow and its activities, which read the iris controller and, only after an
operator approves, stop or relaunch the job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio.client import Client

from keeper.activities.watch.actions import WatchActions
from keeper.activities.watch.observe import WatchObserver
from keeper.activities.watch.policy import WatchPolicySource
from keeper.runtime import metrics as m
from keeper.runtime.settings import Settings
from keeper.runtime.watch.deps import WatchDeps, open_watch_deps
from keeper.workers.alerts import AlertedCounter, alert_activity
from keeper.workers.families.family import Family, ScheduleSpecOf
from keeper.workers.input_guard import InputHelp
from keeper.workflows.watch.job_watch import JobWatch

INPUT_HELP: dict[str, InputHelp] = {
    "JobWatch": InputHelp(
        note="Workflow id job-watch-<job id without its leading slash>; "
        "`keeper job watch JOB_ID` starts it with the search attributes set.",
        example={"job_id": "/alice/tokenize-fineweb", "requested_by": "alice"},
    ),
}


@asynccontextmanager
async def open_deps(settings: Settings) -> AsyncIterator[WatchDeps]:
    deps = open_watch_deps(settings.watch)
    try:
        yield deps
    finally:
        await deps.aclose()


def watch_activities(
    settings: Settings, client: Client, deps: WatchDeps
) -> list[Callable[..., Any]]:
    w = deps.settings
    timeout = w.call_timeout.total_seconds()
    observer = WatchObserver(
        deps.iris,
        call_timeout_s=timeout,
        cpu_sample_workers=w.cpu_sample_workers,
        log_lines=w.log_lines_per_check,
    )
    actions = WatchActions(deps.iris, call_timeout_s=timeout, launches=deps.launches)
    return [
        WatchPolicySource(w.policy()).policy,
        observer.observe,
        observer.probe,
        observer.await_scheduled,
        actions.stop,
        actions.prepare_relaunch,
        actions.relaunch,
        alert_activity(settings),
    ]


def watch_schedules(settings: Settings, task_queue: str) -> list[ScheduleSpecOf]:
    return []


WATCH = Family(
    name="watch",
    workflows=[JobWatch],
    input_help=INPUT_HELP,
    open_deps=open_deps,
    activities=watch_activities,
    schedules=watch_schedules,
    # A check is CPU work on the worker's event loop (13 reads, a log digest): past a few
    # dozen at once its workflow tasks starve (bench/watch_scale.py). Scale out instead.
    activity_slots=lambda settings: 32,
    cached_workflows=lambda settings: settings.worker.max_cached_workflows,
    # KeeperWatchStalled
    alerted_counters=[AlertedCounter(m.WATCH_VERDICTS, {"verdict": "stalled"}, [JobWatch])],
)
