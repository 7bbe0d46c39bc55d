"""TpuSliceBootstrap: owns one TPU slice from request to hand-over, or to release.

The phases run in a child workflow. This supervisor compensates whenever the child does not
complete: it failed, hit a deadline or a terminal cloud state, was cancelled, terminated,
or timed out. A terminated or timed-out workflow runs no code of its own, which is why the
cleanup cannot live in the same workflow as the work.
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from keeper.domain.common.compensation import status_fields as compensation_fields
    from keeper.domain.tpu.models import (
        BootstrapFailure,
        BootstrapResult,
        BootstrapRunInput,
        BootstrapStatus,
        CompensationProgress,
        DeletionReport,
        Owner,
        SliceRef,
        SupervisorResume,
    )
    from keeper.domain.tpu.naming import (
        PROJECT_MEMO,
        bootstrap_run_workflow_id,
        bootstrap_workflow_id,
        legacy_bootstrap_run_workflow_id,
        wrong_id_message,
    )
    from keeper.domain.tpu.outcome import cleanup_summary, merge_reports
    from keeper.domain.tpu.phases import Phase
    from keeper.domain.tpu.slice_request import SliceRequest
    from keeper.domain.tpu.status_view import render_details, static_summary
    from keeper.runtime.tpu import search_attributes as sa
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.tpu import metrics
    from keeper.workflows.tpu.bootstrap_run import (
        CANONICAL_ID_PATCH,
        FAILURE_TYPE,
        PROGRESS_SIGNAL,
        WRONG_ID_TYPE,
        TpuSliceBootstrapRun,
    )
    from keeper.workflows.tpu.compensation import delete_slice

# The child's id became tpu-bootstrap-<slice>.run: "-run" could be another slice's supervisor.
CHILD_ID_PATCH = "bootstrap-child-id-dot-run"
# The project rides in the memo so the sweeper can find every project keeper created in.
PROJECT_MEMO_PATCH = "bootstrap-project-memo"
# A long stuck compensation continues as new with this memo entry (a SupervisorResume).
RESUME_MEMO = "keeper-compensation"
# A create that found the name held by another run (a live slice a completed run handed
# over) created nothing: the supervisor fails without compensating, so it never touches it.
NAME_TAKEN_PATCH = "bootstrap-name-taken-no-compensation"


@workflow.defn(
    name="TpuSliceBootstrap",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class TpuSliceBootstrap:
    def __init__(self) -> None:
        self._status: BootstrapStatus | None = None
        # Set once the supervisor owns the final state; progress signals stop counting.
        self._owns_final_state = False
        self._cancel_seen = False

    @workflow.query(description="Phase, deadline, QR state, VM counts and compensation.")
    def status(self) -> BootstrapStatus | None:
        return self._status

    @workflow.signal(name=PROGRESS_SIGNAL, description="Progress reported by the phase child.")
    def progress(self, status: BootstrapStatus) -> None:
        # Signals can arrive after compensation started (the supervisor's own phase wins)
        # and out of order (the highest revision wins).
        if self._status is not None and (
            self._owns_final_state or status.revision <= self._status.revision
        ):
            return
        previous = self._status.phase if self._status else None
        if status.compensation_stuck and not (self._status and self._status.compensation_stuck):
            # The phase child's own compensation (a cancel's) turned stuck. This supervisor
            # counts a cancel's compensation whoever deletes, into the series its own
            # compensation counts into, the one the worker publishes at 0 for the alert.
            metrics.compensation("stuck")
        self._status = status
        workflow.set_current_details(render_details(status))
        if status.phase != previous:
            workflow.upsert_search_attributes([sa.PHASE.value_set(status.phase.value)])

    @workflow.run
    async def run(self, request: SliceRequest) -> BootstrapResult:
        info = workflow.info()
        self._request = request
        self._ref = SliceRef.of(request)
        expected_id = bootstrap_workflow_id(request.slice_name)
        if workflow.patched(CANONICAL_ID_PATCH) and info.workflow_id != expected_id:
            raise ApplicationError(
                wrong_id_message("TpuSliceBootstrap", info.workflow_id, expected_id),
                type=WRONG_ID_TYPE,
                non_retryable=True,
            )
        resume = workflow.memo_value(RESUME_MEMO, None, type_hint=SupervisorResume)
        if resume is not None:
            # A continued run of a long compensation: the owner is the run that created
            # the resources, whose id their labels carry.
            self._owner = resume.owner
            self._status = resume.status
            self._cancel_seen = resume.cancelled
            workflow.set_current_details(render_details(self._status))
            await self._compensate_and_close(resume.failure, resume.cancelled, resume.progress)
        self._owner = Owner(workflow_id=info.workflow_id, run_id=info.run_id)
        self._status = BootstrapStatus.initial(request)
        workflow.upsert_search_attributes(
            [
                sa.SLICE_NAME.value_set(request.slice_name),
                sa.ZONE.value_set(request.zone),
                sa.PHASE.value_set(Phase.SUBMIT.value),
            ]
        )
        if workflow.patched(PROJECT_MEMO_PATCH):
            workflow.upsert_memo({PROJECT_MEMO: request.project})
        workflow.set_current_details(render_details(self._status))
        child_id = (
            bootstrap_run_workflow_id(request.slice_name)
            if workflow.patched(CHILD_ID_PATCH)
            else legacy_bootstrap_run_workflow_id(request.slice_name)
        )
        try:
            result = await workflow.execute_child_workflow(
                TpuSliceBootstrapRun.run,
                BootstrapRunInput(
                    request=request,
                    owner=self._owner,
                    # Fixed here, before any create call, so every retry sends the same one.
                    request_id=str(workflow.uuid4()),
                    parent_workflow_id=info.workflow_id,
                ),
                id=child_id,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                static_summary="phases of "
                + static_summary(
                    request.slice_name,
                    request.accelerator_type,
                    request.capacity.value,
                    request.zone,
                ),
                search_attributes=sa.for_slice(request.slice_name, request.zone),
            )
        except ChildWorkflowError as err:
            failure = _failure_of(err, self._stopped_in())
            await self._compensate_and_close(failure, isinstance(err.cause, CancelledError))
        except asyncio.CancelledError:
            failure = BootstrapFailure(
                phase=self._stopped_in(), kind="cancelled", message="bootstrap cancelled"
            )
            await self._compensate_and_close(failure, True)
        self._finish(result)
        return result

    async def _compensate_and_close(
        self,
        failure: BootstrapFailure,
        cancelled: bool,
        resume: CompensationProgress | None = None,
    ) -> NoReturn:
        """Deletes what the bootstrap created, then closes as cancelled or failed."""
        self._failure = failure
        self._cancelled = cancelled
        if failure.kind == "taken" and workflow.patched(NAME_TAKEN_PATCH):
            # Nothing of this run exists; what does belongs to another run and stays.
            report: DeletionReport | None = None
            cancel_seen = False
        else:
            report, cancel_seen = await run_to_completion(
                self._compensate(failure.message, resume), on_cancel=self._note_cancel
            )
        assert self._status is not None
        child = self._status.child_compensation
        if report is not None:
            report = merge_reports(child, report)
        cleanup = cleanup_summary(
            report,
            kind=failure.kind,
            by_child=bool(child and child.deleted),
            slice_name=self._ref.slice_name,
        )
        failure = failure.model_copy(
            update={
                "compensation": report,
                "cleanup": cleanup,
                "compensated_by_child": bool(child and child.deleted),
            }
        )
        cancelled = cancelled or cancel_seen or self._cancel_seen
        await self._close(Phase.CANCELLED if cancelled else Phase.FAILED, failure, report)
        if cancelled:
            raise asyncio.CancelledError(failure.message)
        raise ApplicationError(
            f"{failure.message}; compensation: {cleanup}",
            failure,
            type=FAILURE_TYPE,
            non_retryable=True,
        )

    def _note_cancel(self) -> None:
        self._cancel_seen = True

    def _finish(self, result: BootstrapResult) -> None:
        # The child's last progress signal may still be in flight when it completes; the
        # result is the authoritative end state.
        assert self._status is not None
        self._owns_final_state = True
        now = workflow.now()
        self._status = self._status.model_copy(
            update={
                "phase": Phase.DONE,
                "phase_deadline_at": None,
                "vms_with_ip": len(result.vms),
                "vms_healthy": len(result.vms),
                "nodes_ready": len(result.nodes),
                "failing_vms": [],
                "timings": [
                    t if t.ended_at else t.model_copy(update={"ended_at": now})
                    for t in self._status.timings
                ],
            }
        )
        workflow.upsert_search_attributes([sa.PHASE.value_set(Phase.DONE.value)])
        workflow.set_current_details(render_details(self._status))
        metrics.bootstrap_closed(Phase.DONE, Phase.DONE, self._status.timings)

    async def _compensate(
        self, reason: str, resume: CompensationProgress | None = None
    ) -> DeletionReport:
        assert self._status is not None
        self._owns_final_state = True
        if resume is None:
            self._status = self._status.model_copy(
                update={
                    "phase": Phase.COMPENSATE,
                    "phase_deadline_at": None,
                    "error": reason,
                    "compensation": "running: force-delete, then confirm NotFound",
                    "compensation_started_at": workflow.now(),
                }
            )
            workflow.upsert_search_attributes([sa.PHASE.value_set(Phase.COMPENSATE.value)])
            workflow.set_current_details(render_details(self._status))
            metrics.compensation("started")
        report = await delete_slice(
            self._ref,
            self._owner.workflow_id,
            self._owner.run_id,
            reason,
            on_progress=self._compensation_progress,
            resume=resume,
        )
        metrics.compensation("finished")
        return report

    def _compensation_progress(self, progress: CompensationProgress) -> None:
        assert self._status is not None
        if progress.stuck and not self._status.compensation_stuck:
            metrics.compensation("stuck")
        now = workflow.now()
        self._status = self._status.model_copy(
            update={**compensation_fields(progress, now), "updated_at": now}
        )
        workflow.set_current_details(render_details(self._status))
        if workflow.info().is_continue_as_new_suggested():
            self._continue_as_new(progress)

    def _continue_as_new(self, progress: CompensationProgress) -> NoReturn:
        """Carries a long compensation into a fresh history; the owner stays the same."""
        assert self._status is not None
        workflow.logger.warning(
            "compensation of %s still running after %d windows; continuing as new",
            self._ref.slice_name,
            progress.windows_ended,
        )
        resume = SupervisorResume(
            owner=self._owner,
            status=self._status,
            failure=self._failure,
            cancelled=self._cancelled or self._cancel_seen,
            progress=progress,
        )
        workflow.continue_as_new(
            self._request, memo={PROJECT_MEMO: self._request.project, RESUME_MEMO: resume}
        )

    def _stopped_in(self) -> Phase:
        """The phase the bootstrap was in, not the child's compensate that followed it."""
        assert self._status is not None
        if self._status.phase in (Phase.COMPENSATE, Phase.FAILED, Phase.CANCELLED):
            return self._status.failed_phase or self._status.phase
        return self._status.phase

    async def _close(
        self, phase: Phase, failure: BootstrapFailure, report: DeletionReport | None
    ) -> None:
        assert self._status is not None
        gone = report is not None and not report.not_ours and self._ref.queued
        self._status = self._status.model_copy(
            update={
                "phase": phase,
                "failed_phase": failure.phase,
                "error": failure.message,
                "failing_vms": failure.failing_vms or self._status.failing_vms,
                "compensation": failure.cleanup or "",
                "compensation_stuck": False,
                "phase_deadline_at": None,
                # What was last seen is gone now; the view must not show it as current.
                "qr_state": "deleted" if gone else self._status.qr_state,
            }
        )
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase.value)])
        workflow.set_current_details(render_details(self._status))
        metrics.bootstrap_closed(phase, failure.phase, self._status.timings)


def _failure_of(err: ChildWorkflowError, phase: Phase) -> BootstrapFailure:
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
