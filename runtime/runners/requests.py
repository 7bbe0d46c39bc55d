"""How every actor asks for a runner's deletion: start the runner's deletion workflow, or
join it if it runs. Nobody else writes deletion-lane statuses."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from keeper.domain.runners.deletion_view import summary
from keeper.domain.runners.models import (
    DELETION_WORKFLOW_TYPE,
    REQUEST_SIGNAL,
    DeletionPolicy,
    DeletionRequest,
    DeletionResult,
    RunnerDeletionInput,
    deletion_workflow_id,
)
from keeper.runtime.runners import search_attributes as sa


async def request_deletion(
    client: Client,
    runner: str,
    request: DeletionRequest,
    *,
    task_queue: str,
    policy: DeletionPolicy | None = None,
) -> WorkflowHandle[Any, DeletionResult]:
    """Signal-with-start under the USE_EXISTING conflict policy: concurrent requests are
    one deletion, each recorded in it; a request after a finished deletion starts a run
    that finds the tombstone and ends at once."""
    inp = RunnerDeletionInput(runner=runner, request=None, policy=policy or DeletionPolicy())
    return await client.start_workflow(
        DELETION_WORKFLOW_TYPE,
        inp,
        result_type=DeletionResult,
        id=deletion_workflow_id(runner),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        start_signal=REQUEST_SIGNAL,
        start_signal_args=[request],
        search_attributes=sa.for_runner(runner),
        static_summary=summary(runner, None, request.force),
    )
