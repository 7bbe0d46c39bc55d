"""How every actor asks for a runner's deletion: the `request` update, starting the runner's
deletion workflow or joining it if it runs (update-with-start). Nobody else writes
deletion-lane statuses.

| the deletion | what a request does |
|---|---|
| not running (never, or finished) | starts a run (which finds a tombstone, if any, and ends) |
| running | joins it, recorded there; a force changes how it goes on |
| running, record tombstoned | refused: the deletion has finished (a cleanup may still run) |
| two actors asking at once | one run: the server starts it once, both requests join it |
| a request it cannot read | refused, naming the field |

Either way the caller gets an answer (`RequestAnswer`: joined or started, and the deletion's
view) or a `RequestRefused` saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

from keeper.domain.runners.deletion_state import RunnerDeletionInput
from keeper.domain.runners.deletion_view import RequestAnswer, summary
from keeper.domain.runners.models import (
    DELETION_WORKFLOW_TYPE,
    REQUEST_UPDATE,
    DeletionRequest,
    DeletionResult,
    deletion_workflow_id,
)
from keeper.runtime.runners import search_attributes as sa

# How long a request waits for a worker to take it; past this the caller is told.
ANSWER_WITHIN = timedelta(seconds=60)


class RequestRefused(Exception):
    """The deletion refused the request; the message says why."""


class RequestNotAnswered(Exception):
    """No worker took the request in time."""


@dataclass(frozen=True)
class Requested:
    handle: WorkflowHandle[Any, DeletionResult]
    answer: RequestAnswer


async def request_deletion(
    client: Client,
    runner: str,
    request: DeletionRequest,
    *,
    task_queue: str,
    within: timedelta = ANSWER_WITHIN,
) -> Requested:
    """Update-with-start under the USE_EXISTING conflict policy: concurrent requests are one
    deletion, each recorded in it and answered; a request after a finished deletion starts a
    run that finds the tombstone and ends at once. Raises RequestRefused with the deletion's
    reason, or RequestNotAnswered when no worker took the request within `within`."""
    start = WithStartWorkflowOperation(
        DELETION_WORKFLOW_TYPE,
        # The request travels as the update, so the start carries none of its own.
        RunnerDeletionInput(runner=runner, request=None),
        id=deletion_workflow_id(runner),
        task_queue=task_queue,
        result_type=DeletionResult,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        search_attributes=sa.for_runner(runner),
        static_summary=summary(runner, None, request.force),
    )
    try:
        answer = await asyncio.wait_for(
            client.execute_update_with_start_workflow(
                REQUEST_UPDATE,
                request,
                start_workflow_operation=start,
                result_type=RequestAnswer,
            ),
            within.total_seconds(),
        )
    except WorkflowUpdateFailedError as err:
        raise RequestRefused(_reason(err)) from None
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        with contextlib.suppress(BaseException):
            await start.workflow_handle()  # retrieved, so its error is not reported unseen
        raise RequestNotAnswered(
            f"no worker took the deletion request for runner {runner} within "
            f"{within.total_seconds():g}s: is a worker serving the runners family on "
            f"{task_queue}? Ask again once one runs."
        ) from None
    return Requested(await start.workflow_handle(), answer)


def _reason(err: WorkflowUpdateFailedError) -> str:
    """The refusal in the deletion's own words: the validator's ValueError, or the field a
    request that does not decode got wrong, without the exception's type in front."""
    cause = err.cause
    if not isinstance(cause, ApplicationError):
        return str(cause or err)
    return cause.message.removeprefix(f"{cause.type}: ") if cause.type else cause.message
