"""The reclaims of one (node, job) and which of them a command speaks of.

One holding can have had several reclaims: a controller restart reissues job ids, keeper's
memory may have been reset, an operator released one that came back. A command reports the
run it started or found for the holding now, never an older one that happens to share the
node and job id: `keeper reclaim status` shows the running one (the newest, when several
run), else the newest, and names the others; `keeper-dev demo reclaim` follows only a run that
did not exist before it leaked its job.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from temporalio.client import Client, WorkflowExecution

from keeper.cli.output import rfc3339
from keeper.cli.workflow_view import is_running, list_query, status_name
from keeper.domain.reclaim.models import RECLAIM_WORKFLOW_TYPE
from keeper.runtime.reclaim import search_attributes as sa

# Reclaims of one (node, job) a listing reads at most: far more than one holding ever has.
LIMIT = 200


def query_of(node: str | None, job_id: int | None, running: bool) -> str:
    """The reclaims of `node` and `job_id` (None: any), running ones only when asked."""
    return list_query(
        RECLAIM_WORKFLOW_TYPE, running, **{sa.NODE.name: node, sa.JOB_ID.name: job_id}
    )


async def reclaims_of(client: Client, node: str, job_id: int) -> list[WorkflowExecution]:
    """Every reclaim run of (node, job), current first (`current_first`). The running ones
    are read on their own as well, so no number of closed ones can hide them."""
    found: dict[tuple[str, str], WorkflowExecution] = {}
    for running in (True, False):
        async for wf in client.list_workflows(query_of(node, job_id, running), limit=LIMIT):
            found.setdefault((wf.id, wf.run_id), wf)
    return current_first(found.values())


def current_first(runs: Collection[WorkflowExecution] | Sequence[Any]) -> list[Any]:
    """Running runs before closed ones, each group newest first."""

    def key(wf: Any) -> tuple[bool, float]:
        return (not is_running(wf), -wf.start_time.timestamp())

    return sorted(runs, key=key)


def run_json(wf: Any) -> dict[str, Any]:
    """One run as `status --json` lists the others."""
    return {
        "workflow_id": wf.id,
        "run_id": wf.run_id,
        "status": status_name(wf),
        "started_at": rfc3339(wf.start_time),
    }
