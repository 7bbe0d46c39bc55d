"""TpuSliceTeardown: releases a slice that a bootstrap handed over.

Once started, the delete runs to the end: a cancel is recorded and shown, and the teardown
closes as cancelled only after the slice is confirmed gone. A teardown that is terminated
mid-delete leaves the slice to the sweeper, which deletes what a closed teardown released.
"""

from __future__ import annotations

import asyncio

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from keeper.domain.common.compensation import describe as describe_progress
    from keeper.domain.common.untrusted import md_text
    from keeper.domain.tpu.models import (
        CompensationProgress,
        DeletionReport,
        SliceRef,
        TeardownRequest,
        TeardownResume,
    )
    from keeper.domain.tpu.naming import (
        bootstrap_workflow_id,
        node_ids,
        teardown_workflow_id,
        wrong_id_message,
    )
    from keeper.domain.tpu.status_view import ERROR_LIMIT
    from keeper.runtime.tpu import search_attributes as sa
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.tpu.bootstrap_run import CANONICAL_ID_PATCH, WRONG_ID_TYPE
    from keeper.workflows.tpu.compensation import delete_slice, describe

# Histories recorded before it let a cancel stop the delete midway.
SHIELDED_DELETE_PATCH = "teardown-shielded-delete"
# A delete stuck long enough for the server to suggest it continues as new, carrying its
# progress (and a cancel it has seen) in this memo entry.
CONTINUE_AS_NEW_PATCH = "teardown-continue-as-new"
RESUME_MEMO = "keeper-teardown"


@workflow.defn(
    name="TpuSliceTeardown",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class TpuSliceTeardown:
    def __init__(self) -> None:
        self._cancel_note: str | None = None
        self._deletion_note: str | None = None

    @workflow.run
    async def run(self, req: TeardownRequest) -> DeletionReport:
        expected_id = teardown_workflow_id(req.slice_name)
        workflow_id = workflow.info().workflow_id
        if workflow.patched(CANONICAL_ID_PATCH) and workflow_id != expected_id:
            raise ApplicationError(
                wrong_id_message("TpuSliceTeardown", workflow_id, expected_id),
                type=WRONG_ID_TYPE,
                non_retryable=True,
            )
        self._req = req
        workflow.upsert_search_attributes(
            [
                sa.SLICE_NAME.value_set(req.slice_name),
                sa.ZONE.value_set(req.zone),
                sa.PHASE.value_set("teardown"),
            ]
        )
        self._show("teardown")
        # Both kinds are looked for: the request does not say whether the slice was queued,
        # and deleting something already gone costs one read.
        ref = SliceRef(
            project=req.project,
            zone=req.zone,
            slice_name=req.slice_name,
            queued=True,
            node_ids=node_ids(req.slice_name, req.node_count),
        )
        resume = workflow.memo_value(RESUME_MEMO, None, type_hint=TeardownResume)
        if resume is not None:
            self._cancel_note = resume.cancel_note
            self._deletion_note = resume.note
            self._show("teardown")
        deletion = delete_slice(
            ref,
            bootstrap_workflow_id(req.slice_name),
            None,
            req.reason,
            on_progress=self._progress,
            resume=resume.progress if resume is not None else None,
        )
        cancelled = False
        if workflow.patched(SHIELDED_DELETE_PATCH):
            report, cancelled = await run_to_completion(deletion, on_cancel=self._cancel_seen)
        else:
            report = await deletion
        # A cancel seen by an earlier run of this teardown still closes it as cancelled.
        cancelled = cancelled or (resume is not None and resume.cancel_note is not None)
        workflow.upsert_search_attributes([sa.PHASE.value_set("released")])
        self._deletion_note = describe(report)
        self._show("released")
        if cancelled:
            raise asyncio.CancelledError(f"teardown cancelled; {describe(report)} first")
        return report

    def _cancel_seen(self) -> None:
        self._cancel_note = (
            "cancel requested: the delete goes on until the slice is confirmed gone, then the "
            "teardown closes as cancelled"
        )
        self._show("teardown")

    def _progress(self, progress: CompensationProgress) -> None:
        self._deletion_note = describe_progress(progress, workflow.now())
        self._show("teardown")
        if workflow.info().is_continue_as_new_suggested() and workflow.patched(
            CONTINUE_AS_NEW_PATCH
        ):
            # However long the delete stays stuck, the history stays bounded.
            workflow.logger.warning(
                "teardown of %s still deleting after %d windows; continuing as new",
                self._req.slice_name,
                progress.windows_ended,
            )
            resume = TeardownResume(
                progress=progress, cancel_note=self._cancel_note, note=self._deletion_note
            )
            workflow.continue_as_new(self._req, memo={RESUME_MEMO: resume})

    def _show(self, phase: str) -> None:
        # The reason and the deletion's errors are outside text: shown, never rendered.
        lines = [f"## {md_text(self._req.slice_name)}: **{phase}**", "", md_text(self._req.reason)]
        for note in (self._cancel_note, self._deletion_note):
            if note:
                lines += ["", md_text(note, ERROR_LIMIT)]
        workflow.set_current_details("\n".join(lines))
