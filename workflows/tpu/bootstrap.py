"""TpuSliceBootstrap: owns one TPU slice from request to hand-over, or to release.

    start the phase child ─► completed ─► done (the slice is handed over)
                         └─► anything else ─► compensate ─► failed, or cancelled

The phases run in a child workflow (bootstrap_run.py), whose progress this supervisor shows
and counts. It compensates whenever the child does not complete: it failed, hit a deadline
or a terminal cloud state, was cancelled, terminated, or timed out. A terminated or
timed-out workflow runs no code of its own, which is why the cleanup cannot live in the
same workflow as the work. A compensation stuck long enough continues as new, carrying the
supervisor's state whole (memo CARRY_MEMO: the input stays the operator's request).
"""

from __future__ import annotations

import asyncio
from typing import NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from keeper.domain.tpu import transitions
    from keeper.domain.tpu.models import (
        BootstrapFailure,
        BootstrapResult,
        BootstrapRunInput,
        BootstrapStatus,
        ChildProgress,
        CompensationProgress,
        DeletionReport,
        Owner,
        SliceRef,
        SupervisorState,
        TpuPolicy,
    )
    from keeper.domain.tpu.naming import (
        CARRY_MEMO,
        PROJECT_MEMO,
        bootstrap_run_workflow_id,
        bootstrap_workflow_id,
    )
    from keeper.domain.tpu.phases import Phase
    from keeper.domain.tpu.slice_request import SliceRequest
    from keeper.domain.tpu.status_view import render_details, static_summary
    from keeper.runtime.tpu import search_attributes as sa
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.tpu import calls, metrics
    from keeper.workflows.tpu.bootstrap_run import (
        CHILD_PROGRESS_SIGNAL,
        PROGRESS_SIGNAL,
        TpuSliceBootstrapRun,
    )
    from keeper.workflows.tpu.compensation import continue_if_long, delete_slice, deletion
    from keeper.workflows.tpu.errors import FAILURE_TYPE, child_failure, require_id


@workflow.defn(
    name="TpuSliceBootstrap",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class TpuSliceBootstrap:
    def __init__(self) -> None:
        self._held: SupervisorState | None = None  # from the run's start on: self._state
        self._publisher = Publisher()

    @workflow.query(description="Phase, deadline, QR state, VM counts and compensation.")
    def status(self) -> BootstrapStatus | None:
        return self._held.status if self._held is not None else None

    @workflow.signal(
        name=CHILD_PROGRESS_SIGNAL,
        description="Progress reported by a phase child, naming the supervisor it is for.",
    )
    def child_progress(self, progress: ChildProgress) -> None:
        self._heard(progress.status, progress.supervisor)

    @workflow.signal(
        name=PROGRESS_SIGNAL,
        description="Progress reported by a phase child whose supervisor did not ask to be named.",
    )
    def progress(self, status: BootstrapStatus) -> None:
        self._heard(status, None)

    def _heard(self, status: BootstrapStatus, sender: Owner | None) -> None:
        # Signals arrive out of order (the highest revision wins), after compensation started
        # (the supervisor's own status wins), and from an earlier bootstrap's child (ignored).
        if self._held is None or not transitions.takes(self._held, status, sender):
            return
        if transitions.turned_stuck(self._held.status, status):
            # The phase child's own compensation (a cancel's) turned stuck. This supervisor
            # counts a cancel's compensation whoever deletes, into the series its own
            # compensation counts into, the one the worker publishes at 0 for the alert.
            metrics.compensation("stuck")
        self._set(transitions.heard(self._held, status))

    @workflow.run
    async def run(self, request: SliceRequest) -> BootstrapResult:
        require_id("TpuSliceBootstrap", bootstrap_workflow_id(request.slice_name))
        self._request, self._ref = request, SliceRef.of(request)
        policy = await calls.read_policy()
        carried = workflow.memo_value(CARRY_MEMO, None, type_hint=SupervisorState)
        if carried is not None:
            # A continued run of a long compensation: it compensates, then closes.
            self._set(carried)
            await self._compensate_and_close(policy)
        info = workflow.info()
        self._set(
            SupervisorState(
                owner=Owner(workflow_id=info.workflow_id, run_id=info.run_id),
                status=BootstrapStatus.initial(request),
            )
        )
        # So the sweeper finds every project keeper created in.
        workflow.upsert_memo({PROJECT_MEMO: request.project})
        try:
            result = await self._run_the_phases()
        except ChildWorkflowError as err:
            failure = child_failure(err, transitions.stopped_in(self._state.status))
            cancelled = isinstance(err.cause, CancelledError)
            self._set(transitions.phases_ended(self._state, failure, cancelled))
            await self._compensate_and_close(policy)
        except asyncio.CancelledError:
            phase = transitions.stopped_in(self._state.status)
            failure = BootstrapFailure(phase=phase, kind="cancelled", message="bootstrap cancelled")
            self._set(transitions.phases_ended(self._state, failure, True))
            await self._compensate_and_close(policy)
        self._set(transitions.done(self._state, result, workflow.now()))
        metrics.bootstrap_closed(Phase.DONE, Phase.DONE, self._state.status.timings)
        return result

    async def _run_the_phases(self) -> BootstrapResult:
        request = self._request
        return await workflow.execute_child_workflow(
            TpuSliceBootstrapRun.run,
            BootstrapRunInput(
                request=request,
                owner=self._state.owner,
                # Fixed here, before any create call, so every retry sends the same one.
                request_id=str(workflow.uuid4()),
                parent_workflow_id=workflow.info().workflow_id,
                name_the_supervisor=True,
            ),
            id=bootstrap_run_workflow_id(request.slice_name),
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            static_summary="phases of "
            + static_summary(
                request.slice_name, request.accelerator_type, request.capacity.value, request.zone
            ),
            search_attributes=sa.for_slice(request.slice_name, request.zone),
        )

    async def _compensate_and_close(self, policy: TpuPolicy) -> NoReturn:
        """Deletes what the bootstrap created, however many cancels arrive meanwhile, then
        closes as cancelled or failed, saying who deleted what."""
        failure = self._state.failure
        assert failure is not None
        report: DeletionReport | None = None
        if failure.kind != "taken":  # else nothing of this run exists: another run's stays
            report, _ = await run_to_completion(
                self._compensate(policy),
                on_cancel=lambda: self._set(transitions.cancel_seen(self._state)),
            )
        self._set(transitions.closed(self._state, report, self._ref.queued))
        state = self._state
        assert state.failure is not None
        outcome = transitions.outcome(state)
        metrics.bootstrap_closed(outcome, state.failure.phase, state.status.timings)
        if outcome is Phase.CANCELLED:
            raise asyncio.CancelledError(state.failure.message)
        raise ApplicationError(
            f"{state.failure.message}; compensation: {state.failure.cleanup}",
            state.failure,
            type=FAILURE_TYPE,
            non_retryable=True,
        )

    async def _compensate(self, policy: TpuPolicy) -> DeletionReport:
        state = self._state
        assert state.failure is not None
        if state.progress is None:  # not a compensation an earlier run started
            self._set(transitions.supervisor_compensating(state, workflow.now()))
            metrics.compensation("started")
        owner = state.owner
        report = await delete_slice(
            deletion(self._ref, owner.workflow_id, owner.run_id, state.failure.message),
            policy.compensation,
            self._compensation_progress,
            resume=state.progress,
        )
        metrics.compensation("finished")
        return report

    async def _compensation_progress(self, progress: CompensationProgress) -> None:
        before = self._state.status
        self._set(transitions.supervisor_compensation_seen(self._state, progress, workflow.now()))
        if transitions.turned_stuck(before, self._state.status):
            metrics.compensation("stuck")
        # The owner stays the run that created the resources (their labels name it).
        await continue_if_long(
            f"compensation of {self._ref.slice_name}",
            progress,
            lambda: workflow.continue_as_new(
                self._request,
                memo={PROJECT_MEMO: self._request.project, CARRY_MEMO: self._state},
            ),
        )

    @property
    def _state(self) -> SupervisorState:
        assert self._held is not None
        return self._held

    def _set(self, state: SupervisorState) -> None:
        """The one way the state changes: the details and the search attributes follow."""
        self._held = state
        status = state.status
        self._publisher.publish(
            render_details(status),
            sa.current(status.slice_name, status.zone, status.phase.value),
        )
