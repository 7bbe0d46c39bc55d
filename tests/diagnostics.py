"""What a test prints when a run did not get where it should in time: enough to tell
whether the server, the worker or the workflow was behind."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle


async def where_it_is(handle: WorkflowHandle[Any, Any]) -> str:
    """A run's status, pending activities (attempt and last failure), pending workflow
    task and last events."""
    description = await handle.describe()
    raw = description.raw_description
    pending = [
        f"{a.activity_type.name} attempt {a.attempt} ({a.last_failure.message or 'no failure'})"
        for a in raw.pending_activities
    ]
    events = [EventType.Name(e.event_type) async for e in handle.fetch_history_events()]
    return (
        f"run {description.status.name if description.status else '?'}, "
        f"pending activities {pending}, pending task {raw.pending_workflow_task.state}, "
        f"last events {events[-8:]}"
    )


async def open_runs_since(client: Client, started_after: datetime, limit: int = 20) -> str:
    """Every run started after `started_after` that is still open, each as `where_it_is`
    tells it: what a test lists when a batch of runs has not closed in time."""
    stamp = started_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = []
    async for info in client.list_workflows(
        f'ExecutionStatus="Running" AND StartTime > "{stamp}"', limit=limit
    ):
        handle = client.get_workflow_handle(info.id, run_id=info.run_id)
        lines.append(f"{info.workflow_type} {info.id}: {await where_it_is(handle)}")
    return "\n".join(lines) or "no open runs"
