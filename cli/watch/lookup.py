"""Finding a job's watch in Temporal and reading it: its description, its `status` query,
and how a closed one ended. Shared by every `keeper job` command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)

from keeper.cli.output import FAILED, OK, CommandFailed
from keeper.cli.workflow_view import Note, describe, describe_as, is_running, patiently, query
from keeper.cli.workflow_view import ending as ending_of
from keeper.cli.workflow_view import status_name as _status_name
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.models import STATUS_QUERY, WATCH_WORKFLOW_TYPE, WatchView, watch_id
from keeper.runtime.settings import Settings

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
UNWATCHED = "the watch was cancelled (unwatched); the job itself was left running"


def status_name(execution: Any) -> str:
    return _status_name(execution) or "UNKNOWN"


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
            "ui_url": settings.temporal.workflow_url(self.handle.id, self.description.run_id),
            "status": self.status,
        }


async def find_watch(client: Client, job_id: str) -> Watch | None:
    """The latest run of the job's watch, None when there never was one."""
    handle = client.get_workflow_handle(watch_id(job_id), result_type=JobWatchResult)
    description = await describe_as(
        handle, WATCH_WORKFLOW_TYPE, name_hint=f"Check the job id {job_id!r}"
    )
    if description is None:
        return None
    return Watch(job_id, client, handle, description)


async def must_find(client: Client, job_id: str) -> Watch:
    found = await find_watch(client, job_id)
    if found is None:
        raise CommandFailed(
            f"no watch of {job_id}; start one with `keeper job watch {job_id}`",
            hint="`keeper job list --all` shows every watch keeper knows.",
            job_id=job_id,
            workflow_id=watch_id(job_id),
        )
    return found


async def reread(watch: Watch, note: Note) -> Watch:
    """The watch as Temporal describes it now (its last run), waiting through a lost server."""
    description = await patiently(lambda: describe(watch.handle), note)
    return Watch(watch.job_id, watch.client, watch.handle, description or watch.description)


async def query_view(handle: WorkflowHandle[Any, Any]) -> WatchView | None:
    """The watch's `status` query; None when no worker answers (closed, or restarting)."""
    return await query(handle, STATUS_QUERY, WatchView)


async def ending(watch: Watch) -> tuple[JobWatchResult | None, str | None]:
    """How a closed watch ended: its result, or why there is none."""
    ended = await ending_of(watch.run)
    if ended.status == "CANCELED":
        return None, UNWATCHED
    return ended.result, ended.words("watch")
