"""The one way a keeper workflow releases a slice: force-delete, then confirm NotFound."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.tpu import TpuActivities
    from domain.bootstrap_models import DeleteSliceInput, DeletionReport, SliceRef
    from workflows import activity_options as opts


async def delete_slice(
    ref: SliceRef, owner_workflow_id: str, owner_run_id: str | None, reason: str
) -> DeletionReport:
    """Retried until the resources are confirmed gone; "already gone" counts as done."""
    return await workflow.execute_activity_method(
        TpuActivities.delete_slice,
        DeleteSliceInput(
            slice=ref,
            owner_workflow_id=owner_workflow_id,
            owner_run_id=owner_run_id,
            reason=reason,
        ),
        start_to_close_timeout=opts.COMPENSATION_START_TO_CLOSE,
        heartbeat_timeout=opts.COMPENSATION_HEARTBEAT,
        retry_policy=opts.COMPENSATION_RETRY,
        summary=f"compensate: force-delete {ref.slice_name} ({reason}) and confirm NotFound",
    )


def describe(report: DeletionReport) -> str:
    parts = []
    if report.deleted:
        parts.append("deleted " + ", ".join(n.rsplit("/", 1)[-1] for n in report.deleted))
    if report.already_gone and not report.deleted:
        parts.append("confirmed deleted (already gone)")
    if report.not_ours:
        parts.append("left alone (owned by another run): " + ", ".join(report.not_ours))
    return "; ".join(parts) or "nothing to delete"
