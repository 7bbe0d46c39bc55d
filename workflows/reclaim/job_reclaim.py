"""JobReclaim: the one owner of releasing one stale holding, from verdict to release.

Workflow id `reclaim-<node>-<job>-e<epoch>.<sighting>` (one per fence key), started by the
intake with signal-with-start and USE_EXISTING, so a thousand duplicate heartbeats make one
workflow. Every destructive step is preceded by a fresh read of the controller in an
activity: the verdict in the input, or in history, is never acted on (docs/reclaim.md).

    assess ─ spare ──────────────────────────────────────────────► done (spared)
       │ reclaim: graceful cancel x n ─► forced kill x m ─► drain ─► wait ─► undrain ─► done
       │ quarantine: ────────────────────────────────────► drain ─► wait ─► undrain ─► done
       └ observe mode: every verdict shown, nothing sent, waits for release or spare

Release evidence arrives as `evidence` signals from the intake (only on change, so the
history stays small), an operator's `release` signal ends the wait as well. A drained node
is re-read every `drained_recheck`; the run continues as new before its history grows past
`history_events_limit`. A cancel of the workflow lifts a drain it made.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import CancelledError

with workflow.unsafe.imports_passed_through():
    from keeper.activities.reclaim.reclaim import ReclaimActivities
    from keeper.domain.common.alerts import AlertKind, make_alert
    from keeper.domain.reclaim.calls import (
        AssessCall,
        Assessment,
        CancelCall,
        CloseCall,
        DrainCall,
        JobReclaimInput,
        JobReclaimResult,
        OperatorRelease,
        ReclaimCarry,
        UndrainCall,
    )
    from keeper.domain.reclaim.evidence import BeatReport, Release
    from keeper.domain.reclaim.models import (
        EVIDENCE_SIGNAL,
        RECLAIM_WORKFLOW_TYPE,
        RELEASE_SIGNAL,
        Reason,
        Verdict,
    )
    from keeper.domain.reclaim.steps import Attempt, Mode, Outcome, Step, attempts
    from keeper.domain.reclaim.view import MAX_ACTIONS, ReclaimView, render_details
    from keeper.runtime.reclaim import search_attributes as sa
    from keeper.runtime.reclaim.views import DRAIN_REASON_PREFIX
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.reclaim import activity_options as opts
    from keeper.workflows.reclaim import metrics


# Runs past this patch lift their drain on every way out: a cancel while the drain call was
# still running, a cancel or failure during the finish, any failure.
CLEANUP_ON_EVERY_EXIT = "reclaim-cleanup-on-every-exit"
# Runs past this patch alert an operator (keeper.alert) when they drain a node.
ALERTS_DRAINED = "alerts-reclaim-drained"


class _RollOver(Exception):
    """The history is long enough: hand over to a new run at the next safe point."""


@workflow.defn(
    name=RECLAIM_WORKFLOW_TYPE,
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class JobReclaim:
    def __init__(self) -> None:
        self._inp: JobReclaimInput | None = None
        self._view: ReclaimView | None = None
        self._operator: OperatorRelease | None = None
        self._sa_step: Step | None = None
        # Signals handled before the run has its view (the start signal, a signal that
        # arrives with a continue-as-new) wait here, in order, so none is lost.
        self._early: list[BeatReport] = []
        # A drain was asked for (it may have been made even if its answer never came back).
        self._drain_requested = False
        # Release evidence keeper's memory held when an activity read it (the intake folds
        # every heartbeat in, whether or not this run heard): as good as a signal's.
        self._memory_release: Release | None = None
        self._release: Release | None = None

    @workflow.signal(name=EVIDENCE_SIGNAL, description="What a later heartbeat showed.")
    def evidence(self, report: BeatReport) -> None:
        if self._view is None:
            self._early.append(report)
            return
        self._view.tally = self._view.tally.add(report)
        self._publish()

    @workflow.signal(name=RELEASE_SIGNAL, description="An operator vouches for the release.")
    def release(self, release: OperatorRelease) -> None:
        self._operator = release

    @workflow.query(description="Step, mode, last verdict, evidence, cancels sent.")
    def status(self) -> ReclaimView | None:
        return self._view

    @workflow.run
    async def run(self, inp: JobReclaimInput) -> JobReclaimResult:
        self._inp = inp
        carry = inp.carry
        self._view = ReclaimView(holding=inp.holding)
        if carry is not None:
            self._view = ReclaimView(
                holding=inp.holding,
                step=carry.step,
                attempts=carry.attempts,
                drained=carry.drained,
                tally=carry.tally,
                last=carry.last,
                attention=carry.attention,
                actions=list(carry.actions),
                cancels_sent=carry.cancels_sent,
            )
            self._drain_requested = carry.drained
            if self._operator is None:
                self._operator = carry.operator
        for early in self._early:
            self._view.tally = self._view.tally.add(early)
        self._early.clear()
        self._sa_step = self._view.step
        if workflow.info().typed_search_attributes.get(sa.NODE) is None:
            # Started by hand (`temporal workflow start`): findable by node and job anyway.
            workflow.upsert_search_attributes(
                [
                    sa.NODE.value_set(inp.holding.node),
                    sa.JOB_ID.value_set(str(inp.holding.job_id)),
                    sa.RECLAIM_STEP.value_set(self._view.step.value),
                ]
            )
        if carry is None:
            self._act(f"started: {inp.first.verdict.value} ({inp.first.reason.value})")
        self._publish()
        cleanup_everywhere = workflow.patched(CLEANUP_ON_EVERY_EXIT)
        try:
            outcome = await self._reclaim()
            if cleanup_everywhere:
                return await self._finish(outcome)
        except (asyncio.CancelledError, CancelledError):
            # A cancel arrives as asyncio's in a timer or wait, as Temporal's from an activity.
            await self._lift_drain_on_cancel(cleanup_everywhere)
            metrics.reclaim_closed(Outcome.CANCELLED)
            raise
        except _RollOver:
            await self._continue_as_new()
        except Exception:
            # Whatever failed the run, a drain it made does not outlive it.
            if cleanup_everywhere:
                await self._lift_drain_on_cancel(True, why="failed")
            raise
        return await self._finish(outcome)

    # ---- the escalation ------------------------------------------------------------------

    async def _reclaim(self) -> Outcome:
        inp, view = self._inp, self._view
        assert inp is not None and view is not None
        plan = attempts(inp.policy)
        while True:
            if self._released():
                return self._release_outcome()
            a = await self._assess()
            if a.released is not None:
                self._memory_release = a.released
                return self._release_outcome()
            verdict = a.decision.verdict
            if verdict is Verdict.SPARE:
                self._act(f"spared: {a.decision.detail}")
                return Outcome.SPARED
            if a.mode is Mode.OBSERVE:
                self._observe(a, plan)
                await self._wait(inp.policy.drained_recheck)
                continue
            if verdict is Verdict.QUARANTINE or view.attempts >= len(plan):
                if not await self._quarantine(a):
                    # The drain's own fresh read found it no longer stale: read again soon
                    # (a controller that flaps between two verdicts paces this loop).
                    await self._wait(inp.policy.retry_initial)
                    continue
                await self._wait(inp.policy.drained_recheck)
                continue
            attempt = plan[view.attempts]
            self._step(attempt.step)
            result = await workflow.execute_activity_method(
                ReclaimActivities.cancel,
                CancelCall(holding=inp.holding, signal=attempt.signal, attempt=attempt.overall),
                start_to_close_timeout=opts.CANCEL_START_TO_CLOSE,
                retry_policy=opts.CANCEL_RETRY,
                summary=f"signal {attempt.signal} to job {inp.holding.job_id} on "
                f"{inp.holding.node} (try {attempt.overall})",
            )
            what = f"signal {attempt.signal} ({attempt.step.value} {attempt.try_in_step})"
            if result.cancels_sent is not None:
                view.cancels_sent = result.cancels_sent
            if result.released is not None:
                # keeper's memory shows the agent let go: nothing was sent, nothing is left.
                self._act(f"{what} {result.error}")
                self._memory_release = result.released
                return self._release_outcome()
            skipped = result.skipped
            if skipped is None:  # a result recorded before it said so
                skipped = result.decision is not None and not result.sent
            if skipped:
                # The activity's own fresh read found nothing to cancel (or observe mode, or
                # the agent's word pending): no try was spent; the next read decides.
                self._act(f"{what} {result.error}")
            else:
                view.attempts += 1
                self._act(
                    f"{what} delivered to {result.agent}"
                    if result.delivered
                    else f"{what} not delivered: {result.error}"
                )
            await self._wait(inp.policy.wait_after(attempt.overall))

    def _observe(self, a: Assessment, plan: list[Attempt]) -> None:
        view = self._view
        assert view is not None
        self._step(Step.OBSERVING)
        if a.decision.verdict is Verdict.QUARANTINE or view.attempts >= len(plan):
            would = f"would drain {a.node.name or view.holding.node}"
        else:
            step = plan[view.attempts]
            would = f"would send signal {step.signal} ({step.step.value})"
        self._act(f"observe mode: {would}; {a.decision.reason.value}", dedupe=True)

    async def _quarantine(self, a: Assessment) -> bool:
        """Drains the node (once) and tells the operator; False when the drain's own fresh
        read found the holding no longer stale, so nothing was drained."""
        inp, view = self._inp, self._view
        assert inp is not None and view is not None
        self._step(Step.DRAINED)
        if a.decision.reason is Reason.UNKNOWN_NODE:
            view.attention = (
                f"{inp.holding.node} is not a node the controller lists, so keeper cannot "
                "drain it; check the agent's hostname (reclaim.node_aliases) and release it "
                f"with `keeper reclaim release {inp.holding.node} {inp.holding.job_id}`"
            )
            self._publish()
            return True
        if view.drained:
            return True
        reason = self._drain_reason(a)
        self._drain_requested = True
        result = await workflow.execute_activity_method(
            ReclaimActivities.drain,
            DrainCall(
                holding=inp.holding,
                workflow_id=workflow.info().workflow_id,
                reason=reason,
                chain=workflow.info().first_execution_run_id,
            ),
            start_to_close_timeout=opts.NODE_START_TO_CLOSE,
            retry_policy=opts.NODE_RETRY,
            summary=f"drain {inp.holding.node}: holds job {inp.holding.job_id}",
        )
        if not result.drained:
            self._drain_requested = False
            d = result.decision
            why = f"{d.verdict.value} ({d.reason.value}): {d.detail}" if d else "not stale"
            self._act(f"not drained: a fresh read says {why}")
            return False
        view.drained = True
        metrics.node_drained()
        view.attention = (
            f"{inp.holding.node} drained ({result.actual_state}): its agent still holds job "
            f"{inp.holding.job_id} ({a.decision.reason.value}). Free it on the node, then "
            f"`keeper reclaim release {inp.holding.node} {inp.holding.job_id}`"
        )
        self._act(f"drained {result.node}: {reason}")
        workflow.logger.error("reclaim needs attention: %s", view.attention)
        if workflow.patched(ALERTS_DRAINED):
            # A drain is made once per run chain (a carried `drained` skips this step), so
            # the fence key alone names the event.
            raise_alert(
                make_alert(
                    AlertKind.NODE_DRAINED,
                    workflow.info().workflow_id,
                    "drain",
                    f"{result.node} drained: its agent still holds job {inp.holding.job_id}",
                    [view.attention, f"why: {reason}"],
                )
            )
        return True

    def _drain_reason(self, a: Assessment) -> str:
        assert self._inp is not None
        h = self._inp.holding
        return (
            f"{DRAIN_REASON_PREFIX} job {h.job_id} held after release "
            f"({a.decision.reason.value}); {workflow.info().workflow_id}"
        )

    async def _assess(self) -> Assessment:
        inp, view = self._inp, self._view
        assert inp is not None and view is not None
        a = await workflow.execute_activity_method(
            ReclaimActivities.assess,
            AssessCall(holding=inp.holding, workflow_id=workflow.info().workflow_id),
            start_to_close_timeout=opts.READ_START_TO_CLOSE,
            retry_policy=opts.READ_RETRY,
            summary=f"read the controller: job {inp.holding.job_id} on {inp.holding.node}",
        )
        view.last = a
        view.mode = a.mode
        self._publish()
        return a

    async def _wait(self, at_most: timedelta) -> None:
        """Until release evidence, an operator's release, or `timeout`; rolls over first when
        the history is long (`at_most`)."""
        if self._history_is_long():
            raise _RollOver
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(self._released, timeout=at_most)

    def _released(self) -> bool:
        assert self._inp is not None and self._view is not None
        return (
            self._operator is not None
            or self._memory_release is not None
            or self._view.tally.released(self._inp.policy)
        )

    def _release_outcome(self) -> Outcome:
        assert self._view is not None and self._inp is not None
        release = self._view.tally.release(self._inp.policy) or self._memory_release
        if release is not None:
            self._release = release
            self._act(f"released: {release.why}")
            return Outcome.RELEASED
        op = self._operator
        assert op is not None
        self._act(f"released by {op.by}" + (f": {op.reason}" if op.reason else ""))
        return Outcome.OPERATOR_RELEASED

    # ---- the end -------------------------------------------------------------------------

    async def _undrain(self, requested: bool = False) -> bool:
        """Lifts keeper's drain: the one it made, or (`requested`) one it asked for whose
        answer never came back; the activity leaves any drain that is not keeper's."""
        inp, view = self._inp, self._view
        assert inp is not None and view is not None
        if not view.drained and not (requested and self._drain_requested):
            return False
        result = await workflow.execute_activity_method(
            ReclaimActivities.undrain,
            UndrainCall(
                holding=inp.holding,
                workflow_id=workflow.info().workflow_id,
                reason="",
                chain=workflow.info().first_execution_run_id,
            ),
            start_to_close_timeout=opts.NODE_START_TO_CLOSE,
            retry_policy=opts.NODE_RETRY,
            summary=f"lift keeper's drain of {inp.holding.node}",
        )
        view.drained = False
        view.attention = ""
        self._act(result.why)
        return result.resumed

    async def _finish(self, outcome: Outcome) -> JobReclaimResult:
        inp, view = self._inp, self._view
        assert inp is not None and view is not None
        drained = view.drained
        undrained = await self._undrain()
        await workflow.execute_activity_method(
            ReclaimActivities.close,
            CloseCall(
                holding=inp.holding,
                workflow_id=workflow.info().workflow_id,
                outcome=outcome,
                release=self._release if outcome is Outcome.RELEASED else None,
                fenced=view.last is not None and view.last.decision.verdict is Verdict.QUARANTINE,
            ),
            start_to_close_timeout=opts.READ_START_TO_CLOSE,
            retry_policy=opts.READ_RETRY,
            summary=f"remember: {outcome.value}",
        )
        self._step(Step.DONE)
        metrics.reclaim_closed(outcome)
        return JobReclaimResult(
            outcome=outcome,
            holding=inp.holding,
            attempts=view.attempts,
            drained=drained,
            undrained=undrained,
            mode=view.mode,
            last=view.last,
            detail=view.actions[-1] if view.actions else "",
        )

    async def _lift_drain_on_cancel(self, requested: bool = False, why: str = "cancelled") -> None:
        """A cancelled (or failed) reclaim leaves nothing of its own behind: its drain is
        lifted, even one whose activity was still running when the cancel came."""
        view = self._view
        assert view is not None
        lifting = view.drained or (requested and self._drain_requested)
        self._act(f"{why}: lifting keeper's drain" if lifting else why)

        async def cleanup() -> None:
            await self._undrain(requested)
            assert self._inp is not None
            await workflow.execute_activity_method(
                ReclaimActivities.close,
                CloseCall(
                    holding=self._inp.holding,
                    workflow_id=workflow.info().workflow_id,
                    outcome=Outcome.CANCELLED,
                ),
                start_to_close_timeout=opts.READ_START_TO_CLOSE,
                retry_policy=opts.READ_RETRY,
            )

        await run_to_completion(cleanup())

    # ---- plumbing ------------------------------------------------------------------------

    def _history_is_long(self) -> bool:
        assert self._inp is not None
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._inp.policy.history_events_limit
        )

    async def _continue_as_new(self) -> NoReturn:
        inp, view = self._inp, self._view
        assert inp is not None and view is not None
        await workflow.wait_condition(workflow.all_handlers_finished)
        carry = ReclaimCarry(
            step=view.step,
            attempts=view.attempts,
            drained=view.drained or self._drain_requested,
            tally=view.tally,
            last=view.last,
            operator=self._operator,
            attention=view.attention,
            actions=view.actions[-MAX_ACTIONS:],
            cancels_sent=view.cancels_sent,
        )
        workflow.continue_as_new(inp.model_copy(update={"carry": carry}))

    def _step(self, step: Step) -> None:
        assert self._view is not None
        self._view.step = step
        if step is not self._sa_step:
            self._sa_step = step
            workflow.upsert_search_attributes([sa.RECLAIM_STEP.value_set(step.value)])
        self._publish()

    def _act(self, line: str, *, dedupe: bool = False) -> None:
        view = self._view
        assert view is not None
        if dedupe and view.actions and view.actions[-1] == line:
            return
        view.actions = [*view.actions, line][-MAX_ACTIONS * 2 :]
        self._publish()

    def _publish(self) -> None:
        if self._view is None or self._inp is None:
            return
        workflow.set_current_details(render_details(self._view, self._inp.policy))
