"""JobWatch: a durable babysitter for one long iris/zephyr job, from first check to its end.

Workflow id `job-watch-<job id>` (one watch per job). It runs the babysitting runbook
(docs/watch.md): a smoke check while the children come up, then steady checks at a cadence
that sees about one stage transition each, following retries to the latest attempt, and
escalating with evidence. Every check is one `observe` activity (a fresh read of the
controller, the coordinator's logs, thread dump and CPU counters); domain/watch/assess.py
turns it into a verdict (running, stalled, unknown), escalations and proposals.

    observe ─► assess ─► [probe ─► confirm] ─► notify? ─► wait (interval, or an approval)
       ▲                                                    │
       └──────────────── continue-as-new when long ─────────┘
    approve(stop)    ─► terminate the job ─────────────────────► done (stopped)
    approve(restart) ─► terminate ─► relaunch the original ─► watch the new job ─► done

Nothing destructive happens without an operator: a proposal waits for the `approve` update
(its validator refuses an unknown, decided or withdrawn proposal); the default is to notify.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import NoReturn

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
    from keeper.activities.watch.notify import WatchNotifier
    from keeper.activities.watch.observe import WatchObserver
    from keeper.domain.common.alerts import make_alert, watch_notice_kind
    from keeper.domain.watch.assess import (
        Assessment,
        WatchState,
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
        Observation,
        ObserveCall,
        ProbeSeen,
        RelaunchCall,
        StopCall,
        WatchCarry,
    )
    from keeper.domain.watch.closing import close_view
    from keeper.domain.watch.escalation import Proposal as EscalationProposal
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
    from keeper.domain.watch.relaunch import HeldLaunch, launched_text, relaunch_problem
    from keeper.runtime.watch import search_attributes as sa
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.watch import activity_options as opts
    from keeper.workflows.watch import metrics


# Runs past this patch wait for a queued job in one activity that retries until the job is
# scheduled, instead of a check per poll.
AWAIT_SCHEDULED = "watch-await-scheduled"
# Runs past this patch tell operators through keeper's shared alert channel (keeper.alert)
# rather than the watch's own notify activity.
ALERTS_WATCH = "alerts-watch"
# Runs past this patch close truthfully: the view and the search attributes show the job as
# the watch left it (killed by an approved restart, say), the verdict `finished`, and no
# proposal left pending (domain/watch/closing.py).
CLOSE_TRUTHFULLY = "watch-close-truthfully"
# Runs past this patch escalate stragglers without proposing a restart (the runbook: escalate
# to debug), unless watch.escalation.straggler_step asks for one; runs before it proposed one.
STRAGGLERS_ESCALATE = "watch-stragglers-escalate"
# Runs past this patch wait between checks inside the next check's activity (its first
# attempt answers "not due" and is retried when due), not on a timer: 6 history events a
# check instead of 11 (no timer, one workflow task instead of two). An approval cancels the
# waiting check.
CHECK_WAITS_IN_ACTIVITY = "watch-check-waits-in-activity"
# Runs past this patch give the delta probe a schedule-to-close and confirm() the time the
# probe answered, so a probe held up past the observer gap confirms no stall.
PROBE_DEADLINE = "watch-probe-deadline"
# Runs past this patch check what an approved restart would launch before stopping the job
# (the request keeper holds, or the operator's command; never iris's redacted one), so a
# restart keeper cannot carry out stops nothing.
RELAUNCH_HELD = "watch-relaunch-held-request"
# Runs past this patch take a PREEMPTED coordinator as ended (iris marks a task PREEMPTED only
# once its preemption budget is spent); runs before it took it as waiting to be rescheduled.
PREEMPTED_TERMINAL = "watch-preempted-terminal"


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
        # Approved proposals, in order, for the main loop to carry out.
        self._approved: list[str] = []
        self._notices: list[ActivityHandle[bool]] = []
        self._sa: tuple[str, str] | None = None
        # The wait before the next check, when the check itself waits (CHECK_WAITS_IN_ACTIVITY).
        self._wait: timedelta | None = None

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
        await workflow.wait_condition(lambda: self._proposal_settled(decision.proposal))
        return self._proposal(decision.proposal)

    @approve.validator
    def _approvable(self, decision: Decision) -> None:
        # A restart keeper holds nothing to launch for is refused here: nothing is stopped.
        self._validate_approval(decision)

    @workflow.update(name=DENY_UPDATE, description="Deny a proposal: keeper only keeps watching.")
    def deny(self, decision: Decision) -> Proposal:
        state = self._state
        assert state is not None
        self._state = decide(state, decision, workflow.now(), approve=False)
        self._publish()
        return self._proposal(decision.proposal)

    @deny.validator
    def _deniable(self, decision: Decision) -> None:
        self._validate(decision)

    def _validate(self, decision: Decision) -> None:
        problem = (
            "the watch has not started yet"
            if self._state is None
            else refusal(self._state.view, decision.proposal)
        )
        if problem is not None:
            raise ValueError(problem)

    def _validate_approval(self, decision: Decision) -> None:
        self._validate(decision)
        inp, proposal = self._inp, self._proposal(decision.proposal)
        assert inp is not None
        if proposal.kind is not ProposalKind.RESTART:
            if decision.command is not None:
                raise ValueError(
                    f"{proposal.id} is a {proposal.kind.value}: only a restart takes a command"
                )
            return
        problem = relaunch_problem(inp.job_id, proposal.id, inp.launch, decision.command)
        if problem is not None:
            raise ValueError(problem)

    def _proposal(self, proposal_id: str) -> Proposal:
        assert self._state is not None
        return next(p for p in self._state.view.proposals if p.id == proposal_id)

    def _proposal_settled(self, proposal_id: str) -> bool:
        return self._proposal(proposal_id).state is not ProposalState.APPROVED

    # ---- the watch ---------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: JobWatchInput) -> JobWatchResult:
        self._inp = inp
        self._policy = await workflow.execute_activity_method(
            WatchObserver.policy,
            start_to_close_timeout=opts.READ_START_TO_CLOSE,
            retry_policy=opts.READ_RETRY,
            summary="read the worker's watch settings",
        )
        if not workflow.patched(STRAGGLERS_ESCALATE):
            escalation = self._policy.escalation.model_copy(
                update={"straggler_step": EscalationProposal.RESTART}
            )
            self._policy = self._policy.model_copy(update={"escalation": escalation})
        self._state = inp.carry.state if inp.carry is not None else new_state(inp, workflow.now())
        if workflow.info().typed_search_attributes.get(sa.JOB_ID) is None:
            # Started by hand (`temporal workflow start`): findable by job anyway.
            workflow.upsert_search_attributes([sa.JOB_ID.value_set(inp.job_id)])
        self._publish()
        try:
            return await self._watch()
        except (asyncio.CancelledError, CancelledError, ActivityError) as err:
            # (A cancel arrives as asyncio's in a timer or wait, wrapped in an activity's.)
            if not is_cancelled_exception(err):
                raise
            # `keeper job unwatch`: only the watch ends; the job runs on, untouched. Nothing
            # the watch made needs releasing: an approved step cut short by the unwatch (a
            # stop sent, a relaunch made) is said in the proposal's outcome, and a relaunched
            # job has a watch of its own once keeper started it.
            for proposal_id in self._approved:
                self._settle(proposal_id, ProposalState.FAILED, "the watch was ended first")
            self._approved.clear()
            await self._settle_notices()
            return self._closing(self._result(WatchOutcome.UNWATCHED))

    async def _watch(self) -> JobWatchResult:
        while True:
            if self._approved:
                result = await self._carry_out(self._approved.pop(0))
                if result is not None:
                    return result
                continue
            assessment = await self._check()
            if assessment is None:
                continue  # an approval cut the wait short: carry it out first
            if assessment.result is not None:
                # An approval that came in while the job ended: nothing left to carry out.
                for proposal_id in self._approved:
                    self._settle(
                        proposal_id,
                        ProposalState.WITHDRAWN,
                        f"the job ended {assessment.result.job_state} before keeper acted",
                    )
                self._approved.clear()
                await self._settle_notices()
                await workflow.wait_condition(workflow.all_handlers_finished)
                return self._closing(assessment.result)
            if self._queued() and workflow.patched(AWAIT_SCHEDULED):
                await self._await_scheduled()
                continue
            if self._history_is_long() and not self._approved:
                await self._settle_notices()
                # An approval that arrives meanwhile is carried out before the roll-over.
                await workflow.wait_condition(
                    lambda: workflow.all_handlers_finished() or bool(self._approved)
                )
                if not self._approved:
                    self._continue_as_new()
                continue
            if workflow.patched(CHECK_WAITS_IN_ACTIVITY):
                self._wait = assessment.interval
                continue
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: bool(self._approved), timeout=assessment.interval
                )

    async def _check(self) -> Assessment | None:
        """One check; None when an approval came in while it waited to be due."""
        state, policy = self._state, self._policy
        assert state is not None and policy is not None
        wait, self._wait = self._wait, None
        if not wait:
            observation = await workflow.execute_activity_method(
                WatchObserver.observe,
                ObserveCall(job_id=state.view.job_id, reading=state.reading),
                start_to_close_timeout=opts.OBSERVE_START_TO_CLOSE,
                heartbeat_timeout=opts.CHECK_HEARTBEAT,
                retry_policy=opts.READ_RETRY,
                summary=f"check {state.view.job_id}",
            )
        else:
            due = workflow.now() + wait
            check = workflow.start_activity_method(
                WatchObserver.observe,
                ObserveCall(
                    job_id=state.view.job_id, reading=state.reading, wait_s=wait.total_seconds()
                ),
                start_to_close_timeout=opts.OBSERVE_START_TO_CLOSE,
                heartbeat_timeout=opts.CHECK_HEARTBEAT,
                retry_policy=opts.READ_RETRY,
                summary=f"check {state.view.job_id} at {due:%Y-%m-%dT%H:%M:%SZ}",
            )
            await workflow.wait_condition(lambda: check.done() or bool(self._approved))
            if not check.done():
                # An approval ends the wait at once: the check not yet made is dropped.
                check.cancel()
                with contextlib.suppress(ActivityError, CancelledError):
                    await check
                return None
            observation = await check
        observation = _preempted_as_before(observation)
        # An operator's decision may have come in while the activity ran: judge on top of
        # the state as it is now, never the one from before the read.
        state = self._state
        assessment = assess(policy, state, observation, workflow.now(), workflow.time())
        if assessment.probe is not None:
            timed = workflow.patched(PROBE_DEADLINE)
            try:
                probe = await workflow.execute_activity_method(
                    WatchObserver.probe,
                    assessment.probe,
                    start_to_close_timeout=opts.PROBE_START_TO_CLOSE,
                    schedule_to_close_timeout=opts.PROBE_SCHEDULE_TO_CLOSE if timed else None,
                    heartbeat_timeout=opts.CHECK_HEARTBEAT,
                    retry_policy=opts.PROBE_RETRY,
                    summary=f"confirm by a CPU delta probe: {assessment.probe.describe()}",
                )
            except ActivityError:
                # No probe could be taken: the arbiter decides as for an unreadable process.
                probe = ProbeSeen(error="the probe failed")
            # The probe answered no later than now: one that came long after its check (the
            # watcher was held up between them) confirms nothing.
            mono = workflow.time() if timed else None
            assessment = confirm(policy, assessment, probe, workflow.now(), self._state, mono=mono)
        self._state = assessment.state
        metrics.verdict(self._state.view.verdict)
        for notice in assessment.notices:
            self._notify(notice)
        self._publish()
        return assessment

    def _queued(self) -> bool:
        view = self._state.view if self._state is not None else None
        return view is not None and view.job_state == JobPhase.PENDING.value and not self._approved

    async def _await_scheduled(self) -> None:
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
        # The smoke window starts when the job does, not when it was queued.
        phase = state.phase.model_copy(update={"since": workflow.now()})
        self._state = state.model_copy(update={"phase": phase})

    async def _carry_out(self, proposal_id: str) -> JobWatchResult | None:
        """An approved proposal, to the end. Both steps are idempotent: a job already gone
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
            if proposal.kind is ProposalKind.RESTART and workflow.patched(RELAUNCH_HELD):
                await workflow.execute_activity_method(
                    WatchActions.prepare_relaunch,
                    relaunch,
                    start_to_close_timeout=opts.ACTION_START_TO_CLOSE,
                    schedule_to_close_timeout=opts.ACTION_SCHEDULE_TO_CLOSE,
                    retry_policy=opts.ACTION_RETRY,
                    summary=f"check what a relaunch of {job} would send ({proposal.id})",
                )
            stopped = await workflow.execute_activity_method(
                WatchActions.stop,
                StopCall(job_id=job, proposal=proposal.id),
                start_to_close_timeout=opts.ACTION_START_TO_CLOSE,
                schedule_to_close_timeout=opts.ACTION_SCHEDULE_TO_CLOSE,
                retry_policy=opts.ACTION_RETRY,
                summary=f"stop {job} ({proposal.id}, approved by {proposal.decided_by})",
            )
            if proposal.kind is ProposalKind.STOP:
                self._settle(proposal.id, ProposalState.DONE, stopped.detail)
                return self._closing(
                    self._result(WatchOutcome.STOPPED, job_state=stopped.job_state)
                )
            how = "the operator's command" if proposal.command else "keeper's own request"
            relaunched = await workflow.execute_activity_method(
                WatchActions.relaunch,
                relaunch,
                start_to_close_timeout=opts.ACTION_START_TO_CLOSE,
                schedule_to_close_timeout=opts.ACTION_SCHEDULE_TO_CLOSE,
                retry_policy=opts.ACTION_RETRY,
                summary=f"relaunch {job} with {how} ({proposal.id})",
            )
        except ActivityError as err:
            if is_cancelled_exception(err):
                raise
            # Refused, or not done within its time: say so, loudly, and keep watching.
            self._settle(proposal.id, ProposalState.FAILED, _cause(err))
            self._notify(
                Notice(
                    key=f"{proposal.id}/failed",
                    title=f"{proposal.kind.value} of {job} failed",
                    lines=[_cause(err)],
                )
            )
            return None
        new_watch = watch_id(relaunched.job_id)
        # Already started: the new job is watched (a replayed relaunch, or an operator).
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._start_watch_of(
                relaunched.job_id, new_watch, job, proposal, relaunched.launched
            )
        outcome = launched_text(
            relaunched.job_id,
            command=proposal.command is not None,
            from_iris=inp.launch is None,
            dropped=relaunched.dropped_env,
        )
        self._settle(proposal.id, ProposalState.DONE, outcome)
        return self._closing(
            self._result(
                WatchOutcome.RESTARTED,
                job_state=stopped.job_state,
                new_job_id=relaunched.job_id,
                new_watch_id=new_watch,
            )
        )

    async def _start_watch_of(
        self,
        new_job: str,
        new_watch: str,
        old_job: str,
        proposal: Proposal,
        launched: HeldLaunch | None,
    ) -> None:
        inp = self._inp
        assert inp is not None
        await workflow.start_child_workflow(
            WATCH_WORKFLOW_TYPE,
            JobWatchInput(
                job_id=new_job,
                requested_by=proposal.decided_by or "",
                restart_of=old_job,
                restarts=inp.restarts + 1,
                launch=launched,
            ),
            id=new_watch,
            task_queue=workflow.info().task_queue,
            parent_close_policy=ParentClosePolicy.ABANDON,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            search_attributes=sa.for_job(new_job),
            static_summary=f"watch {new_job} (restart of {old_job})",
        )

    def _settle(self, proposal_id: str, to: ProposalState, outcome: str) -> None:
        assert self._state is not None
        self._state = finish_action(self._state, proposal_id, to, outcome, workflow.now())
        self._publish()

    def _result(self, outcome: WatchOutcome, **fields: str | None) -> JobWatchResult:
        assert self._state is not None
        view = self._state.view
        return JobWatchResult(
            job_id=view.job_id,
            outcome=outcome,
            job_state=fields.pop("job_state", None) or view.job_state,
            cause=view.cause,
            verdicts=len(view.timeline) + view.timeline_dropped,
            **fields,
        )

    def _closing(self, result: JobWatchResult) -> JobWatchResult:
        """The watch closes with `result`: what it shows from now on is the job as it left
        it, and nothing left to decide."""
        state, policy = self._state, self._policy
        if state is not None and policy is not None and workflow.patched(CLOSE_TRUTHFULLY):
            view = close_view(state.view, result, workflow.now(), policy.timeline_limit)
            self._state = state.model_copy(update={"view": view})
            self._publish()
        return result

    # ---- notifications -----------------------------------------------------------------

    def _notify(self, notice: Notice) -> None:
        """Sent from an activity, never awaited here: a slow webhook does not hold the watch."""
        self._notices = [h for h in self._notices if not h.done()]
        if workflow.patched(ALERTS_WATCH):
            # The notice's key is told once per watch (the state carries it across runs).
            kind = watch_notice_kind(notice.key)
            wid = workflow.info().workflow_id
            alert = make_alert(kind, wid, notice.key, notice.title, notice.lines)
            self._notices.append(raise_alert(alert))
            return
        self._notices.append(
            workflow.start_activity_method(
                WatchNotifier.notify,
                notice,
                start_to_close_timeout=opts.NOTIFY_START_TO_CLOSE,
                retry_policy=opts.NOTIFY_RETRY,
                summary=f"notify: {notice.title}",
            )
        )

    async def _settle_notices(self) -> None:
        pending = [h for h in self._notices if not h.done()]
        if pending:
            await workflow.wait(pending, timeout=opts.NOTIFY_SETTLE.total_seconds())
        self._notices = []

    # ---- plumbing ------------------------------------------------------------------------

    def _history_is_long(self) -> bool:
        assert self._policy is not None
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._policy.history_events_limit
        )

    def _continue_as_new(self) -> NoReturn:
        inp, state = self._inp, self._state
        assert inp is not None and state is not None
        state = state.model_copy(
            update={"view": state.view.model_copy(update={"generation": state.view.generation + 1})}
        )
        workflow.continue_as_new(inp.model_copy(update={"carry": WatchCarry(state=state)}))

    def _publish(self) -> None:
        state = self._state
        if state is None:
            return
        workflow.set_current_details(render_details(state.view))
        attributes = (state.view.job_state, state.view.verdict)
        if attributes != self._sa:
            self._sa = attributes
            workflow.upsert_search_attributes(
                [sa.JOB_STATE.value_set(attributes[0]), sa.VERDICT.value_set([attributes[1]])]
            )


def _preempted_as_before(observation: Observation) -> Observation:
    """A run from before PREEMPTED_TERMINAL reads a preempted coordinator as it did then:
    waiting, as a pending one is. Asked only when such a coordinator is seen."""
    seen = observation.coordinator
    if seen is None or seen.state is not JobPhase.PREEMPTED:
        return observation
    if workflow.patched(PREEMPTED_TERMINAL):
        return observation
    waiting = seen.model_copy(update={"state": JobPhase.PENDING})
    return observation.model_copy(update={"coordinator": waiting})


def _cause(err: BaseException) -> str:
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    return str(cause) if isinstance(cause, ApplicationError) else type(cause).__name__
