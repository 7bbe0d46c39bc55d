"""TpuSliceBootstrapRun: the phase work of one slice bootstrap.

It runs as the child of `TpuSliceBootstrap`, which compensates whenever this workflow does
not complete, including when it is terminated or times out and no code of its own can run.
It compensates by itself only when cancelled: by a cancel of the bootstrap, which reaches it
through its supervisor (which waits for it, showing and counting its compensation from the
progress signals), or because its supervisor was terminated (parent close policy
REQUEST_CANCEL), when nobody else shows or counts it. A compensation stuck long enough
continues as new, and the continued run goes on from the status its supervisor last took.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from keeper.activities.tpu.cloud import TpuActivities
    from keeper.activities.tpu.health import HealthActivities
    from keeper.domain.common.compensation import status_fields as compensation_fields
    from keeper.domain.common.durations import format_duration
    from keeper.domain.tpu.models import (
        BootstrapFailure,
        BootstrapResult,
        BootstrapRunInput,
        BootstrapStatus,
        CompensationProgress,
        CreateSliceInput,
        DeletionReport,
        HealthCheckInput,
        HealthReport,
        ObserveInput,
        PhaseTiming,
        SliceRef,
    )
    from keeper.domain.tpu.naming import (
        bootstrap_run_workflow_ids,
        bootstrap_workflow_id,
        queued_resource_name,
        wrong_id_message,
    )
    from keeper.domain.tpu.observation import SliceObservation, bucket, progress_key
    from keeper.domain.tpu.outcome import cleanup_summary
    from keeper.domain.tpu.phases import Phase, backstop, deadlines, reached, wait_plan
    from keeper.domain.tpu.status_view import failing_vm_list, render_details
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.tpu import activity_options as opts
    from keeper.workflows.tpu import metrics
    from keeper.workflows.tpu.compensation import delete_slice

FAILURE_TYPE = "SliceBootstrapFailed"
PROGRESS_SIGNAL = "progress"
WRONG_ID_TYPE = "NotCanonicalWorkflowId"
NOT_A_CHILD_TYPE = "NotStartedByTpuSliceBootstrap"
# Slice workflows refuse ids keeper could not find them by (and the child, any parent but
# its supervisor); histories recorded before the rule replay without the check.
CANONICAL_ID_PATCH = "slice-workflow-canonical-id"
# A poll or health round whose next retry would land past the phase budget made the server
# fail it early; now the phase sleeps to its deadline and looks once more before failing.
DEADLINE_LAST_LOOK_PATCH = "phase-deadline-last-look"
# A cancel-path compensation stuck long enough for the server to suggest it continues as
# new with its progress in this memo entry; the continued run only compensates.
CONTINUE_AS_NEW_PATCH = "child-compensation-continue-as-new"
RESUME_MEMO = "keeper-compensation"
# Which of its own compensation's metrics an orphaned child has counted ("started", "stuck"),
# carried with RESUME_MEMO so a continued run counts neither again.
COUNTED_MEMO = "keeper-compensation-counted"
# The continued run goes on from the status the run before last sent (STATUS_MEMO), whose
# revision the supervisor compares (a run starting over at revision 0 would never be heard
# again), and from whether a signal found the supervisor gone (ORPHANED_MEMO); with its
# supervisor still waiting, it closes as the cancel it carries on, not as an orphan.
CONTINUED_STATUS_PATCH = "child-compensation-continued-status"
STATUS_MEMO = "keeper-compensation-status"
ORPHANED_MEMO = "keeper-compensation-orphaned"
# What a signal to a closed or missing workflow fails with (sdk-core's failure type).
SUPERVISOR_GONE = "ExternalWorkflowExecutionNotFound"
CANCELLED_TYPE = "BootstrapCancelled"
# A cancelled child tells its supervisor what its own compensation deleted (one more
# progress signal), so the supervisor's failure says who deleted what.
CANCEL_REPORT_PATCH = "child-cancel-report"
# A cancelled child's compensation tells its supervisor of every window that ran out (the
# stuck flag, the last error): the supervisor is what `keeper tpu status` reads and what
# counts a cancel's compensation, stuck included, while it waits for this child to close.
COMPENSATION_PROGRESS_PATCH = "child-compensation-progress"
# The create's ALREADY_EXISTS for another run's resource (activities/tpu/cloud.py).
NAME_TAKEN_TYPE = "SliceNameTaken"
LAST_LOOK = RetryPolicy(maximum_attempts=1)


class PhaseFailed(Exception):
    def __init__(self, failure: BootstrapFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@workflow.defn(
    name="TpuSliceBootstrapRun",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class TpuSliceBootstrapRun:
    def __init__(self) -> None:
        self._status: BootstrapStatus | None = None
        self._signals: set[asyncio.Task[None]] = set()
        # Set when a progress signal finds the supervisor gone (terminated), in this run or
        # the one it continued: this child's own compensation is then the only one, and it
        # counts it (see _count_orphaned).
        self._orphaned = False
        self._compensating = False
        self._counted: dict[str, bool] = {"started": False, "stuck": False}

    @workflow.query(description="Phase, deadline, QR state and VM counts of this bootstrap.")
    def status(self) -> BootstrapStatus | None:
        return self._status

    @workflow.run
    async def run(self, inp: BootstrapRunInput) -> BootstrapResult:
        self._inp = inp
        req = inp.request
        if workflow.patched(CANONICAL_ID_PATCH):
            _require_supervisor(inp)
        self._ref = SliceRef.of(req)
        self._budgets = deadlines(req)
        self._status = BootstrapStatus.initial(req)
        resume = workflow.memo_value(RESUME_MEMO, None, type_hint=CompensationProgress)
        if resume is not None:
            await self._finish_continued_compensation(resume)
        try:
            obs = await self._submit()
            submitted_at = self._phase_started_at
            for step in wait_plan(req):
                obs = await self._wait_phase(
                    step.phase,
                    submitted_at if step.from_submission else workflow.now(),
                    lambda o, goal=step.goal: reached(o, goal),
                    obs,
                    step.what,
                )
            await self._health(obs)
        except PhaseFailed as failed:
            self._status = self._status_copy(failed_phase=failed.failure.phase)
            await self._enter(Phase.FAILED, None, error=failed.failure.message)
            await self._flush_signals()
            raise ApplicationError(
                failed.failure.message, failed.failure, type=FAILURE_TYPE, non_retryable=True
            ) from None
        except asyncio.CancelledError:
            await self._compensate_on_cancel()
            raise
        await self._enter(Phase.DONE, None)
        await self._flush_signals()
        return self._result(obs)

    # -- phases --------------------------------------------------------------------------

    async def _submit(self) -> SliceObservation:
        req = self._inp.request
        await self._enter(Phase.SUBMIT, None)
        assign_budget = self._budgets.get(Phase.ASSIGN, timedelta(0))
        try:
            # WAIT_CANCELLATION_COMPLETED: a cancel must not let compensation race a create
            # that is still in flight and may yet succeed.
            await workflow.execute_activity_method(
                TpuActivities.create_slice,
                CreateSliceInput(
                    request=req,
                    owner=self._inp.owner,
                    request_id=self._inp.request_id,
                    valid_until=backstop(assign_budget, req.poll_interval),
                ),
                start_to_close_timeout=opts.CALL_TIMEOUT,
                schedule_to_close_timeout=opts.CREATE_BUDGET,
                retry_policy=opts.CREATE_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"submit: create {'queued resource' if req.capacity.queued else 'node'}"
                f" {req.slice_name}",
            )
        except ActivityError as err:
            _reraise_cancellation(err)
            cause = err.cause
            taken = isinstance(cause, ApplicationError) and cause.type == NAME_TAKEN_TYPE
            raise PhaseFailed(
                self._failure(Phase.SUBMIT, "taken" if taken else "error", err)
            ) from None
        return SliceObservation(
            expected_nodes=len(self._ref.node_ids), expected_vms=req.expected_vms
        )

    async def _wait_phase(
        self,
        phase: Phase,
        started_at: datetime,
        done: Callable[[SliceObservation], bool],
        obs: SliceObservation,
        what: str,
    ) -> SliceObservation:
        budget = self._budgets[phase]
        deadline_at = started_at + budget
        await self._enter(phase, deadline_at, started_at=started_at)
        while not done(obs):
            self._raise_if_cancel_requested()
            self._raise_if_terminal(phase, obs)
            left = deadline_at - workflow.now()
            if left <= timedelta(0):
                raise PhaseFailed(self._deadline_failure(phase, budget, obs))
            try:
                obs = await workflow.execute_activity_method(
                    TpuActivities.observe_slice,
                    self._observe_input(phase, obs),
                    start_to_close_timeout=opts.POLL_START_TO_CLOSE,
                    schedule_to_close_timeout=left,
                    retry_policy=opts.poll_retry(self._inp.request.poll_interval),
                    summary=f"{phase.value}: {what} (deadline {deadline_at:%H:%M:%S} UTC)",
                )
            except ActivityError as err:
                _reraise_cancellation(err)
                if err.retry_state is not RetryState.TIMEOUT:
                    raise PhaseFailed(self._failure(phase, "error", err)) from None
                final = await self._observe_at_deadline(phase, deadline_at, obs)
                if final is not None:
                    obs = final
                    await self._observed(obs)
                if final is None or not done(obs):
                    self._raise_if_terminal(phase, obs)
                    raise PhaseFailed(self._deadline_failure(phase, budget, obs)) from None
                continue
            await self._observed(obs)
        self._raise_if_terminal(phase, obs)
        return obs

    def _observe_input(
        self, phase: Phase, obs: SliceObservation, *, final: bool = False
    ) -> ObserveInput:
        return ObserveInput(
            slice=self._ref,
            expected_vms=self._inp.request.expected_vms,
            last_key=progress_key(obs),
            phase=phase,
            final=final,
        )

    async def _wait_for_deadline(self, phase: Phase, deadline_at: datetime) -> bool:
        """Sleeps to a deadline the server gave up on early; False on histories before that."""
        left = deadline_at - workflow.now()
        if left <= timedelta(0) or not workflow.patched(DEADLINE_LAST_LOOK_PATCH):
            return False
        await workflow.sleep(
            left, summary=f"{phase.value}: wait for the deadline, then look once more"
        )
        return True

    async def _observe_at_deadline(
        self, phase: Phase, deadline_at: datetime, obs: SliceObservation
    ) -> SliceObservation | None:
        """The last observation of a phase, at its deadline; None when there is none."""
        if not await self._wait_for_deadline(phase, deadline_at):
            return None
        try:
            return await workflow.execute_activity_method(
                TpuActivities.observe_slice,
                self._observe_input(phase, obs, final=True),
                start_to_close_timeout=opts.POLL_START_TO_CLOSE,
                retry_policy=LAST_LOOK,
                summary=f"{phase.value}: last look at the deadline",
            )
        except ActivityError as err:
            _reraise_cancellation(err)
            return None

    async def _health(self, obs: SliceObservation) -> HealthReport:
        req = self._inp.request
        budget = self._budgets[Phase.HEALTH]
        started_at = workflow.now()
        deadline_at = started_at + budget
        await self._enter(Phase.HEALTH, deadline_at, started_at=started_at)
        interval = opts.health_interval(req.poll_interval)
        report = HealthReport(total=len(obs.endpoints), healthy=0)
        last_bucket = -1
        while not report.all_healthy:
            self._raise_if_cancel_requested()
            left = deadline_at - workflow.now()
            try:
                report = await workflow.execute_activity_method(
                    HealthActivities.check_health,
                    HealthCheckInput(
                        targets=obs.endpoints,
                        port=req.health_port,
                        path=req.health_path,
                        last_bucket=last_bucket,
                    ),
                    start_to_close_timeout=opts.HEALTH_START_TO_CLOSE,
                    schedule_to_close_timeout=max(left, timedelta(seconds=1)),
                    retry_policy=RetryPolicy(
                        initial_interval=interval,
                        backoff_coefficient=1.0,
                        maximum_interval=interval,
                    ),
                    summary=f"health: GET {req.health_path} on {len(obs.endpoints)} VMs "
                    f"(deadline {deadline_at:%H:%M:%S} UTC)",
                )
            except ActivityError as err:
                _reraise_cancellation(err)
                if err.retry_state is not RetryState.TIMEOUT:
                    raise PhaseFailed(self._failure(Phase.HEALTH, "error", err)) from None
                final = await self._health_at_deadline(deadline_at, obs)
                if final is None or not final.all_healthy:
                    raise PhaseFailed(
                        self._health_failure(budget, obs, final or _last_health_report(err))
                    ) from None
                report = final
            last_bucket = bucket(report.healthy, report.total)
            self._status = self._status_copy(
                vms_healthy=report.healthy,
                failing_vms=report.failing,
                vms_failing=report.total - report.healthy,
            )
            self._publish()
        return report

    async def _health_at_deadline(
        self, deadline_at: datetime, obs: SliceObservation
    ) -> HealthReport | None:
        """One last health round at the deadline, reporting whatever it sees."""
        if not await self._wait_for_deadline(Phase.HEALTH, deadline_at):
            return None
        req = self._inp.request
        try:
            return await workflow.execute_activity_method(
                HealthActivities.check_health,
                HealthCheckInput(targets=obs.endpoints, port=req.health_port, path=req.health_path),
                start_to_close_timeout=opts.HEALTH_START_TO_CLOSE,
                retry_policy=LAST_LOOK,
                summary="health: last round at the deadline",
            )
        except ActivityError as err:
            _reraise_cancellation(err)
            return _last_health_report(err)

    # -- failure and compensation ---------------------------------------------------------

    def _health_failure(
        self, budget: timedelta, obs: SliceObservation, last: HealthReport | None
    ) -> BootstrapFailure:
        """Names the failing VMs and why; counts come from the round, not from its list."""
        assert self._status is not None
        failing = last.failing if last else []
        count = last.total - last.healthy if last else len(failing)
        if len(self._status.failing_vms) > len(failing):
            # A retried attempt's details carry only the first few; the last full round
            # this workflow saw names them all.
            failing = self._status.failing_vms
        return BootstrapFailure(
            phase=Phase.HEALTH,
            kind="deadline",
            message=f"health deadline ({format_duration(budget)}) exceeded: "
            f"{count} of {len(obs.endpoints)} VMs not healthy: {failing_vm_list(failing, count)}",
            failing_vms=failing,
        )

    def _raise_if_terminal(self, phase: Phase, obs: SliceObservation) -> None:
        reason = obs.terminal_reason
        if reason is not None:
            raise PhaseFailed(
                BootstrapFailure(phase=phase, kind="terminal", message=f"{phase.value}: {reason}")
            )

    def _deadline_failure(
        self, phase: Phase, budget: timedelta, obs: SliceObservation
    ) -> BootstrapFailure:
        seen = obs.qr_state or "no answer yet"
        detail = f"QR {seen}" if self._ref.queued else f"node {self._node_summary(obs)}"
        if phase is Phase.READY:
            detail += f", {obs.nodes_ready}/{obs.expected_nodes} nodes READY, "
            detail += f"{obs.vms_with_ip}/{obs.expected_vms} VMs with IP"
        return BootstrapFailure(
            phase=phase,
            kind="deadline",
            message=f"{phase.value} deadline ({format_duration(budget)}) exceeded; last seen: "
            f"{detail}",
        )

    @staticmethod
    def _node_summary(obs: SliceObservation) -> str:
        return ", ".join(f"{n.node_id} {n.state}" for n in obs.nodes) or "not listed yet"

    @staticmethod
    def _failure(phase: Phase, kind: str, err: ActivityError) -> BootstrapFailure:
        cause = err.cause
        message = str(cause) if cause is not None else str(err)
        return BootstrapFailure(phase=phase, kind=kind, message=f"{phase.value}: {message}")

    async def _finish_continued_compensation(self, resume: CompensationProgress) -> NoReturn:
        """A continued run of a stuck cancel-path compensation: it compensates, then fails,
        as the cancel was the previous run's and this run cannot close as cancelled."""
        req = self._inp.request
        counted = workflow.memo_value(COUNTED_MEMO, {}, type_hint=dict[str, bool])
        self._counted.update(counted)
        carried = workflow.memo_value(STATUS_MEMO, None, type_hint=BootstrapStatus)
        if carried is not None:
            # Where the supervisor's view stands: its revision, the phase the bootstrap
            # stopped in, its timings. Runs continued before the patch start afresh.
            self._status = carried
            self._orphaned = workflow.memo_value(ORPHANED_MEMO, False, type_hint=bool)
        # It is as stuck as the run before: seen as such, and not counted stuck again.
        self._status = self._status_copy(
            **compensation_fields(resume, workflow.now()),
            compensation_started_at=resume.started_at,
        )
        await self._compensate_on_cancel(resume)
        assert self._status is not None
        done = "the compensation an earlier run of this workflow started has finished: " + (
            self._status.compensation or "nothing to report"
        )
        if not workflow.patched(CONTINUED_STATUS_PATCH):
            raise ApplicationError(
                f"bootstrap of {req.slice_name} cancelled (its supervisor was lost); the "
                "compensation an earlier run of this workflow started has finished",
                type=CANCELLED_TYPE,
                non_retryable=True,
            )
        if self._orphaned:
            # Nobody waits for this run: its failure is the last word on the bootstrap.
            raise ApplicationError(
                f"bootstrap of {req.slice_name} cancelled (its supervisor "
                f"{self._inp.parent_workflow_id} was lost); {done}",
                type=CANCELLED_TYPE,
                non_retryable=True,
            )
        # Its supervisor waits for it (the last signal, with the report, reached it) and
        # closes the bootstrap as cancelled on a cancelled failure, as for a first run that
        # closed as cancelled; an ApplicationError would read to it as the phases failing.
        raise CancelledError(
            f"bootstrap of {req.slice_name} cancelled; {done}; its supervisor "
            f"{self._inp.parent_workflow_id} closes the bootstrap"
        )

    async def _compensate_on_cancel(self, resume: CompensationProgress | None = None) -> None:
        report, _ = await run_to_completion(self._compensate(resume))
        self._status = self._status_copy(
            phase=Phase.CANCELLED,
            compensation=cleanup_summary(report),
            child_compensation=report,
            phase_deadline_at=None,
            # Finished: no longer stuck, here or in the supervisor this status reaches, whose
            # own compensation that follows is another one and turns stuck on its own.
            compensation_stuck=False,
        )
        if workflow.patched(CANCEL_REPORT_PATCH):
            # The supervisor compensates after this child too, and would otherwise only
            # find everything already gone.
            self._publish()
            await self._flush_signals()
        else:
            workflow.set_current_details(render_details(self._status))
        if self._orphaned:
            metrics.compensation("finished")

    async def _compensate(self, resume: CompensationProgress | None) -> DeletionReport:
        assert self._status is not None
        if resume is None and self._status.failed_phase is None:
            self._status = self._status_copy(failed_phase=self._status.phase)
        if resume is None:
            self._status = self._status_copy(compensation_started_at=workflow.now())
        self._compensating = True
        self._count_orphaned()
        await self._enter(Phase.COMPENSATE, None)
        return await delete_slice(
            self._ref,
            self._inp.owner.workflow_id,
            self._inp.owner.run_id,
            "bootstrap cancelled",
            on_progress=self._compensation_progress,
            resume=resume,
        )

    def _compensation_progress(self, progress: CompensationProgress) -> None:
        now = workflow.now()
        self._status = self._status_copy(**compensation_fields(progress, now))
        self._count_orphaned()
        assert self._status is not None
        if not self._orphaned and workflow.patched(COMPENSATION_PROGRESS_PATCH):
            # A cancel: the supervisor waits for this child and shows and counts its
            # progress. Once a signal found it gone, this child's own details are what show.
            self._publish()
        else:
            workflow.set_current_details(render_details(self._status))
        if workflow.info().is_continue_as_new_suggested() and workflow.patched(
            CONTINUE_AS_NEW_PATCH
        ):
            # However long it stays stuck, the history stays bounded; the owner rides in
            # the input, so ownership checks are the same in the next run.
            workflow.logger.warning(
                "compensation of %s still running after %d windows; continuing as new",
                self._ref.slice_name,
                progress.windows_ended,
            )
            memo: dict[str, object] = {RESUME_MEMO: progress, COUNTED_MEMO: self._counted}
            if workflow.patched(CONTINUED_STATUS_PATCH):
                memo[STATUS_MEMO] = self._status
                memo[ORPHANED_MEMO] = self._orphaned
            workflow.continue_as_new(self._inp, memo=memo)

    # -- status --------------------------------------------------------------------------

    def _status_copy(self, **changes: object) -> BootstrapStatus:
        assert self._status is not None
        return self._status.model_copy(update={**changes, "updated_at": workflow.now()})

    async def _enter(
        self,
        phase: Phase,
        deadline_at: datetime | None,
        *,
        started_at: datetime | None = None,
        error: str | None = None,
    ) -> None:
        assert self._status is not None
        now = workflow.now()
        started_at = started_at or now
        self._phase_started_at = started_at
        timings = [
            t if t.ended_at is not None else t.model_copy(update={"ended_at": now})
            for t in self._status.timings
        ]
        if phase not in (Phase.DONE, Phase.FAILED, Phase.COMPENSATE, Phase.CANCELLED):
            timings.append(PhaseTiming(phase=phase, started_at=started_at, deadline_at=deadline_at))
        self._status = self._status_copy(
            phase=phase, phase_deadline_at=deadline_at, timings=timings, error=error
        )
        self._publish()

    async def _observed(self, obs: SliceObservation) -> None:
        self._status = self._status_copy(
            qr_state=obs.qr_state,
            nodes_ready=obs.nodes_ready,
            vms_with_ip=obs.vms_with_ip,
        )
        self._publish()

    def _publish(self) -> None:
        assert self._status is not None
        self._status = self._status.model_copy(update={"revision": self._status.revision + 1})
        workflow.set_current_details(render_details(self._status))
        # Sent from a task of its own: a cancel that lands while the main task awaits a
        # signal that has already been delivered is swallowed by that await, and the
        # workflow would go on polling as if nobody had asked it to stop.
        task = asyncio.create_task(self._signal_parent(self._status))
        self._signals.add(task)
        task.add_done_callback(self._signals.discard)

    async def _signal_parent(self, status: BootstrapStatus) -> None:
        parent = workflow.get_external_workflow_handle(self._inp.parent_workflow_id)
        try:
            await parent.signal(PROGRESS_SIGNAL, status)
        except (ApplicationError, asyncio.CancelledError) as err:
            # Progress is best effort; the supervisor may be gone (terminated).
            workflow.logger.debug("supervisor did not take the progress signal: %s", err)
            if isinstance(err, ApplicationError) and err.type == SUPERVISOR_GONE:
                self._orphaned = True
                self._count_orphaned()
        else:
            if status.compensation_stuck:
                # The supervisor took it and counted the compensation stuck: should it be
                # terminated later, this child's own count (_count_orphaned) skips stuck.
                self._counted["stuck"] = True

    def _count_orphaned(self) -> None:
        """A compensation nobody else counts: the supervisor, which counts a cancel's
        compensation whoever deletes, was terminated. Each event is counted once, when both
        are known: the compensation has reached it, and a signal found the supervisor gone
        (which may be only at the end, if the supervisor went while this child deleted)."""
        assert self._status is not None
        if not (self._orphaned and self._compensating):
            return
        if not self._counted["started"]:
            self._counted["started"] = True
            metrics.compensation("started")
        if self._status.compensation_stuck and not self._counted["stuck"]:
            self._counted["stuck"] = True
            metrics.compensation("stuck")

    async def _flush_signals(self) -> None:
        # A workflow that closes with a signal still in flight loses it (the supervisor
        # would miss the final state), so the last ones are awaited before closing.
        if self._signals:
            await workflow.wait(list(self._signals))

    def _raise_if_cancel_requested(self) -> None:
        """Belt and braces for any await that might swallow a cancellation."""
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError(workflow.cancellation_reason())

    def _result(self, obs: SliceObservation) -> BootstrapResult:
        assert self._status is not None
        req = self._inp.request
        timings = self._status.timings
        seconds = {t.phase.value: t.seconds for t in timings if t.seconds is not None}
        # Phases can start together (assign starts at submission), so the total is the
        # span from the first start to the last end, not a sum.
        ends = [t.ended_at for t in timings if t.ended_at is not None]
        total = (max(ends) - timings[0].started_at).total_seconds() if ends else 0.0
        return BootstrapResult(
            slice_name=req.slice_name,
            capacity=req.capacity.value,
            queued_resource=queued_resource_name(req.project, req.zone, req.slice_name)
            if req.capacity.queued
            else None,
            nodes=self._ref.node_ids,
            vms=obs.endpoints,
            phase_seconds=seconds,
            total_seconds=total,
        )


def _require_supervisor(inp: BootstrapRunInput) -> None:
    """The phase child runs only under its slice's supervisor, which compensates for it."""
    info = workflow.info()
    slice_name = inp.request.slice_name
    if info.workflow_id not in bootstrap_run_workflow_ids(slice_name):
        raise ApplicationError(
            wrong_id_message(
                "TpuSliceBootstrapRun", info.workflow_id, bootstrap_run_workflow_ids(slice_name)[0]
            ),
            type=WRONG_ID_TYPE,
            non_retryable=True,
        )
    supervisor = bootstrap_workflow_id(slice_name)
    parent = info.parent
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


def _reraise_cancellation(err: ActivityError) -> None:
    """An activity of ours is only ever cancelled because this workflow was."""
    if isinstance(err.cause, CancelledError):
        raise asyncio.CancelledError(str(err.cause)) from None


def _last_health_report(err: ActivityError) -> HealthReport | None:
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        try:
            return HealthReport.model_validate(cause.details[0])
        except ValidationError:
            return None
    return None
