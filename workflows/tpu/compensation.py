"""The one way a keeper workflow releases a slice: force-delete, then confirm NotFound.

The supervisor, the phase child's cancel path, the teardown and the sweeper all delete
through here. A deletion runs in bounded windows (domain/common/compensation.py): each window is one
activity call whose retries stop at the window's schedule-to-close, so a deletion that keeps
failing comes back to the workflow with its last error, is reported as stuck past
`bootstrap.compensation_stuck_after`, and goes on in the next window. It is never
abandoned; only the sweeper, which must get on with its pass, bounds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState

with workflow.unsafe.imports_passed_through():
    from keeper.activities.tpu.cloud import TpuActivities
    from keeper.domain.common import compensation as windows
    from keeper.domain.common.alerts import Alert, AlertKind, make_alert
    from keeper.domain.tpu.models import (
        CompensationPolicy,
        CompensationProgress,
        DeleteSliceInput,
        DeletionReport,
        SliceRef,
    )
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.tpu import activity_options as opts

# Compensation in windows that report their last error; histories recorded before it made
# one unbounded activity call, and replay that.
WINDOWS_PATCH = "compensation-bounded-windows"
# Compensations past this patch alert an operator (keeper.alert) once they turn stuck.
ALERTS_STUCK = "alerts-tpu-stuck"

ProgressCallback = Callable[[CompensationProgress], None]


class DeletionUnfinished(Exception):
    """A bounded deletion (the sweeper's) did not finish in its time."""

    def __init__(self, last_error: str) -> None:
        super().__init__(last_error)
        self.last_error = last_error


async def delete_slice(
    ref: SliceRef,
    owner_workflow_id: str,
    owner_run_id: str | None,
    reason: str,
    *,
    on_progress: ProgressCallback | None = None,
    resume: CompensationProgress | None = None,
) -> DeletionReport:
    """Retried until the resources are confirmed gone; "already gone" counts as done.

    `on_progress` hears of every window that ran out (it may continue-as-new); `resume`
    carries on a compensation a previous run started.
    """
    inp = _input(ref, owner_workflow_id, owner_run_id, reason)
    if resume is None and not workflow.patched(WINDOWS_PATCH):
        return await _attempts(inp, None)
    policy = await _policy()
    margin = opts.COMPENSATION_RETRY.maximum_interval or windows.MIN_WINDOW
    progress = resume or windows.start(
        workflow.now(), policy, opts.COMPENSATION_FIRST_WINDOW, margin
    )
    while True:
        try:
            return await _attempts(inp, windows.schedule_to_close(progress, workflow.now()))
        except ActivityError as err:
            _reraise_cancellation(err)
            was_stuck = progress.stuck
            progress = windows.after_window(
                progress,
                workflow.now(),
                last_error(err),
                policy,
                opts.COMPENSATION_MAX_WINDOW,
                margin,
            )
            log = workflow.logger.warning if progress.stuck else workflow.logger.info
            log(
                "compensation of %s not finished after %d window(s): %s",
                ref.slice_name,
                progress.windows_ended,
                windows.describe_stuck(progress, workflow.now())
                if progress.stuck
                else progress.last_error,
            )
            if progress.stuck and not was_stuck and workflow.patched(ALERTS_STUCK):
                # Turning stuck happens once per compensation: a resumed run carries
                # `stuck_since`, so it never raises this again.
                raise_alert(_stuck_alert(ref, owner_workflow_id, progress))
            if on_progress is not None:
                on_progress(progress)
            if err.retry_state is not RetryState.TIMEOUT:
                # Ended before its window ran out (not retryable): pause as a retry would,
                # so the next window does not start at once.
                await workflow.sleep(
                    opts.COMPENSATION_RETRY.maximum_interval or opts.COMPENSATION_FIRST_WINDOW,
                    summary=f"compensate: pause before retrying {ref.slice_name}",
                )


async def delete_slice_within(
    ref: SliceRef,
    owner_workflow_id: str,
    owner_run_id: str | None,
    reason: str,
    budget: timedelta,
) -> DeletionReport:
    """One window only: raises DeletionUnfinished with the last error when it runs out."""
    try:
        return await _attempts(_input(ref, owner_workflow_id, owner_run_id, reason), budget)
    except ActivityError as err:
        _reraise_cancellation(err)
        raise DeletionUnfinished(last_error(err)) from None


def _stuck_alert(ref: SliceRef, owner: str, progress: CompensationProgress) -> Alert:
    return make_alert(
        AlertKind.COMPENSATION_STUCK,
        owner,
        f"compensation-{progress.started_at.isoformat()}",
        f"deleting {ref.slice_name} in {ref.zone}",
        [windows.describe_stuck(progress, workflow.now()), f"project: {ref.project}"],
    )


def _input(
    ref: SliceRef, owner_workflow_id: str, owner_run_id: str | None, reason: str
) -> DeleteSliceInput:
    return DeleteSliceInput(
        slice=ref, owner_workflow_id=owner_workflow_id, owner_run_id=owner_run_id, reason=reason
    )


async def _attempts(inp: DeleteSliceInput, window: timedelta | None) -> DeletionReport:
    ref = inp.slice
    attempt = opts.COMPENSATION_START_TO_CLOSE
    return await workflow.execute_activity_method(
        TpuActivities.delete_slice,
        inp,
        start_to_close_timeout=attempt if window is None else min(attempt, window),
        schedule_to_close_timeout=window,
        heartbeat_timeout=opts.COMPENSATION_HEARTBEAT,
        retry_policy=opts.COMPENSATION_RETRY,
        summary=f"compensate: force-delete {ref.slice_name} ({inp.reason}) and confirm NotFound",
    )


async def _policy() -> CompensationPolicy:
    return await workflow.execute_local_activity_method(
        TpuActivities.compensation_policy, start_to_close_timeout=opts.POLICY_TIMEOUT
    )


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


def _reraise_cancellation(err: ActivityError) -> None:
    if isinstance(err.cause, CancelledError):
        raise asyncio.CancelledError(str(err.cause)) from None


def describe(report: DeletionReport) -> str:
    parts = []
    if report.deleted:
        parts.append("deleted " + ", ".join(n.rsplit("/", 1)[-1] for n in report.deleted))
    if report.already_gone and not report.deleted:
        parts.append("confirmed deleted (already gone)")
    if report.not_ours:
        parts.append("left alone (owned by another run): " + ", ".join(report.not_ours))
    return "; ".join(parts) or "nothing to delete"
