"""JobWatch: a durable babysitter for one long iris/zephyr job, from first check to its end.

Workflow id `job-watch-<job id>` (one watch per job). It runs the babysitting runbook
(docs/watch.md): a smoke check while the children come up, then steady checks at a cadence
that sees about one stage transition each, following retries to the latest attempt, and
escalating with evidence. Every check is one `watch.observe` activity (a fresh read of the
controller, the coordinator's logs, thread dump and CPU counters); domain/watch/assess.py
turns it into a verdict (running, stalled, unknown), escalations and proposals.

    observe ─► assess ─► [probe ─► confirm] ─► alert? ─► next check, due after the interval
       ▲                                                  (an approval cancels the wait)
       └──────────────── continue-as-new when long ───────────────┘
    approve(stop)    ─► terminate the job ─────────────────────────────────► done (stopped)
    approve(restart) ─► check the relaunch ─► terminate ─► relaunch ─► watch the new job ─► done

Nothing destructive happens without an operator: a proposal waits for the `approve` update
(its validator refuses an unknown, decided or withdrawn proposal, and a restart keeper holds
nothing to launch for); the default is to alert.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior, WorkflowIDReusePolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    WorkflowAlreadyStartedError,
    is_cancelled_exception,
)
from temporalio.workflow import ActivityHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from keeper.activities.watch.actions import WatchActions
    from keeper.activities.watch.observe import WatchObserver
    from keeper.activities.watch.policy import WatchPolicySource
    from keeper.domain.common.alerts import make_alert, watch_notice_kind
    from keeper.domain.watch.assess import (
        Assessment,
        approval_refusal,
        assess,
        confirm,
        decide,
        finish_action,
        new_state,
        refusal,
        render_details,
    )
    from keeper.domain.watch.calls import (
        JobWatchInput,
        JobWatchResult,
        Notice,
        ObserveCall,
        ProbeSeen,
        RelaunchCall,
        StopCall,
    )
    from keeper.domain.watch.closing import closed
    from keeper.domain.watch.models import (
        APPROVE_UPDATE,
        DENY_UPDATE,
        STATUS_QUERY,
        WATCH_WORKFLOW_TYPE,
        Decision,
        Proposal,
        ProposalKind,
        ProposalState,
        WatchOutcome,
        WatchView,
        watch_id,
    )
    from keeper.domain.watch.names import JobPhase
    from keeper.domain.watch.policy import WatchPolicy
    from keeper.domain.watch.relaunch import launched_text
    from keeper.domain.watch.state import WatchState, rolled_over, scheduled
    from keeper.runtime.watch import search_attributes as sa
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.common.rollover import handlers_finished, history_is_long
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.watch import activity_options as opts
    from keeper.workflows.watch import metrics

C = TypeVar("C")
R = TypeVar("R")


@workflow.defn(
    name=WATCH_WORKFLOW_TYPE,
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class JobWatch:
    def __init__(self) -> None:
        self._inp: JobWatchInput | None = None
        self._policy: WatchPolicy | None = None
        self._state: WatchState | None = None
        # Approved proposals, in order, for the main loop to carry out (the first is the one
        # being carried out).
        self._approved: list[str] = []
        self._alerts: list[ActivityHandle[bool]] = []
        self._publisher = Publisher()
        # The wait before the next check: the check's own activity waits it out.
        self._wait = timedelta(0)

    # ---- what an operator sees and says ----------------------------------------------

    @workflow.query(name=STATUS_QUERY, description="Phase, verdict, evidence, proposals, timeline.")
    def status(self) -> WatchView | None:
        return self._state.view if self._state is not None else None

    @workflow.update(name=APPROVE_UPDATE, description="Approve a proposal: keeper carries it out.")
    async def approve(self, decision: Decision) -> Proposal:
        state = self._state
        assert state is not None
        # Two approvals validated in one task: the first decides; the second only waits for
        # the same step and answers with it (the step runs once, and who approved stays).
        if self._proposal(decision.proposal).state is ProposalState.PENDING:
            self._state = decide(state, decision, workflow.now(), approve=True)
            self._approved.append(decision.proposal)
            self._publish()
        # Answers when the step is done (or failed), so `keeper job approve` shows its outcome.
        await workflow.wait_condition(
            lambda: self._proposal(decision.proposal).state is not ProposalState.APPROVED
        )
        return self._proposal(decision.proposal)

    @approve.validator
    def _approvable(self, decision: Decision) -> None:
        inp, state = self._inp, self._state
        if inp is None or state is None:
            raise ValueError("the watch has not started yet")
        problem = approval_refusal(state.view, decision, inp.launch)
        if problem is not None:
            raise ValueError(problem)

    @workflow.update(name=DENY_UPDATE, description="Deny a proposal: keeper only keeps watching.")
    def deny(self, decision: Decision) -> Proposal:
        state = self._state
        assert state is not None
        self._state = decide(state, decision, workflow.now(), approve=False)
        self._publish()
        return self._proposal(decision.proposal)

    @deny.validator
    def _deniable(self, decision: Decision) -> None:
        if self._state is None:
            raise ValueError("the watch has not started yet")
        problem = refusal(self._state.view, decision.proposal)
        if problem is not None:
            raise ValueError(problem)

    def _proposal(self, proposal_id: str) -> Proposal:
        assert self._state is not None
        return next(p for p in self._state.view.proposals if p.id == proposal_id)

    # ---- the watch ---------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: JobWatchInput) -> JobWatchResult:
        self._inp = inp
        self._state = inp.carry or new_state(inp, workflow.now())
        # Also sets JobId on a watch started by hand (`temporal workflow start`).
        self._publish()
        try:
            self._policy = await workflow.execute_local_activity_method(
                WatchPolicySource.policy,
                start_to_close_timeout=opts.POLICY_START_TO_CLOSE,
                summary="read the worker's watch settings",
            )
            return await self._watch()
        except (asyncio.CancelledError, CancelledError, ActivityError) as err:
            # (A cancel arrives as asyncio's in a wait, wrapped in an activity's.)
            if not is_cancelled_exception(err):
                raise
            # `keeper job unwatch`: only the watch ends; the job runs on, untouched. Nothing
            # the watch made needs releasing: an approved step cut short by the unwatch (a
            # stop sent, a relaunch made) is said in the proposal's outcome, and a relaunched
            # job has a watch of its own once keeper started it.
            self._drop_approved(ProposalState.FAILED, "the watch was ended first")
            return await self._close(self._result(WatchOutcome.UNWATCHED))

    async def _watch(self) -> JobWatchResult:
        policy = self._policy
        assert policy is not None
        while True:
            if self._approved:
                # Listed until carried out, so an unwatch meanwhile settles it (below).
                result = await self._carry_out(self._approved[0])
                if result is not None:
                    return result
                self._approved.pop(0)
                continue
            assessment = await self._check()
            if assessment is None:
                continue  # an approval cut the wait short: carry it out first
            if assessment.result is not None:
                # An approval that came in while the job ended: nothing left to carry out.
                ended = f"the job ended {assessment.result.job_state} before keeper acted"
                self._drop_approved(ProposalState.WITHDRAWN, ended)
                return await self._close(assessment.result)
            queued = self._state is not None and self._state.view.job_state == JobPhase.PENDING
            if queued and not self._approved:
                await self._await_scheduled()
                continue
            if history_is_long(policy.history_events_limit) and not self._approved:
                await self._settle_alerts()
                # An approval that arrives meanwhile is carried out before the roll-over.
                if await handlers_finished(unless=lambda: bool(self._approved)):
                    assert self._inp is not None and self._state is not None
                    carry = rolled_over(self._state)
                    workflow.continue_as_new(self._inp.model_copy(update={"carry": carry}))
                continue
            self._wait = assessment.interval

    async def _check(self) -> Assessment | None:
        """One check; None when an approval came in while it waited to be due."""
        state, policy = self._state, self._policy
        assert state is not None and policy is not None
        job, wait, self._wait = state.view.job_id, self._wait, timedelta(0)
        # The check waits inside its own activity (its first attempt answers "not due",
        # retried when due): no timer, one workflow task a check.
        due = f" at {workflow.now() + wait:%Y-%m-%dT%H:%M:%SZ}" if wait else ""
        check = workflow.start_activity_method(
            WatchObserver.observe,
            ObserveCall(job_id=job, reading=state.reading, wait_s=wait.total_seconds()),
            start_to_close_timeout=opts.OBSERVE_START_TO_CLOSE,
            heartbeat_timeout=opts.CHECK_HEARTBEAT,
            retry_policy=opts.READ_RETRY,
            summary=f"check {job}{due}",
        )
        if wait:
            await workflow.wait_condition(lambda: check.done() or bool(self._approved))
            if not check.done():
                # An approval ends the wait at once: the check not yet made is dropped.
                check.cancel()
                with contextlib.suppress(ActivityError, CancelledError):
                    await check
                return None
        # A decision that comes in while the check reads iris stands: the check is judged on
        # top of it (below).
        observation = await check
        # Judged on the state as it is now, never the one from before the read.
        assessment = assess(policy, self._state, observation, workflow.now(), workflow.time())
        if assessment.probe is not None:
            try:
                probe = await workflow.execute_activity_method(
                    WatchObserver.probe,
                    assessment.probe,
                    start_to_close_timeout=opts.PROBE_START_TO_CLOSE,
                    schedule_to_close_timeout=opts.PROBE_SCHEDULE_TO_CLOSE,
                    heartbeat_timeout=opts.CHECK_HEARTBEAT,
                    retry_policy=opts.PROBE_RETRY,
                    summary=f"confirm by a CPU delta probe: {assessment.probe.describe()}",
                )
            except ActivityError:
                # No probe could be taken: the arbiter decides as for an unreadable process.
                probe = ProbeSeen(error="the probe failed")
            # The probe answered no later than now: one that came long after its check (the
            # watcher was held up between them) confirms nothing.
            assessment = confirm(
                policy, assessment, probe, workflow.now(), self._state, mono=workflow.time()
            )
        self._state = assessment.state
        metrics.verdict(self._state.view.verdict)
        for notice in assessment.notices:
            self._alert(notice)
        self._publish()
        return assessment

    async def _await_scheduled(self) -> None:
        """One activity that fails until the queued job is scheduled: its retry policy is the
        poll, so hours in the queue are a handful of events."""
        state, policy = self._state, self._policy
        assert state is not None and policy is not None
        await workflow.execute_activity_method(
            WatchObserver.await_scheduled,
            state.view.job_id,
            start_to_close_timeout=opts.AWAIT_SCHEDULED_START_TO_CLOSE,
            retry_policy=opts.await_scheduled_retry(
                policy.cadence.smoke_interval, policy.cadence.max_interval
            ),
            summary=f"wait for {state.view.job_id} to leave the queue",
        )
        self._state = scheduled(self._state, workflow.now())

    async def _carry_out(self, proposal_id: str) -> JobWatchResult | None:
        """An approved proposal, to the end. Every step is idempotent: a job already gone
        is stopped, a relaunch keeper already made is found again (its name is fixed)."""
        state, inp = self._state, self._inp
        assert state is not None and inp is not None
        proposal = self._proposal(proposal_id)
        if proposal.state is not ProposalState.APPROVED:
            return None  # decided otherwise meanwhile: nothing to carry out
        job = state.view.job_id
        relaunch = RelaunchCall(
            job_id=job,
            restart=inp.restarts + 1,
            proposal=proposal.id,
            launch=inp.launch,
            command=proposal.command,
        )
        try:
            if proposal.kind is ProposalKind.RESTART:
                # What the relaunch will send, checked before the job is stopped: a restart
                # keeper cannot carry out stops nothing.
                await _act(
                    WatchActions.prepare_relaunch,
                    relaunch,
                    f"check what a relaunch of {job} would send ({proposal.id})",
                )
            stopped = await _act(
                WatchActions.stop,
                StopCall(job_id=job, proposal=proposal.id),
                f"stop {job} ({proposal.id}, approved by {proposal.decided_by})",
            )
            if proposal.kind is ProposalKind.STOP:
                self._settle(proposal.id, ProposalState.DONE, stopped.detail)
                return await self._close(
                    self._result(WatchOutcome.STOPPED, job_state=stopped.job_state)
                )
            how = "the operator's command" if proposal.command else "keeper's own request"
            relaunched = await _act(
                WatchActions.relaunch, relaunch, f"relaunch {job} with {how} ({proposal.id})"
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            # Refused, or not done within its time: say so, loudly, and keep watching.
            self._settle(proposal.id, ProposalState.FAILED, _cause(err))
            self._alert(
                Notice(
                    key=f"{proposal.id}/failed",
                    title=f"{proposal.kind.value} of {job} failed",
                    lines=[_cause(err)],
                )
            )
            return None
        new_job, new_watch = relaunched.job_id, watch_id(relaunched.job_id)
        # Already started: the new job is watched (a replayed relaunch, or an operator).
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await workflow.start_child_workflow(
                WATCH_WORKFLOW_TYPE,
                JobWatchInput(
                    job_id=new_job,
                    requested_by=proposal.decided_by or "",
                    restart_of=job,
                    restarts=inp.restarts + 1,
                    launch=relaunched.launched,
                ),
                id=new_watch,
                task_queue=workflow.info().task_queue,
                parent_close_policy=ParentClosePolicy.ABANDON,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=sa.for_job(new_job),
                static_summary=f"watch {new_job} (restart of {job})",
            )
        outcome = launched_text(
            new_job,
            command=proposal.command is not None,
            from_iris=inp.launch is None,
            dropped=relaunched.dropped_env,
        )
        self._settle(proposal.id, ProposalState.DONE, outcome)
        return await self._close(
            self._result(
                WatchOutcome.RESTARTED,
                job_state=stopped.job_state,
                new_job_id=new_job,
                new_watch_id=new_watch,
            )
        )

    def _settle(self, proposal_id: str, to: ProposalState, outcome: str) -> None:
        assert self._state is not None
        self._state = finish_action(self._state, proposal_id, to, outcome, workflow.now())
        self._publish()

    def _drop_approved(self, to: ProposalState, outcome: str) -> None:
        """The watch ends first: every approved step not carried out is settled `to`."""
        for proposal_id in self._approved:
            if self._proposal(proposal_id).state is ProposalState.APPROVED:
                self._settle(proposal_id, to, outcome)
        self._approved.clear()

    def _result(self, outcome: WatchOutcome, **fields: str | None) -> JobWatchResult:
        assert self._state is not None
        view = self._state.view
        return JobWatchResult(
            job_id=view.job_id,
            outcome=outcome,
            job_state=fields.pop("job_state", None) or view.job_state,
            cause=view.cause,
            verdicts=view.verdicts,
            **fields,
        )

    async def _close(self, result: JobWatchResult) -> JobWatchResult:
        """The watch closes with `result`, once its alerts in flight are sent and every
        operator's decision is answered; from then on it shows the job as it left it, and
        nothing left to decide."""
        # The end is decided: an unwatch that lands while these wait changes nothing.
        await run_to_completion(self._settled())
        assert self._state is not None
        # Unwatched before the policy was read: the default timeline bound.
        limit = (self._policy or WatchPolicy()).timeline_limit
        self._state = closed(self._state, result, workflow.now(), limit)
        self._publish()
        return result

    # ---- alerts --------------------------------------------------------------------------

    def _alert(self, notice: Notice) -> None:
        """Raised from an activity, never awaited here: a slow webhook does not hold the
        watch. A notice's key is told once per watch (the state carries it across runs)."""
        self._alerts = [h for h in self._alerts if not h.done()]
        kind, wid = watch_notice_kind(notice.key), workflow.info().workflow_id
        alert = make_alert(kind, wid, notice.key, notice.title, notice.lines)
        self._alerts.append(raise_alert(alert))

    async def _settled(self) -> None:
        await self._settle_alerts()
        await handlers_finished()

    async def _settle_alerts(self) -> None:
        pending = [h for h in self._alerts if not h.done()]
        if pending:
            await workflow.wait(pending, timeout=opts.ALERTS_SETTLE.total_seconds())
        self._alerts = []

    # ---- plumbing ------------------------------------------------------------------------

    def _publish(self) -> None:
        assert self._state is not None
        view = self._state.view
        self._publisher.publish(
            render_details(view),
            [
                sa.JOB_ID.value_set(view.job_id),
                sa.KEEPER_STEP.value_set(view.job_state),
                sa.VERDICT.value_set([view.verdict]),
            ],
        )


async def _act(method: Callable[[WatchActions, C], Awaitable[R]], call: C, summary: str) -> R:
    """One approved step's activity: retried until the controller answers, given up after
    ACTION_SCHEDULE_TO_CLOSE."""
    return await workflow.execute_activity_method(
        method,
        call,
        start_to_close_timeout=opts.ACTION_START_TO_CLOSE,
        schedule_to_close_timeout=opts.ACTION_SCHEDULE_TO_CLOSE,
        retry_policy=opts.ACTION_RETRY,
        summary=summary,
    )


def _cause(err: BaseException) -> str:
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    return str(cause) if isinstance(cause, ApplicationError) else type(cause).__name__
