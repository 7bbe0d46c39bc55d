"""JobReclaim: the runbook for one stale holding, from verdict to release.

Workflow id `reclaim-<node>-<job>-e<epoch>.<sighting>` (one per fence key), started by the
intake with signal-with-start and USE_EXISTING, so a thousand duplicate heartbeats make one
workflow. Every destructive step is preceded by a fresh read of the controller in an
activity: the verdict in the input, or in history, is never acted on (docs/reclaim.md).

    policy ─► assess ─ spare ────────────────────────────────────────────► close (spared)
                 │ reclaim: graceful cancel x n ─► forced kill x m ─► drain ─► wait ─► undrain ─► close
                 │ quarantine: ──────────────────────────────────────► drain ─► wait ─► undrain ─► close
                 └ observe mode: every verdict shown, nothing sent, waits for release or spare

The timing rules come from the worker's settings, read once per run (`reclaim.policy`).
Release evidence arrives as `evidence` signals from the intake (only on change, so the
history stays small); an operator's `release` Update ends the wait as well, and answers once
the run has closed. A drained node is re-read every `drained_recheck`; before its history
grows past `history_events_limit` the run hands its state whole to the next (continue-as-new),
once every handler has finished. A cancel or a failure lifts a drain it made or asked for.

What to do next is decided in domain/reclaim/transitions.py; what it shows is rendered in
domain/reclaim/view.py.
"""  # noqa: E501

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from keeper.activities.reclaim.reclaim import ReclaimActivities
    from keeper.domain.reclaim import transitions as t
    from keeper.domain.reclaim.calls import (
        AssessCall,
        Assessment,
        CancelCall,
        DrainCall,
        OperatorRelease,
        UndrainCall,
    )
    from keeper.domain.reclaim.evidence import BeatReport
    from keeper.domain.reclaim.models import (
        EVIDENCE_SIGNAL,
        RECLAIM_WORKFLOW_TYPE,
        RELEASE_UPDATE,
        STATUS_QUERY,
    )
    from keeper.domain.reclaim.policy import ReclaimPolicy
    from keeper.domain.reclaim.state import Drain, JobReclaimInput, JobReclaimResult, ReclaimState
    from keeper.domain.reclaim.steps import Attempt, Outcome, Step
    from keeper.domain.reclaim.view import ReclaimView, drained_alert, render_details, render_view
    from keeper.runtime.reclaim import search_attributes as sa
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.common.rollover import handlers_finished, history_is_long
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.reclaim import activity_options as opts
    from keeper.workflows.reclaim import metrics


class _RollOver(Exception):
    """The history is long enough: hand over to a new run."""


@workflow.defn(
    name=RECLAIM_WORKFLOW_TYPE,
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class JobReclaim:
    def __init__(self) -> None:
        self._state: ReclaimState | None = None
        self._policy: ReclaimPolicy | None = None
        # Evidence signalled before the run has its state (the start signal), in order.
        self._heard_first: list[BeatReport] = []
        self._publisher = Publisher()

    # ---- what the intake and an operator say ---------------------------------------------

    @workflow.signal(name=EVIDENCE_SIGNAL, description="What a later heartbeat showed.")
    def evidence(self, report: BeatReport) -> None:
        if self._state is None:
            self._heard_first.append(report)
        else:
            self._to(t.heard(self._state, report))

    @workflow.update(
        name=RELEASE_UPDATE,
        description="An operator vouches that the agent let go: the reclaim lifts keeper's "
        "drain, closes, and answers how it ended.",
    )
    async def release(self, release: OperatorRelease) -> JobReclaimResult:
        # Two releases validated in one task: the first is taken, the second answers the same.
        if t.release_refusal(self._s) is None:
            self._to(t.operator_released(self._s, release))
        await workflow.wait_condition(lambda: self._s.closed)
        if self._s.outcome is None:
            raise ApplicationError("the reclaim failed; see its history", non_retryable=True)
        return t.result_of(self._s)

    @release.validator
    def _releasable(self, release: OperatorRelease) -> None:
        refusal = t.release_refusal(self._state)
        if refusal is not None:
            raise ValueError(refusal)

    @workflow.query(name=STATUS_QUERY, description="Step, mode, last verdict, evidence, cancels.")
    def status(self) -> ReclaimView | None:
        return render_view(self._state) if self._state is not None else None

    # ---- the runbook ---------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: JobReclaimInput) -> JobReclaimResult:
        self._state = t.begin(inp, self._heard_first)
        self._heard_first.clear()
        self._policy = await workflow.execute_local_activity_method(
            ReclaimActivities.policy, start_to_close_timeout=opts.POLICY_START_TO_CLOSE
        )
        self._publish()
        try:
            await self._reclaim()
            return await self._finish()
        except (asyncio.CancelledError, CancelledError):
            # A cancel arrives as asyncio's in a timer or wait, as Temporal's from an activity.
            await self._clean_up("cancelled", Outcome.CANCELLED)
            raise
        except _RollOver:
            workflow.continue_as_new(inp.model_copy(update={"carry": self._state}))
        except Exception:
            # Whatever failed the run, a drain it made does not outlive it.
            await self._clean_up("failed")
            raise

    async def _reclaim(self) -> None:
        """Escalates until the agent lets go (its word, or an operator's) or a fresh read
        spares the holding: the outcome is decided."""
        policy = self._p
        while not t.released(self._s, policy):
            a = await self._assess()
            match t.next_move(self._s, a, policy):
                case t.Move.RELEASE:
                    assert a.released is not None
                    self._to(t.remembered(self._s, a.released))
                case t.Move.SPARE:
                    self._to(t.spared(self._s, a))
                    return
                case t.Move.OBSERVE:
                    self._to(t.observed(self._s, a, policy))
                    await self._wait(policy.drained_recheck)
                case t.Move.ATTENTION:
                    self._to(t.cannot_drain(self._s))
                    await self._wait(policy.drained_recheck)
                case t.Move.DRAIN:
                    # A drain its own fresh read refused: read again soon (a controller that
                    # flaps between two verdicts paces this loop).
                    settled = await self._quarantine(a)
                    await self._wait(policy.drained_recheck if settled else policy.retry_initial)
                case t.Move.CANCEL:
                    attempt = t.next_attempt(self._s, policy)
                    assert attempt is not None
                    await self._cancel(attempt)
                    await self._wait(policy.wait_after(attempt.overall))
        self._to(t.settle_release(self._s, policy))

    async def _assess(self) -> Assessment:
        h = self._s.holding
        a = await workflow.execute_activity_method(
            ReclaimActivities.assess,
            AssessCall(holding=h, workflow_id=workflow.info().workflow_id),
            start_to_close_timeout=opts.READ_START_TO_CLOSE,
            retry_policy=opts.READ_RETRY,
            summary=f"read the controller: job {h.job_id} on {h.node}",
        )
        self._to(t.assessed(self._s, a))
        return a

    async def _cancel(self, attempt: Attempt) -> None:
        h = self._s.holding
        self._to(t.at_step(self._s, attempt.step))
        result = await workflow.execute_activity_method(
            ReclaimActivities.cancel,
            CancelCall(holding=h, signal=attempt.signal, attempt=attempt.overall),
            start_to_close_timeout=opts.CANCEL_START_TO_CLOSE,
            retry_policy=opts.CANCEL_RETRY,
            summary=f"signal {attempt.signal} to job {h.job_id} on {h.node} "
            f"(try {attempt.overall})",
        )
        self._to(t.cancel_answered(self._s, attempt, result))

    async def _quarantine(self, a: Assessment) -> bool:
        """Drains the node (once) and tells the operator; False when the drain's own fresh
        read found the holding no longer stale, so nothing was drained."""
        if self._s.drain is Drain.MADE:
            self._to(t.at_step(self._s, Step.DRAINED))
            return True
        info, h = workflow.info(), self._s.holding
        reason = t.drain_reason(h, a, info.workflow_id)
        self._to(t.drain_asked(self._s))
        result = await workflow.execute_activity_method(
            ReclaimActivities.drain,
            DrainCall(
                holding=h,
                workflow_id=info.workflow_id,
                reason=reason,
                chain=info.first_execution_run_id,
            ),
            start_to_close_timeout=opts.NODE_START_TO_CLOSE,
            retry_policy=opts.NODE_RETRY,
            summary=f"drain {h.node}: holds job {h.job_id}",
        )
        self._to(t.drain_answered(self._s, result, a, reason))
        if self._s.drain is not Drain.MADE:
            return False
        metrics.node_drained()
        workflow.logger.error("reclaim needs attention: %s", self._s.attention)
        raise_alert(drained_alert(self._s, result, reason, info.workflow_id))
        return True

    async def _wait(self, at_most: timedelta) -> None:
        """Until the agent or an operator releases the holding, or `at_most`. A long history
        hands over to the next run first, once every handler finished (a release that
        arrives meanwhile is carried out by this run)."""
        if history_is_long(self._p.history_events_limit):
            if await handlers_finished(unless=self._released):
                raise _RollOver
            return
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(self._released, timeout=at_most)

    # ---- the end -------------------------------------------------------------------------

    async def _finish(self) -> JobReclaimResult:
        outcome = self._s.outcome
        assert outcome is not None
        if self._s.drain is Drain.MADE:
            await self._lift()
        await self._close(outcome)
        metrics.reclaim_closed(outcome)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return t.result_of(self._s)

    async def _clean_up(self, why: str, outcome: Outcome | None = None) -> None:
        """A cancelled (or failed) reclaim leaves nothing of its own behind: its drain is
        lifted, even one whose call was still running when the cancel came, through any
        number of further cancels."""
        self._to(t.ending(self._s, why, outcome))

        async def clean_up() -> None:
            if self._s.drain is not Drain.NONE:
                await self._lift()
            await self._close(Outcome.CANCELLED)
            await workflow.wait_condition(workflow.all_handlers_finished)

        await run_to_completion(clean_up())
        if outcome is not None:
            metrics.reclaim_closed(outcome)

    async def _lift(self) -> None:
        """Lifts keeper's drain and fences this run chain's drain calls off the node; the
        activity leaves any drain that is not keeper's."""
        info, h = workflow.info(), self._s.holding
        result = await workflow.execute_activity_method(
            ReclaimActivities.undrain,
            UndrainCall(holding=h, workflow_id=info.workflow_id, chain=info.first_execution_run_id),
            start_to_close_timeout=opts.NODE_START_TO_CLOSE,
            retry_policy=opts.NODE_RETRY,
            summary=f"lift keeper's drain of {h.node}",
        )
        self._to(t.lifted(self._s, result))

    async def _close(self, outcome: Outcome) -> None:
        """A released holding is closed in keeper's memory; any other keeps its fence."""
        await workflow.execute_activity_method(
            ReclaimActivities.close,
            t.close_call(self._s, workflow.info().workflow_id, outcome),
            start_to_close_timeout=opts.READ_START_TO_CLOSE,
            retry_policy=opts.READ_RETRY,
            summary=f"remember: {outcome.value}",
        )
        self._to(t.closed(self._s))

    # ---- plumbing ------------------------------------------------------------------------

    @property
    def _s(self) -> ReclaimState:
        assert self._state is not None
        return self._state

    @property
    def _p(self) -> ReclaimPolicy:
        assert self._policy is not None
        return self._policy

    def _released(self) -> bool:
        return t.released(self._s, self._p)

    def _to(self, state: ReclaimState) -> None:
        self._state = state
        self._publish()

    def _publish(self) -> None:
        """Current details on every change; a search attribute only when its value changed
        (a run started by hand gets Node and JobId this way too)."""
        if self._state is None or self._policy is None:
            return
        s = self._state
        self._publisher.publish(
            render_details(render_view(s), self._policy),
            [
                sa.NODE.value_set(s.holding.node),
                sa.JOB_ID.value_set(str(s.holding.job_id)),
                sa.KEEPER_STEP.value_set(s.step.value),
            ],
        )
