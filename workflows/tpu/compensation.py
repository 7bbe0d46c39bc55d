"""The one way a keeper workflow releases a slice: force-delete, then confirm NotFound.

The supervisor, the phase child's cancel path, the teardown and the sweeper all delete
through here. A deletion runs in bounded windows (domain/common/compensation.py): each
window is one activity call whose retries stop at the window's schedule-to-close, so a
deletion that keeps failing comes back to the workflow with its last error, is reported as
stuck past `bootstrap.compensation_stuck_after` (and alerts an operator, once), and goes on
in the next window. It is never abandoned; only the sweeper, which must get on with its
pass, bounds it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, RetryState

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
    from keeper.workflows.common.rollover import handlers_finished, history_is_long
    from keeper.workflows.tpu import activity_options as opts
    from keeper.workflows.tpu.errors import last_error, reraise_cancellation

# docs/operations.md, the patch ledger.
STUCK_THRESHOLD_AT_RESUME = "tpu-stuck-threshold-at-resume"

# Hears of every window that ran out, and of a carried compensation this run's settings
# turn stuck; it may continue the workflow as new.
ProgressCallback = Callable[[CompensationProgress], Awaitable[None]]


class DeletionUnfinished(Exception):
    """A bounded deletion (the sweeper's) did not finish in its time."""

    def __init__(self, last_error: str) -> None:
        super().__init__(last_error)
        self.last_error = last_error


async def delete_slice(
    inp: DeleteSliceInput,
    policy: CompensationPolicy,
    on_progress: ProgressCallback,
    resume: CompensationProgress | None = None,
) -> DeletionReport:
    """Retried until the resources are confirmed gone; "already gone" counts as done.
    `resume` carries on a compensation a previous run started."""
    ref = inp.slice
    margin = opts.COMPENSATION_RETRY.maximum_interval or windows.MIN_WINDOW
    if resume is None:
        progress = windows.start(workflow.now(), policy, opts.COMPENSATION_FIRST_WINDOW, margin)
    else:
        progress = await _follow_this_runs_policy(inp, resume, policy, on_progress, margin)
    while True:
        try:
            return await _attempts(inp, windows.schedule_to_close(progress, workflow.now()))
        except ActivityError as err:
            reraise_cancellation(err)
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
            if progress.stuck and not was_stuck:
                # Turning stuck happens once per compensation: a continued run carries
                # `stuck_since`, so it never raises this again.
                raise_alert(_stuck_alert(ref, inp.owner_workflow_id, progress))
            await on_progress(progress)
            if err.retry_state is not RetryState.TIMEOUT:
                # Ended before its window ran out (not retryable): pause as a retry would,
                # so the next window does not start at once.
                await workflow.sleep(
                    opts.COMPENSATION_RETRY.maximum_interval or opts.COMPENSATION_FIRST_WINDOW,
                    summary=f"compensate: pause before retrying {ref.slice_name}",
                )


async def _follow_this_runs_policy(
    inp: DeleteSliceInput,
    carried: CompensationProgress,
    policy: CompensationPolicy,
    on_progress: ProgressCallback,
    margin: timedelta,
) -> CompensationProgress:
    """A settings change reaches a compensation at its next run: a stuck threshold lowered
    past what the compensation has taken turns it stuck (and alerts) now, instead of at the
    end of a window planned for the old threshold."""
    progress = windows.resumed(carried, workflow.now(), policy, margin)
    # Only a run the change affects records the marker; every other history stays as it was.
    if progress == carried or not workflow.patched(STUCK_THRESHOLD_AT_RESUME):
        return carried
    if progress.stuck:
        workflow.logger.warning(
            "compensation of %s: %s",
            inp.slice.slice_name,
            windows.describe_stuck(progress, workflow.now()),
        )
        raise_alert(_stuck_alert(inp.slice, inp.owner_workflow_id, progress))
        await on_progress(progress)
    return progress


async def delete_slice_within(inp: DeleteSliceInput, budget: timedelta) -> DeletionReport:
    """One window only: raises DeletionUnfinished with the last error when it runs out."""
    try:
        return await _attempts(inp, budget)
    except ActivityError as err:
        reraise_cancellation(err)
        raise DeletionUnfinished(last_error(err)) from None


async def continue_if_long(
    what: str, progress: CompensationProgress, carry_on: Callable[[], NoReturn]
) -> None:
    """However long a deletion stays stuck, the history stays bounded: once it is long, the
    run continues as new (`carry_on`, called only after every handler finished, so it
    carries what they changed)."""
    if history_is_long():
        workflow.logger.warning(
            "%s still running after %d windows; continuing as new", what, progress.windows_ended
        )
        await handlers_finished()
        carry_on()


def deletion(
    ref: SliceRef, owner_workflow_id: str, owner_run_id: str | None, reason: str
) -> DeleteSliceInput:
    """`owner_run_id` None deletes what any run of the owner created (teardown, sweeper)."""
    return DeleteSliceInput(
        slice=ref, owner_workflow_id=owner_workflow_id, owner_run_id=owner_run_id, reason=reason
    )


def _stuck_alert(ref: SliceRef, owner: str, progress: CompensationProgress) -> Alert:
    return make_alert(
        AlertKind.COMPENSATION_STUCK,
        owner,
        f"compensation-{progress.started_at.isoformat()}",
        f"deleting {ref.slice_name} in {ref.zone}",
        [windows.describe_stuck(progress, workflow.now()), f"project: {ref.project}"],
    )


async def _attempts(inp: DeleteSliceInput, window: timedelta) -> DeletionReport:
    return await workflow.execute_activity_method(
        TpuActivities.delete_slice,
        inp,
        start_to_close_timeout=min(opts.COMPENSATION_START_TO_CLOSE, window),
        schedule_to_close_timeout=window,
        heartbeat_timeout=opts.COMPENSATION_HEARTBEAT,
        retry_policy=opts.COMPENSATION_RETRY,
        summary=f"compensate: force-delete {inp.slice.slice_name} ({inp.reason}) and confirm "
        "NotFound",
    )
