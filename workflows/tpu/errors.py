"""What the TPU workflows make of the errors Temporal hands them, and the failure types
they close with (callers match on these names)."""

from __future__ import annotations

import asyncio

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutError,
)

with workflow.unsafe.imports_passed_through():
    from keeper.activities.tpu.cloud import SLICE_NAME_TAKEN
    from keeper.domain.tpu.failures import SeenRound
    from keeper.domain.tpu.models import BootstrapFailure, BootstrapRunInput, HealthReport
    from keeper.domain.tpu.naming import (
        bootstrap_run_workflow_id,
        bootstrap_workflow_id,
        wrong_id_message,
    )
    from keeper.domain.tpu.phases import Phase

FAILURE_TYPE = "SliceBootstrapFailed"
WRONG_ID_TYPE = "NotCanonicalWorkflowId"
NOT_A_CHILD_TYPE = "NotStartedByTpuSliceBootstrap"
# How a continued phase child closes when nobody waits for it (its supervisor was lost).
CANCELLED_TYPE = "BootstrapCancelled"
# What a signal to a closed or missing workflow fails with (sdk-core's failure type).
SUPERVISOR_GONE = "ExternalWorkflowExecutionNotFound"


def require_id(workflow_type: str, expected: str) -> None:
    """Slice workflows refuse ids keeper could not find them by, before creating anything."""
    actual = workflow.info().workflow_id
    if actual != expected:
        raise ApplicationError(
            wrong_id_message(workflow_type, actual, expected),
            type=WRONG_ID_TYPE,
            non_retryable=True,
        )


def require_supervisor(inp: BootstrapRunInput) -> None:
    """The phase child runs only under its slice's supervisor, which compensates for it."""
    slice_name = inp.request.slice_name
    require_id("TpuSliceBootstrapRun", bootstrap_run_workflow_id(slice_name))
    supervisor = bootstrap_workflow_id(slice_name)
    parent = workflow.info().parent
    if (
        parent is None
        or parent.workflow_id != supervisor
        or inp.parent_workflow_id != supervisor
        or inp.owner.workflow_id != supervisor
        or inp.owner.run_id != parent.run_id
    ):
        started_by = f"workflow {parent.workflow_id}" if parent else "no parent workflow"
        raise ApplicationError(
            f"TpuSliceBootstrapRun runs only as the child of TpuSliceBootstrap {supervisor}, "
            f"which deletes the slice if the phases fail; it was started by {started_by}. "
            f"Nothing was created: start TpuSliceBootstrap with --workflow-id {supervisor}",
            type=NOT_A_CHILD_TYPE,
            non_retryable=True,
        )


def reraise_cancellation(err: ActivityError) -> None:
    """An activity of ours is only ever cancelled because its workflow was."""
    if isinstance(err.cause, CancelledError):
        raise asyncio.CancelledError(str(err.cause)) from None


def cause_text(err: ActivityError) -> str:
    cause = err.cause
    return str(cause) if cause is not None else str(err)


def last_error(err: ActivityError) -> str:
    """The last attempt's error: the cause of a window that ran out, or of its timeout."""
    cause: BaseException | None = err.cause
    seen: BaseException | None = None
    while cause is not None:
        seen = cause
        if isinstance(cause, ApplicationError):
            return cause.message
        cause = cause.__cause__
    return str(seen or err)


def name_taken(err: ActivityError) -> bool:
    """The create found the name held by another run's resource."""
    cause = err.cause
    return isinstance(cause, ApplicationError) and cause.type == SLICE_NAME_TAKEN


def last_health_report(err: ActivityError) -> SeenRound | None:
    """The last round a failed health call saw, if it tells: a retried attempt that saw no
    progress fails with its report (the first few failing VMs), and a round the server cut
    short (a timeout) left its last heartbeat, the round so far."""
    cause: BaseException | None = err.cause
    while cause is not None:
        if isinstance(cause, TimeoutError) and cause.last_heartbeat_details:
            report = _report(cause.last_heartbeat_details[0])
            if report is not None:
                return SeenRound(report, "cut short")
        if isinstance(cause, ApplicationError) and cause.details:
            report = _report(cause.details[0])
            if report is not None:
                return SeenRound(report, "finished")
        cause = cause.__cause__
    return None


def _report(detail: object) -> HealthReport | None:
    try:
        return HealthReport.model_validate(detail)
    except ValidationError:
        return None


def child_failure(err: ChildWorkflowError, phase: Phase) -> BootstrapFailure:
    """Why the phase child did not complete: its own failure when it reported one, else
    how Temporal ended it, during `phase`.

    | the child                          | kind       |
    |------------------------------------|------------|
    | failed, reporting its failure      | its own    |
    | was terminated                     | terminated |
    | timed out                          | timeout    |
    | was cancelled                      | cancelled  |
    | failed otherwise                   | error      |
    """
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == FAILURE_TYPE and cause.details:
        try:
            return BootstrapFailure.model_validate(cause.details[0])
        except ValidationError:
            pass
    if isinstance(cause, TerminatedError):
        return BootstrapFailure(
            phase=phase, kind="terminated", message=f"phase workflow terminated during {phase}"
        )
    if isinstance(cause, TimeoutError):
        return BootstrapFailure(
            phase=phase, kind="timeout", message=f"phase workflow timed out during {phase}"
        )
    if isinstance(cause, CancelledError):
        return BootstrapFailure(
            phase=phase, kind="cancelled", message=f"bootstrap cancelled during {phase}"
        )
    return BootstrapFailure(phase=phase, kind="error", message=f"{phase}: {cause or err}")
