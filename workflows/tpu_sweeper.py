"""TpuSweeper: deletes labelled TPU resources whose owning run closed without success.

A Temporal Schedule runs it. It backs up compensation for the cases no workflow code can
cover, such as a supervisor terminated while its child was already gone.
"""

from __future__ import annotations

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from activities.sweeper import SweeperActivities
    from domain.bootstrap_models import SliceRef, SweepReport, SweepRequest
    from domain.sweep import SweepAction, sweep_action
    from workflows import activity_options as opts
    from workflows.compensation import delete_slice


@workflow.defn(
    name="TpuSweeper",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.PINNED,
)
class TpuSweeper:
    @workflow.run
    async def run(self, req: SweepRequest) -> SweepReport:
        candidates = await workflow.execute_activity_method(
            SweeperActivities.find_sweep_candidates,
            req,
            start_to_close_timeout=opts.CALL_TIMEOUT,
            retry_policy=opts.SWEEP_RETRY,
            summary=f"list keeper-labelled TPU resources in {req.project}/{req.zone}",
        )
        report = SweepReport(examined=len(candidates), dry_run=req.dry_run)
        for candidate in candidates:
            resource = candidate.resource
            action = sweep_action(candidate)
            label = (
                f"{resource.name} (owner {resource.owner_workflow_id}: {candidate.owner_status})"
            )
            if action is SweepAction.KEEP:
                report = report.model_copy(update={"kept": [*report.kept, label]})
                continue
            if action is SweepAction.UNKNOWN_OWNER:
                workflow.logger.warning("no owner found for %s; left for an operator", label)
                report = report.model_copy(update={"unknown_owner": [*report.unknown_owner, label]})
                continue
            if not req.dry_run:
                ref = SliceRef(
                    project=req.project,
                    zone=req.zone,
                    slice_name=resource.id,
                    queued=resource.kind == "queued_resource",
                    node_ids=[] if resource.kind == "queued_resource" else [resource.id],
                )
                await delete_slice(
                    ref,
                    resource.owner_workflow_id,
                    resource.owner_run_id,
                    f"sweeper: owner {candidate.owner_status}",
                )
            report = report.model_copy(update={"deleted": [*report.deleted, label]})
        workflow.set_current_details(
            f"## sweep of {req.project}/{req.zone}\n\n"
            f"examined {report.examined}, deleted {len(report.deleted)}, kept "
            f"{len(report.kept)}, unknown owner {len(report.unknown_owner)}"
            + (" (dry run)" if req.dry_run else "")
        )
        return report
