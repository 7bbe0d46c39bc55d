"""Finding a job's watch in Temporal and reading it: its description, its `status` query,
and how a closed one ended. Shared by every `keeper job` command."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError, TerminatedError, TimeoutError

from keeper.cli.output import FAILED, OK, CommandFailed
from keeper.cli.temporal_ops import describe_or_none
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.models import STATUS_QUERY, WATCH_WORKFLOW_TYPE, WatchView, watch_id
from keeper.runtime.settings import Settings

# A query of a run no worker serves waits for one until the RPC deadline: bounded, so a
# status of a closed watch answers in seconds.
QUERY_TIMEOUT = timedelta(seconds=5)

# How a watch that closed ends a command that waited for it (docs/cli.md#keeper-job). An
# unwatch cancels the watch: that is an operator ending it on purpose, not a failure, and
# the job runs on either way.
CLOSED_EXIT: dict[WorkflowExecutionStatus, int] = {
    WorkflowExecutionStatus.COMPLETED: OK,
    WorkflowExecutionStatus.CANCELED: OK,
    WorkflowExecutionStatus.FAILED: FAILED,
    WorkflowExecutionStatus.TERMINATED: FAILED,
    WorkflowExecutionStatus.TIMED_OUT: FAILED,
}


def status_name(description: WorkflowExecutionDescription) -> str:
    return WorkflowExecutionStatus(description.status).name if description.status else "UNKNOWN"


def is_running(description: WorkflowExecutionDescription) -> bool:
    return description.status is WorkflowExecutionStatus.RUNNING


def ui_url(settings: Settings, workflow_id: str, run_id: str | None) -> str:
    return settings.temporal.workflow_url(workflow_id, run_id)


def no_watch(job_id: str) -> CommandFailed:
    return CommandFailed(
        f"no watch of {job_id}; start one with `keeper job watch {job_id}`",
        hint="`keeper job list --all` shows every watch keeper knows.",
        job_id=job_id,
        workflow_id=watch_id(job_id),
    )


@dataclass
class Watch:
    """A job's watch as Temporal describes it: its latest run."""

    job_id: str
    client: Client
    # The watch, whichever run is its latest when a call is made (a watch continues as new).
    handle: WorkflowHandle[Any, JobWatchResult]
    description: WorkflowExecutionDescription

    @property
    def run(self) -> WorkflowHandle[Any, JobWatchResult]:
        """The run described, and no other."""
        return self.client.get_workflow_handle(
            self.handle.id, run_id=self.description.run_id, result_type=JobWatchResult
        )

    @property
    def status(self) -> str:
        return status_name(self.description)

    @property
    def running(self) -> bool:
        return is_running(self.description)

    def fields(self, settings: Settings) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "workflow_id": self.handle.id,
            "run_id": self.description.run_id,
            "ui_url": ui_url(settings, self.handle.id, self.description.run_id),
            "status": self.status,
        }


async def find_watch(client: Client, job_id: str) -> Watch | None:
    """The latest run of the job's watch, None when there never was one."""
    handle = client.get_workflow_handle(watch_id(job_id), result_type=JobWatchResult)
    description = await describe_or_none(handle)
    if description is None:
        return None
    if description.workflow_type != WATCH_WORKFLOW_TYPE:
        raise CommandFailed(
            f"workflow {handle.id} is a {description.workflow_type}, not a "
            f"{WATCH_WORKFLOW_TYPE}; nothing was done",
            hint="Something else was started at this watch's id; remove it or watch from "
            "another namespace.",
            workflow_id=handle.id,
        )
    return Watch(job_id, client, handle, description)


async def must_find(client: Client, job_id: str) -> Watch:
    found = await find_watch(client, job_id)
    if found is None:
        raise no_watch(job_id)
    return found


async def query_view(handle: WorkflowHandle[Any, Any]) -> WatchView | None:
    """The watch's `status` query; None when no worker answers (closed, or restarting)."""
    try:
        return await handle.query(STATUS_QUERY, result_type=WatchView, rpc_timeout=QUERY_TIMEOUT)
    except Exception:  # a closed run without a worker, a worker restarting: no view now
        return None


async def ending(watch: Watch) -> tuple[JobWatchResult | None, str | None]:
    """How a closed watch ended: its result, or why there is none."""
    try:
        return await watch.run.result(follow_runs=False), None
    except WorkflowFailureError as err:
        cause = err.cause
        if isinstance(cause, CancelledError):
            return None, "the watch was cancelled (unwatched); the job itself was left running"
        if isinstance(cause, TerminatedError):
            return None, f"the watch was terminated: {cause.message or 'no reason given'}"
        if isinstance(cause, TimeoutError):
            return None, "the watch timed out"
        return None, str(cause or err)
