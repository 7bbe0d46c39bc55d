"""TpuSliceTeardown: releases a slice that a bootstrap handed over."""

from __future__ import annotations

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from domain.bootstrap_models import DeletionReport, SliceRef, TeardownRequest
    from domain.naming import bootstrap_workflow_id, node_ids
    from workflows import search_attributes as sa
    from workflows.compensation import delete_slice, describe


@workflow.defn(
    name="TpuSliceTeardown",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class TpuSliceTeardown:
    @workflow.run
    async def run(self, req: TeardownRequest) -> DeletionReport:
        workflow.upsert_search_attributes(
            [
                sa.SLICE_NAME.value_set(req.slice_name),
                sa.ZONE.value_set(req.zone),
                sa.PHASE.value_set("teardown"),
            ]
        )
        workflow.set_current_details(f"## {req.slice_name}: **teardown**\n\n{req.reason}")
        # Both kinds are looked for: the request does not say whether the slice was queued,
        # and deleting something already gone costs one read.
        ref = SliceRef(
            project=req.project,
            zone=req.zone,
            slice_name=req.slice_name,
            queued=True,
            node_ids=node_ids(req.slice_name, req.node_count),
        )
        report = await delete_slice(ref, bootstrap_workflow_id(req.slice_name), None, req.reason)
        workflow.upsert_search_attributes([sa.PHASE.value_set("released")])
        workflow.set_current_details(f"## {req.slice_name}: **released**\n\n{describe(report)}")
        return report
