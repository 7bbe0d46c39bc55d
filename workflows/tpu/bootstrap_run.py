"""TpuSliceBootstrapRun: the runbook of one slice bootstrap, phase by phase.

    submit ─► assign ─► provision ─► ready ─► health ─► done     queued capacity
    submit ───────────────────────► ready ─► health ─► done     on-demand, preemptible

Each waiting phase has a deadline of its own (domain/tpu/phases.py: assign counts from the
submission, each later phase from the end of the one before); past it the phase looks once
more, then fails. Every way out is compensated:

| how the phases end                                  | who deletes what they created          |
|-----------------------------------------------------|----------------------------------------|
| a phase fails (deadline, terminal state, error)     | the supervisor, once this child failed |
| this child is terminated or times out               | the supervisor                         |
| a cancel: of the bootstrap, or its supervisor was   | this child, then the supervisor        |
| terminated (parent close policy REQUEST_CANCEL)     | confirms the slice is gone             |
| the create found the name held by another run       | nobody: nothing of this run exists     |

It runs only as the child of `TpuSliceBootstrap`, which shows and counts what this child
reports: a progress signal per change of its status. A cancel's compensation stuck long
enough continues as new, carrying this child's state whole (its input's `carry`).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState

with workflow.unsafe.imports_passed_through():
    from keeper.domain.tpu import failures, transitions
    from keeper.domain.tpu.models import (
        BootstrapFailure,
        BootstrapResult,
        BootstrapRunInput,
        BootstrapStatus,
        ChildProgress,
        CompensationProgress,
        CreateSliceInput,
        HealthCheckInput,
        HealthReport,
        ObserveInput,
        PhaseRunState,
        SliceRef,
    )
    from keeper.domain.tpu.observation import SliceObservation, bucket, progress_key
    from keeper.domain.tpu.phases import Phase, WaitStep, backstop, deadlines, reached, wait_plan
    from keeper.domain.tpu.status_view import render_details
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.tpu import activity_options as opts
    from keeper.workflows.tpu import calls, metrics
    from keeper.workflows.tpu.compensation import continue_if_long, delete_slice, deletion
    from keeper.workflows.tpu.errors import (
        CANCELLED_TYPE,
        FAILURE_TYPE,
        SUPERVISOR_GONE,
        cause_text,
        last_health_report,
        name_taken,
        require_supervisor,
        reraise_cancellation,
    )

PROGRESS_SIGNAL = "progress"
# The same, as ChildProgress: it names the supervisor it is for.
CHILD_PROGRESS_SIGNAL = "child-progress"
# The last look also when a wait's call was still running at the deadline (docs/operations.md,
# the patch ledger).
LAST_LOOK_PAST_DEADLINE = "tpu-last-look-past-deadline"


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
        self._held: PhaseRunState | None = None  # from the run's start on: self._state
        self._publisher = Publisher()
        self._signals: set[asyncio.Task[None]] = set()

    @workflow.query(description="Phase, deadline, QR state and VM counts of this bootstrap.")
    def status(self) -> BootstrapStatus | None:
        return self._held.status if self._held is not None else None

    @workflow.run
    async def run(self, inp: BootstrapRunInput) -> BootstrapResult:
        require_supervisor(inp)
        self._inp, req = inp, inp.request
        self._ref = SliceRef.of(req)
        self._budgets = deadlines(req)
        self._policy = await calls.read_policy()
        if inp.carry is not None:
            await self._finish_continued_compensation(inp.carry)
        self._state = PhaseRunState(status=BootstrapStatus.initial(req))
        try:
            submitted_at = workflow.now()
            obs = await self._submit()
            for step in wait_plan(req):
                started_at = submitted_at if step.from_submission else workflow.now()
                obs = await self._wait(step, started_at, obs)
            await self._health(obs)
        except PhaseFailed as failed:
            # The supervisor compensates; this failure tells it why.
            self._update(transitions.phases_failed(self._status, failed.failure, workflow.now()))
            await self._flush_signals()
            raise ApplicationError(
                failed.failure.message, failed.failure, type=FAILURE_TYPE, non_retryable=True
            ) from None
        except asyncio.CancelledError:
            self._update(transitions.compensating(self._status, workflow.now()))
            await self._compensate_on_cancel()
            raise
        self._update(transitions.entered(self._status, Phase.DONE, workflow.now()))
        await self._flush_signals()
        return transitions.bootstrap_result(req, self._ref.node_ids, self._status, obs)

    # -- the phases ----------------------------------------------------------------------

    async def _submit(self) -> SliceObservation:
        """Creates the QR or the node; every retry sends the same request id."""
        req = self._inp.request
        self._update(transitions.entered(self._status, Phase.SUBMIT, workflow.now()))
        assign_budget = self._budgets.get(Phase.ASSIGN, timedelta(0))
        create = CreateSliceInput(
            request=req,
            owner=self._inp.owner,
            request_id=self._inp.request_id,
            valid_until=backstop(assign_budget, req.poll_interval),
        )
        try:
            await calls.create_slice(create)
        except ActivityError as err:
            reraise_cancellation(err)
            kind = "taken" if name_taken(err) else "error"
            raise PhaseFailed(failures.phase_error(Phase.SUBMIT, kind, cause_text(err))) from None
        return SliceObservation(
            expected_nodes=len(self._ref.node_ids), expected_vms=req.expected_vms
        )

    async def _wait(
        self, step: WaitStep, started_at: datetime, obs: SliceObservation
    ) -> SliceObservation:
        """Polls the cloud until the step's goal is seen; fails on a terminal state, and at
        the phase's deadline unless a last look then sees the goal."""
        phase, budget = step.phase, self._budgets[step.phase]
        deadline_at = started_at + budget
        self._update(
            transitions.entered(
                self._status, phase, workflow.now(), deadline_at=deadline_at, started_at=started_at
            )
        )
        while not reached(obs, step.goal):
            self._raise_if_cancel_requested()
            _raise_if_terminal(phase, obs)
            left = deadline_at - workflow.now()
            if left <= timedelta(0):
                raise PhaseFailed(failures.deadline_failure(phase, budget, obs, self._ref.queued))
            poll = self._observe_input(phase, obs)
            try:
                obs = await calls.observe(
                    poll, left, self._inp.request.poll_interval, step.what, deadline_at
                )
            except ActivityError as err:
                final = None
                if await self._last_look_due(err, phase, deadline_at):
                    final = await calls.last_look(self._observe_input(phase, obs, final=True))
                if final is not None:
                    obs = final
                    self._update(transitions.observed(self._status, obs, workflow.now()))
                if final is None or not reached(obs, step.goal):
                    _raise_if_terminal(phase, obs)
                    raise PhaseFailed(
                        failures.deadline_failure(phase, budget, obs, self._ref.queued)
                    ) from None
                continue
            self._update(transitions.observed(self._status, obs, workflow.now()))
        _raise_if_terminal(phase, obs)
        return obs

    async def _health(self, obs: SliceObservation) -> None:
        """Probes every VM until all answer healthy; fails at health's deadline unless a last
        round then finds them all healthy."""
        req = self._inp.request
        budget = self._budgets[Phase.HEALTH]
        started_at = workflow.now()
        deadline_at = started_at + budget
        self._update(
            transitions.entered(self._status, Phase.HEALTH, started_at, deadline_at=deadline_at)
        )
        interval = opts.health_interval(req.poll_interval)
        limit = opts.health_round_limit(len(obs.endpoints), self._policy.health)
        report = HealthReport(total=len(obs.endpoints), healthy=0)
        earlier: HealthReport | None = None  # the last round that returned, in full
        # A round returns once the healthy count moved past the last one's bucket; the
        # last round at the deadline (-1) returns whatever it sees.
        first = HealthCheckInput(targets=obs.endpoints, port=req.health_port, path=req.health_path)
        probe = first
        while not report.all_healthy:
            self._raise_if_cancel_requested()
            left = deadline_at - workflow.now()
            try:
                report = await calls.health_round(probe, left, interval, deadline_at, limit)
            except ActivityError as err:
                final = None
                if await self._last_look_due(err, Phase.HEALTH, deadline_at):
                    final = await calls.last_health_round(first, limit)
                if final is None or final.end != "finished" or not final.report.all_healthy:
                    seen = final or last_health_report(err)
                    if seen is None and earlier is not None:
                        seen = failures.SeenRound(earlier, "earlier")
                    raise PhaseFailed(
                        failures.health_failure(budget, len(obs.endpoints), seen, earlier)
                    ) from None
                report = final.report
            earlier = report
            probe = first.model_copy(update={"last_bucket": bucket(report.healthy, report.total)})
            self._update(transitions.health_seen(self._status, report, workflow.now()))

    async def _last_look_due(self, err: ActivityError, phase: Phase, deadline_at: datetime) -> bool:
        """A wait's call failed: the phase fails, unless its retries ran out at the deadline
        (the server ends them early when the next would land past it, and times out one
        still running at it). Then sleep to the deadline, if it is still ahead, for one
        last look."""
        reraise_cancellation(err)
        if err.retry_state is not RetryState.TIMEOUT:
            raise PhaseFailed(failures.phase_error(phase, "error", cause_text(err))) from None
        left = deadline_at - workflow.now()
        if left <= timedelta(0):
            # The call was still running at the deadline and the server timed it out: the
            # deadline has come, so the last look is now. Runs that recorded no marker here
            # failed without one.
            return workflow.patched(LAST_LOOK_PAST_DEADLINE)
        await workflow.sleep(
            left, summary=f"{phase.value}: wait for the deadline, then look once more"
        )
        return True

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

    # -- cancelled: this child compensates ------------------------------------------------

    async def _compensate_on_cancel(self) -> None:
        """Deletes what the bootstrap created, through any number of further cancels, then
        tells the supervisor what it deleted (the supervisor then confirms it gone)."""
        self._count_orphaned()
        owner = self._inp.owner
        delete = deletion(self._ref, owner.workflow_id, owner.run_id, "bootstrap cancelled")
        report, _ = await run_to_completion(
            delete_slice(
                delete, self._policy.compensation, self._compensation_progress, self._state.progress
            )
        )
        self._update(transitions.compensated_on_cancel(self._status, report, workflow.now()))
        await self._flush_signals()
        if self._state.orphaned:
            metrics.compensation("finished")

    async def _compensation_progress(self, progress: CompensationProgress) -> None:
        self._state = self._state.model_copy(update={"progress": progress})
        # The supervisor, waiting for this child, shows and counts its progress; once a
        # signal found it gone, this child's own details are what shows.
        status = transitions.compensation_seen(self._status, progress, workflow.now())
        self._update(status, tell_supervisor=not self._state.orphaned)
        self._count_orphaned()
        # The owner rides in the input, so ownership checks are the same in the next run.
        await continue_if_long(
            f"compensation of {self._ref.slice_name}",
            progress,
            lambda: workflow.continue_as_new(self._inp.model_copy(update={"carry": self._state})),
        )

    async def _finish_continued_compensation(self, carry: PhaseRunState) -> NoReturn:
        """A continued run of a stuck cancel-path compensation: it compensates, then closes
        as the cancel it carries on, for its supervisor, or failed, when nobody waits."""
        assert carry.progress is not None
        req = self._inp.request
        self._state = carry
        self._update(transitions.continued(carry.status, carry.progress, workflow.now()))
        await self._compensate_on_cancel()
        finished = failures.continued_compensation_finished(self._status.compensation)
        supervisor = self._inp.parent_workflow_id
        if self._state.orphaned:
            raise ApplicationError(
                failures.orphan_closing(req.slice_name, supervisor, finished),
                type=CANCELLED_TYPE,
                non_retryable=True,
            )
        # Its supervisor waits for it (the last signal, with the report, reached it) and
        # closes the bootstrap as cancelled on a cancelled failure; an ApplicationError would
        # read to it as the phases failing.
        raise CancelledError(failures.cancel_closing(req.slice_name, supervisor, finished))

    # -- the status, and the supervisor told of it ---------------------------------------

    @property
    def _state(self) -> PhaseRunState:
        assert self._held is not None
        return self._held

    @_state.setter
    def _state(self, state: PhaseRunState) -> None:
        self._held = state

    @property
    def _status(self) -> BootstrapStatus:
        return self._state.status

    def _update(self, status: BootstrapStatus, *, tell_supervisor: bool = True) -> None:
        """The one way the status changes: shown in the details and, as a new revision,
        signalled to the supervisor."""
        if tell_supervisor:
            status = transitions.revised(status)
        self._state = self._state.model_copy(update={"status": status})
        self._publisher.publish(render_details(status))
        if tell_supervisor:
            # From a task of its own: a cancel that lands while the main task awaits a
            # signal that has already been delivered is swallowed by that await, and the
            # workflow would go on polling as if nobody had asked it to stop.
            task = asyncio.create_task(self._signal_supervisor(status))
            self._signals.add(task)
            task.add_done_callback(self._signals.discard)

    async def _signal_supervisor(self, status: BootstrapStatus) -> None:
        supervisor = workflow.get_external_workflow_handle(self._inp.parent_workflow_id)
        # By workflow id, which a later bootstrap of the name takes too: the signal says whose
        # child it is, and only that supervisor takes it. Run ids would not do: the supervisor
        # continues as new while its compensation is stuck, and this child goes on reporting.
        try:
            if self._inp.name_the_supervisor:
                named = ChildProgress(status=status, supervisor=self._inp.owner)
                await supervisor.signal(CHILD_PROGRESS_SIGNAL, named)
            else:
                await supervisor.signal(PROGRESS_SIGNAL, status)
        except (ApplicationError, asyncio.CancelledError) as err:
            # Progress is best effort; the supervisor may be gone (terminated).
            workflow.logger.debug("supervisor did not take the progress signal: %s", err)
            if isinstance(err, ApplicationError) and err.type == SUPERVISOR_GONE:
                self._state = self._state.model_copy(update={"orphaned": True})
                self._count_orphaned()
        else:
            if status.compensation_stuck:
                # The supervisor took it and counted the compensation stuck: should it be
                # terminated later, this child's own count skips stuck.
                self._state = transitions.counted(self._state, "stuck")

    def _count_orphaned(self) -> None:
        """A compensation nobody else counts (transitions.orphan_counts)."""
        self._state, due = transitions.orphan_counts(self._state)
        for event in due:
            metrics.compensation(event)

    async def _flush_signals(self) -> None:
        # A workflow that closes with a signal still in flight loses it (the supervisor
        # would miss the final state), so the last ones are awaited before closing.
        if self._signals:
            await workflow.wait(list(self._signals))

    def _raise_if_cancel_requested(self) -> None:
        """Belt and braces for any await that might swallow a cancellation."""
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError(workflow.cancellation_reason())


def _raise_if_terminal(phase: Phase, obs: SliceObservation) -> None:
    failure = failures.terminal_failure(phase, obs)
    if failure is not None:
        raise PhaseFailed(failure)
