"""RunnerDeletion: the one owner of a runner's deletion, from request to tombstone.

Workflow id `runner-delete-<runner>`. Every actor that wants a runner gone (its agent
reporting terminated, a scale-down, an operator, the reconciler) asks with the `request`
update, starting this workflow or joining the running one, and gets an answer or a refusal;
none of them writes a deletion-lane status. The runbook (docs/runner-deletion.md):

    1. onto the lane (pending_delete, or pending_force_delete), reading the record
    2. the GitHub registration first: a registered runner can still be handed a job
       (busy: wait up to busy_wait, then escalate to an operator, or proceed by policy)
    3. deleting
    4. the compute, until the provider confirms it gone (a force: a few tries, then a leak)
    5. deleted, the tombstone in the same write; then a registration left behind, if any

Each step re-reads the record and acts on what the store holds, so every intermediate
status resumes after a crash. The lane is forward-only: a cancel is shown, never obeyed,
because a half-deleted runner is exactly the leak keeper exists to prevent.

Waiting costs no history: GitHub and the provider are asked again by activity retry
policies, so the history holds only decisions (busy, escalated, forced, gone). A run that
still waits after `policy.history_events_limit` events, or when the server suggests it,
continues as new carrying its state whole. Every decision is in domain/runners
(deletion_state, deregister_steps); every text in domain/runners/deletion_view.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributeUpdate, VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from keeper.activities.runners.deletion import (
        UNKNOWN_RUNNER,
        GitHubActivities,
        ProviderActivities,
        RunnerStoreActivities,
    )
    from keeper.activities.runners.policy import DeletionPolicySource
    from keeper.domain.common.untrusted import md_text
    from keeper.domain.runners import calls
    from keeper.domain.runners import deletion_state as ds
    from keeper.domain.runners import deletion_view as dv
    from keeper.domain.runners import deregister_steps as steps
    from keeper.domain.runners.deregistration import DeregisterMode
    from keeper.domain.runners.lane import LaneMove, entry_target
    from keeper.domain.runners.models import (
        DELETION_WORKFLOW_TYPE,
        REQUEST_UPDATE,
        DeletionOutcome,
        DeletionPolicy,
        DeletionRequest,
        DeletionResult,
        DeletionStep,
        RunnerRecord,
        deletion_workflow_id,
    )
    from keeper.domain.runners.status import InstanceStatus
    from keeper.runtime.runners import search_attributes as sa
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.common.rollover import handlers_finished, history_is_long
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.runners import activity_options as opts
    from keeper.workflows.runners import metrics

T = TypeVar("T")
S = InstanceStatus
WRONG_WORKFLOW_ID = "WrongWorkflowId"
# Retry states that mean "the attempts a force allows are used up".
GAVE_UP = frozenset({RetryState.MAXIMUM_ATTEMPTS_REACHED, RetryState.TIMEOUT})


@workflow.defn(
    name=DELETION_WORKFLOW_TYPE,
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class RunnerDeletion:
    def __init__(self) -> None:
        self._state: ds.DeletionState | None = None
        self._policy: DeletionPolicy | None = None
        self._publisher = Publisher()

    # ---- what other actors see and say ---------------------------------------------------

    @workflow.query(description="Step, record status, GitHub and provider answers, attempts.")
    def status(self) -> dv.DeletionView | None:
        return dv.view_of(self._state) if self._state is not None else None

    @workflow.update(
        name=REQUEST_UPDATE,
        description="Ask for this deletion (a force included): answered, or refused with why.",
    )
    async def request(self, request: DeletionRequest) -> dv.RequestAnswer:
        # Sent with the start (update-with-start), it is handled before `run` read its input.
        await workflow.wait_condition(lambda: self._state is not None)
        joined = ds.under_way(self.state)
        self._set(ds.requested(self.state, request))
        workflow.logger.info("deletion requested: %s", ds.request_label(request))
        return dv.RequestAnswer(joined=joined, view=dv.view_of(self.state))

    @request.validator
    def _acceptable(self, request: DeletionRequest) -> None:
        problem = ds.refusal(self._state, request) if self._state is not None else None
        if problem is not None:
            workflow.logger.warning("refused a deletion request: %s", problem)
            raise ValueError(problem)

    # ---- the runbook -------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: ds.RunnerDeletionInput) -> DeletionResult:
        _require_canonical_id(inp.runner)
        state = inp.carry or ds.new_state(inp.runner)
        self._state = ds.requested(state, inp.request) if inp.request is not None else state
        self._policy = await workflow.execute_local_activity_method(
            DeletionPolicySource.policy, start_to_close_timeout=opts.POLICY_START_TO_CLOSE
        )
        self._publish()
        # Once started, the deletion finishes: a cancel is recorded and shown, not obeyed,
        # since stopping halfway is what strands records on the lane.
        result, _ = await run_to_completion(self._delete(), self._cancel_seen)
        return metrics.deletion_closed(result)

    async def _delete(self) -> DeletionResult:
        # 1. Onto the lane, reading the record in the same step. A record already on the
        # lane counts as success; a tombstone means there is nothing left to do.
        record = await self._enter_lane()
        if record.instance_status is S.DELETED:
            self._set(ds.finished(self.state, record))
            return dv.result_of(self.state, DeletionOutcome.ALREADY_DELETED)

        # 2. Registration before compute: a registered runner can still be handed a job.
        if self.state.registration_left is None:
            await self._deregister(record)
            if self.state.force and record.instance_status is S.PENDING_DELETE:
                record = await self._enter_lane()  # a force arrived meanwhile: say so

        # 3. deleting. The audit says what happened to the registration, removed or not.
        self._set(ds.moved(self.state, DeletionStep.DELETING, record.instance_status))
        record = await self._lane(S.DELETING, self.state.registration or "")

        # 4. The compute, until the provider confirms it gone (or a force gives up).
        await self._delete_instance(record)

        # 5. deleted, with the tombstone in the same write.
        self._set(ds.moved(self.state, DeletionStep.DELETED, record.instance_status))
        finish = await workflow.execute_activity_method(
            RunnerStoreActivities.finish_deleted,
            calls.FinishDeletion(runner=record.name, incarnation=record.created_at),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary="deleting -> deleted (tombstone)",
        )
        self._set(ds.tombstoned(self.state, finish))
        if self.state.registration_left:
            await self._cleanup_registration(record)
        self._set(ds.finished(self.state, None if finish.replaced else finish.record))
        return dv.result_of(self.state, DeletionOutcome.DELETED)

    # ---- 1 and 3: the lane ----------------------------------------------------------------

    async def _enter_lane(self) -> RunnerRecord:
        target = entry_target(self.state.force)
        try:
            record = await self._lane(target, ds.last_request(self.state))
        except ActivityError as err:
            if not (isinstance(err.cause, ApplicationError) and err.cause.type == UNKNOWN_RUNNER):
                raise
            self._set(ds.unknown_runner(self.state))
            raise ApplicationError(
                f"runner: no runner named {self.state.runner!r} in the runner store; "
                "`keeper runner list` shows the known runners",
                type=UNKNOWN_RUNNER,
                non_retryable=True,
            ) from None
        self._set(ds.entered(self.state, record))
        return record

    async def _lane(self, target: InstanceStatus, reason: str) -> RunnerRecord:
        result: calls.LaneResult = await workflow.execute_activity_method(
            RunnerStoreActivities.advance_lane,
            calls.LaneWrite(runner=self.state.runner, target=target, reason=reason),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary=f"record -> {target}",
        )
        if result.move is LaneMove.BLOCKED or result.record is None:
            found = result.record.instance_status if result.record else "missing"
            raise ApplicationError(
                f"runner {self.state.runner!r}: cannot move the record from {found} to {target}",
                type="LaneBlocked",
                non_retryable=True,
            )
        self._set(ds.read(self.state, result.record))
        return result.record

    # ---- 2: the registration --------------------------------------------------------------

    async def _deregister(self, record: RunnerRecord) -> None:
        """Removes the GitHub registration, or leaves it for after the compute (a busy runner
        the policy or a force said to delete anyway). The rules are
        domain.runners.deregister_steps; this loop only carries their moves out."""
        ref = calls.registration_ref(record)
        if ref is None:
            self._set(ds.no_registration(self.state))
            return
        self._set(ds.registration_begins(self.state, record))
        while True:
            self._set(steps.asking(self.state))
            state = self.state
            busy_until = state.busy_since + self.policy.busy_wait if state.busy_since else None
            try:
                result = await self._interruptible(
                    self._ask_github(ref, state.mode, busy_until, steps.report_auth(state))
                )
            except ActivityError as err:
                gave_up = err.retry_state in GAVE_UP
                move = steps.on_gave_up(state, _cause(err)) if gave_up else None
                if move is None:
                    raise
            else:
                if result is None:  # a force arrived while GitHub was being asked
                    move = steps.on_force(self.state)
                else:
                    move = steps.on_answer(
                        self.state,
                        result.answer,
                        attempts=result.attempts,
                        policy=self.policy,
                        now=workflow.now(),
                        token_source=result.token_source,
                    )
            self._set(move.state)
            if move.act is not steps.Act.ASK:
                left = move.act is steps.Act.LEAVE
                self._set(ds.registration_done(self.state, left=left, audit=move.audit or ""))
                return

    def _ask_github(
        self,
        ref: calls.RegistrationRef,
        mode: DeregisterMode,
        busy_until: datetime | None,
        report_auth: bool = False,
    ) -> asyncio.Task[calls.DeregisterResult]:
        attempts = {
            DeregisterMode.FORCE: self.policy.force_provider_attempts,
            DeregisterMode.CLEANUP: self.policy.registration_cleanup_attempts,
        }.get(mode, 0)
        return workflow.start_activity_method(
            GitHubActivities.deregister,
            calls.DeregisterCall(
                ref=ref,
                mode=mode.value,
                policy=self.policy,
                busy_until=busy_until,
                report_auth=report_auth,
            ),
            start_to_close_timeout=opts.GITHUB_START_TO_CLOSE,
            retry_policy=opts.github_retry(self.policy, attempts),
            summary=f"{mode.value}: remove GitHub registration {ref.runner_id} "
            f"({md_text(ref.scope)})",
        )

    # ---- 4: the compute -------------------------------------------------------------------

    async def _delete_instance(self, record: RunnerRecord) -> None:
        self._set(ds.moved(self.state, DeletionStep.PROVIDER_DELETE, record.instance_status))
        instance_id = record.provider_id or record.name
        bad_id = [p for p in record.problems if p.startswith("provider_id:")]
        if bad_id and not self.state.force:
            # No provider can take this id (the store refuses such rows now; this one is
            # older): asking again will not help, so an operator decides.
            await self._escalate_until_forced(f"the record's provider id is invalid ({bad_id[0]})")
        call = calls.ProviderDelete(
            runner=record.name,
            instance_id=instance_id,
            pool_id=record.scale_set,
            timeout_s=self.policy.provider_timeout.total_seconds(),
        )
        while True:
            forced = self.state.force
            self._set(ds.waiting_on(self.state, ds.PROVIDER_WAIT))
            task = workflow.start_activity_method(
                ProviderActivities.provider_delete,
                call,
                # An attempt may first wait out an earlier one's lease (runtime/instance_lease).
                start_to_close_timeout=2 * timedelta(seconds=call.timeout_s) + opts.PROVIDER_MARGIN,
                heartbeat_timeout=self.policy.provider_heartbeat,
                # A force cancels the attempt in flight; the forced one starts only once the
                # cancelled one has killed its process and given the instance's lease back.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                retry_policy=opts.provider_retry(
                    self.policy, self.policy.force_provider_attempts if forced else 0
                ),
                summary=f"{'force ' if forced else ''}provider delete "
                f"{md_text(call.instance_id)} (pool {md_text(call.pool_id)})",
            )
            try:
                result = await self._interruptible(task, on_force=not forced)
            except ActivityError as err:
                if not forced:
                    raise
                await self._record_leak(record, instance_id, err)
                return
            if result is not None:
                self._set(ds.provider_answered(self.state, result))
                return
            # A force arrived: the attempts are capped from here on.

    async def _escalate_until_forced(self, why: str) -> None:
        self._set(ds.instance_escalated(self.state, why))
        await workflow.wait_condition(
            lambda: self.state.force or history_is_long(self.policy.history_events_limit)
        )
        if not self.state.force:
            await self._continue_as_new()
        self._set(ds.force_answered(self.state, why))

    async def _record_leak(
        self, record: RunnerRecord, instance_id: str, err: ActivityError
    ) -> None:
        attempts = self.policy.force_provider_attempts
        self._set(ds.provider_gave_up(self.state, _cause(err), attempts))
        reason = ds.leak_reason(self.state, attempts)
        await workflow.execute_activity_method(
            RunnerStoreActivities.record_leak,
            calls.LeakReport(
                runner=record.name,
                provider_id=instance_id,
                scale_set=record.scale_set,
                reason=reason,
            ),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary=f"record leaked instance {md_text(instance_id)} for the orphan sweep",
        )
        self._set(ds.leak_recorded(self.state, instance_id, reason))

    # ---- 5: after the tombstone -----------------------------------------------------------

    async def _cleanup_registration(self, record: RunnerRecord) -> None:
        """After a busy runner's compute is gone it is offline, and GitHub lets the
        registration go. Bounded: GitHub itself removes offline runners eventually."""
        ref = calls.registration_ref(record)
        if ref is None:
            return
        attempts = self.policy.registration_cleanup_attempts
        self._set(ds.cleanup_started(self.state, ref.runner_id, attempts))
        try:
            result = await self._ask_github(ref, DeregisterMode.CLEANUP, None)
        except ActivityError as err:
            self._set(ds.cleanup_ended(self.state, answer=None, cause=_cause(err)))
        else:
            self._set(
                ds.cleanup_ended(self.state, answer=result.answer.message, attempts=result.attempts)
            )

    # ---- waiting without history ---------------------------------------------------------

    async def _interruptible(self, task: asyncio.Task[T], *, on_force: bool = True) -> T | None:
        """Awaits an activity that Temporal retries for as long as it takes. Returns None
        when a force request arrives first (the call is cancelled so the caller can ask
        again with a force's patience), and continues as new when the history is long."""
        forced_before = self.state.force
        limit = self.policy.history_events_limit
        waiter = asyncio.ensure_future(
            workflow.wait_condition(
                lambda: (on_force and self.state.force != forced_before) or history_is_long(limit)
            )
        )
        await workflow.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            return task.result()
        task.cancel()
        with contextlib.suppress(ActivityError, CancelledError, asyncio.CancelledError):
            await task
        if history_is_long(limit):
            await self._continue_as_new()
        return None

    async def _continue_as_new(self) -> NoReturn:
        # Every request handled first: none is cut short by the roll-over.
        await handlers_finished()
        carry = ds.continued(self.state)
        workflow.logger.info(
            "history at %d events: continuing as run %d",
            workflow.info().get_current_history_length(),
            carry.run,
        )
        workflow.continue_as_new(
            ds.RunnerDeletionInput(runner=carry.runner, request=None, carry=carry)
        )

    # ---- plumbing ------------------------------------------------------------------------

    @property
    def state(self) -> ds.DeletionState:
        assert self._state is not None, "the run sets the state before anything reads it"
        return self._state

    @property
    def policy(self) -> DeletionPolicy:
        assert self._policy is not None, "the run reads the policy before anything uses it"
        return self._policy

    def _cancel_seen(self) -> None:
        self._set(ds.cancel_seen(self.state))

    def _set(self, state: ds.DeletionState) -> None:
        """The one way the state changes: an escalation raises its alert (once per
        episode), and the change is published."""
        before, self._state = self._state, state
        info = workflow.info()
        key = ds.escalation_alert_key(before or state, state, info.first_execution_run_id)
        if key is not None:
            self._state = ds.alerted(state, key)
            raise_alert(dv.escalation_alert(self._state, info.workflow_id, key))
            metrics.escalated()
        self._publish()

    def _publish(self) -> None:
        state = self.state
        updates: list[SearchAttributeUpdate[Any]] = [sa.RUNNER_NAME.value_set(state.runner)]
        if state.scale_set_searchable:
            updates.append(sa.SCALE_SET.value_set(state.scale_set))
        if state.shown_step is not None:
            updates.append(sa.KEEPER_STEP.value_set(state.shown_step.value))
        self._publisher.publish(dv.render_details(dv.view_of(state)), updates)


def _require_canonical_id(runner: str) -> None:
    expected = deletion_workflow_id(runner)
    if workflow.info().workflow_id != expected:
        # keeper finds a runner's deletion by this id; one started under another id could
        # be neither found nor joined, and a second one could race it.
        raise ApplicationError(
            f"a RunnerDeletion of runner {runner!r} must run as workflow id "
            f"{expected!r}, not {workflow.info().workflow_id!r}; start it with "
            f"`keeper runner delete {runner}` or --workflow-id {expected}",
            type=WRONG_WORKFLOW_ID,
            non_retryable=True,
        )


def _cause(err: ActivityError) -> str:
    cause = err.cause
    text = str(cause) if cause is not None else str(err)
    return text[:300]
