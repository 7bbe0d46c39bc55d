"""TpuSliceTeardown: releases a slice that a bootstrap handed over.

    teardown (force-delete, confirm NotFound) ─► released

Once started, the delete runs to the end: a cancel is recorded and shown, and the teardown
closes as cancelled only after the slice is confirmed gone. A delete stuck long enough
continues as new, carrying the teardown's state whole (memo CARRY_MEMO: the input stays the
operator's request). A teardown terminated mid-delete leaves the slice to the sweeper,
which deletes what a closed teardown released.
"""

from __future__ import annotations

import asyncio

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from keeper.domain.common.compensation import describe as describe_progress
    from keeper.domain.tpu.models import (
        CompensationProgress,
        DeletionReport,
        SliceRef,
        TeardownRequest,
        TeardownState,
    )
    from keeper.domain.tpu.naming import (
        CARRY_MEMO,
        bootstrap_workflow_id,
        node_ids,
        teardown_workflow_id,
    )
    from keeper.domain.tpu.outcome import deletion_summary
    from keeper.domain.tpu.status_view import render_teardown
    from keeper.runtime.tpu import search_attributes as sa
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.tpu import calls
    from keeper.workflows.tpu.compensation import continue_if_long, delete_slice, deletion
    from keeper.workflows.tpu.errors import require_id

DELETING = "teardown"
RELEASED = "released"


@workflow.defn(
    name="TpuSliceTeardown",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class TpuSliceTeardown:
    def __init__(self) -> None:
        self._state = TeardownState()
        self._publisher = Publisher()

    @workflow.run
    async def run(self, req: TeardownRequest) -> DeletionReport:
        require_id("TpuSliceTeardown", teardown_workflow_id(req.slice_name))
        self._req = req
        policy = await calls.read_policy()
        carried = workflow.memo_value(CARRY_MEMO, None, type_hint=TeardownState)
        self._set(carried or TeardownState(), DELETING)
        # Both kinds are looked for: the request does not say whether the slice was queued,
        # and deleting something already gone costs one read.
        ref = SliceRef(
            project=req.project,
            zone=req.zone,
            slice_name=req.slice_name,
            queued=True,
            node_ids=node_ids(req.slice_name, req.node_count),
        )
        delete = deletion(ref, bootstrap_workflow_id(req.slice_name), None, req.reason)
        report, _ = await run_to_completion(
            delete_slice(delete, policy.compensation, self._progress, self._state.progress),
            on_cancel=self._cancel_seen,
        )
        self._set(self._state.model_copy(update={"deletion": deletion_summary(report)}), RELEASED)
        # A cancel seen by this run or an earlier one closes it as cancelled, once done.
        if self._state.cancel_seen:
            raise asyncio.CancelledError(f"teardown cancelled; {deletion_summary(report)} first")
        return report

    def _cancel_seen(self) -> None:
        self._set(self._state.model_copy(update={"cancel_seen": True}), DELETING)

    async def _progress(self, progress: CompensationProgress) -> None:
        note = describe_progress(progress, workflow.now())
        self._set(self._state.model_copy(update={"deletion": note, "progress": progress}), DELETING)
        await continue_if_long(
            f"teardown of {self._req.slice_name}",
            progress,
            lambda: workflow.continue_as_new(self._req, memo={CARRY_MEMO: self._state}),
        )

    def _set(self, state: TeardownState, step: str) -> None:
        """The one way the state changes: the details and the search attributes follow."""
        self._state = state
        req = self._req
        self._publisher.publish(
            render_teardown(req.slice_name, req.reason, step, state),
            sa.current(req.slice_name, req.zone, step),
        )
