"""RunnerDeletion: the one owner of a runner's deletion, from request to tombstone.

Workflow id `runner-delete-<runner>`. Every actor that wants a runner gone (its agent
reporting terminated, a scale-down, an operator, the reconciler) starts this workflow or
joins the running one; none of them writes a deletion-lane status. Each step re-reads the
record and acts on what the store holds, so every intermediate status resumes after a
crash. The lane is forward-only: a cancel request does not abandon a deletion that
has started, because a half-deleted runner is exactly the leak keeper exists to prevent.

Waiting costs no history. GitHub and the provider are asked again by activity retry
policies (each answer that only means "later" is a retry, not an event), so the workflow
records only decisions: busy, escalated, forced, gone. A run that still waits after
`policy.history_events_limit` events, or when the server suggests it, continues as new.
Runs started before the `deletion-v2` patch replay through workflows/runners/deletion_v1.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from keeper.activities.runners.deletion import (
        GitHubActivities,
        ProviderActivities,
        RunnerStoreActivities,
    )
    from keeper.domain.common.alerts import AlertKind, make_alert
    from keeper.domain.common.untrusted import md_text
    from keeper.domain.runners.calls import (
        DeregisterCall,
        DeregisterResult,
        FinishDeletion,
        LaneResult,
        LaneWrite,
        LeakReport,
        ProviderDelete,
        ProviderResult,
        RegistrationRef,
        registration_ref,
    )
    from keeper.domain.runners.deletion_state import DeletionState, result_of, view_of
    from keeper.domain.runners.deletion_view import DeletionView, render_details
    from keeper.domain.runners.deregister_steps import (
        NO_REGISTRATION,
        Act,
        Deregistration,
        on_answer,
        on_force,
        on_gave_up,
    )
    from keeper.domain.runners.deregistration import DeregisterMode
    from keeper.domain.runners.lane import LaneMove, entry_target
    from keeper.domain.runners.models import (
        DELETION_WORKFLOW_TYPE,
        REQUEST_SIGNAL,
        DeletionCarry,
        DeletionOutcome,
        DeletionRequest,
        DeletionResult,
        DeletionStep,
        RunnerDeletionInput,
        RunnerRecord,
        deletion_workflow_id,
    )
    from keeper.domain.runners.provider import describe_provider
    from keeper.domain.runners.status import InstanceStatus
    from keeper.runtime.runners import search_attributes as sa
    from keeper.workflows.common.alerts import raise_alert
    from keeper.workflows.common.shielded import run_to_completion
    from keeper.workflows.runners import activity_options as opts
    from keeper.workflows.runners import metrics
    from keeper.workflows.runners.deletion_v1 import LegacyDeletion

T = TypeVar("T")
S = InstanceStatus
DELETION_V2 = "deletion-v2"
PROVIDER_CANCEL_WAITS = "provider-cancel-waits"
# A refused GitHub token comes back to the workflow once, so the deletion says it needs
# attention (the DeregisterResult is an extra completed activity in the history).
GITHUB_AUTH_ATTENTION = "github-auth-attention"
# Runs past this patch alert an operator (keeper.alert) when a deletion escalates.
ALERTS_ESCALATED = "alerts-runner-escalated"
SEARCHABLE_STEPS = frozenset({DeletionStep.BUSY_WAIT, DeletionStep.ESCALATED, DeletionStep.DONE})
UNKNOWN_RUNNER = "UnknownRunner"
WRONG_WORKFLOW_ID = "WrongWorkflowId"
# Requests kept across a roll-over: enough to tell who asked, bounded however many ask.
CARRIED_REQUESTS = 20
# What the details show that the store does not hold, carried as it is into the next run.
CARRIED_VIEW_FIELDS = (
    "escalated",
    "busy_since",
    "decision",
    "error",
    "github",
    "github_attempts",
    "provider",
    "provider_attempts",
    "attention",
)
GITHUB_WAIT = (
    "GitHub: Temporal asks again by itself; the pending activity shows the attempt, "
    "the last answer and the next try"
)
PROVIDER_WAIT = (
    "provider: Temporal retries the delete; the pending activity shows the attempt, "
    "the last error and the next try"
)


class _RollOver(Exception):
    """The history is long enough: hand over to a new run at the next safe point."""


@workflow.defn(
    name=DELETION_WORKFLOW_TYPE,
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class RunnerDeletion:
    def __init__(self) -> None:
        self._state: DeletionState | None = None
        self._force = False
        self._requests: list[str] = []
        self._rejected: list[str] = []
        self._sa_step: DeletionStep | None = None
        # Escalation alerts raised by this run, by episode.
        self._alerted: set[str] = set()
        # What happened to the GitHub registration, for the audit of `-> deleting`.
        self._registration = "registration step done in an earlier run"

    @workflow.query(description="Step, record status, GitHub and provider answers, attempts.")
    def status(self) -> DeletionView | None:
        return view_of(self._state) if self._state is not None else None

    @workflow.signal(name=REQUEST_SIGNAL, description="Another actor asks for this deletion.")
    def request(self, *payload: Any) -> None:
        # Decoded by hand: a payload that is not a DeletionRequest is shown as rejected
        # instead of being dropped by the SDK (or failing the workflow task) unseen.
        try:
            if len(payload) != 1:
                raise ValueError(f"expected one DeletionRequest, got {len(payload)} values")
            request = DeletionRequest.model_validate_json(json.dumps(payload[0]))
        except (ValueError, TypeError) as err:
            problem = _problem(err)
            workflow.logger.warning("rejected a deletion request: %s", problem)
            self._rejected.append(problem)
            if self._state is not None:
                self._state.rejected = list(self._rejected)
            self._publish()
            return
        self._note_request(request)
        self._publish()

    def _note_request(self, request: DeletionRequest) -> None:
        label = request.requested_by.value + (" (force)" if request.force else "")
        if request.reason:
            label += f": {request.reason}"
        self._requests.append(label)
        if request.force:
            self._force_now()
        if self._state is not None:
            self._state.requests = list(self._requests)

    def _force_now(self) -> None:
        self._force = True
        if self._state is not None:
            self._state.force = True

    @workflow.run
    async def run(self, inp: RunnerDeletionInput) -> DeletionResult:
        expected = deletion_workflow_id(inp.runner)
        if workflow.info().workflow_id != expected:
            # keeper finds a runner's deletion by this id; one started under another id could
            # be neither found nor joined, and a second one could race it.
            raise ApplicationError(
                f"a RunnerDeletion of runner {inp.runner!r} must run as workflow id "
                f"{expected!r}, not {workflow.info().workflow_id!r}; start it with "
                f"`keeper runner delete {inp.runner}` or --workflow-id {expected}",
                type=WRONG_WORKFLOW_ID,
                non_retryable=True,
            )
        self._policy = inp.policy
        carry = inp.carried
        if carry is not None:
            self._requests = [*carry.requests, *self._requests]
            self._rejected = [*carry.rejected, *self._rejected]
            self._force = self._force or carry.force
        # A request sent with the start (signal-with-start) was handled before `run`.
        self._state = DeletionState(
            runner=inp.runner,
            requests=list(self._requests),
            rejected=list(self._rejected),
            force=self._force,
        )
        if inp.request is not None:
            self._note_request(inp.request)
        if not workflow.patched(DELETION_V2):
            return await self._run_v1(inp)
        if carry is not None:
            self._resume_view(carry)
        elif workflow.info().typed_search_attributes.get(sa.RUNNER_NAME) is None:
            # Started by hand (temporal workflow start) rather than by keeper's request.
            workflow.upsert_search_attributes([sa.RUNNER_NAME.value_set(inp.runner)])
        self._publish()
        # Once started, the deletion finishes: a cancel is recorded and shown, not obeyed,
        # since stopping halfway is what strands records on the lane.
        result, _ = await run_to_completion(self._delete(inp, carry), self._cancel_seen)
        return metrics.deletion_closed(result)

    async def _run_v1(self, inp: RunnerDeletionInput) -> DeletionResult:
        assert self._state is not None
        if workflow.info().typed_search_attributes.get(sa.RUNNER_NAME) is None:
            workflow.upsert_search_attributes([sa.RUNNER_NAME.value_set(inp.runner)])
        self._publish()
        legacy = LegacyDeletion(
            self._state,
            inp.policy,
            self._requests,
            lambda: self._force,
            self._force_now,
            self._publish,
        )
        result, _ = await run_to_completion(legacy.delete(inp.runner), self._cancel_seen)
        return metrics.deletion_closed(result)

    def _cancel_seen(self) -> None:
        assert self._state is not None
        self._state.cancel_requested = True
        self._publish()

    # ---- the steps -----------------------------------------------------------------------

    async def _delete(
        self, inp: RunnerDeletionInput, carry: DeletionCarry | None
    ) -> DeletionResult:
        state = self._state
        assert state is not None
        runner = inp.runner
        # 1. Onto the lane, reading the record in the same step. A record already on the
        # lane counts as success; a tombstone means there is nothing left to do.
        record = await self._enter_lane(runner)
        if record.instance_status is S.PENDING_FORCE_DELETE and not self._force:
            # A forced deletion whose run ended early (terminated) stays forced when
            # another request resumes it.
            self._force_now()
        state.scale_set = record.scale_set
        if carry is None:
            first = (
                DeletionStep.DONE
                if record.instance_status is S.DELETED
                else DeletionStep.PENDING_DELETE
            )
            self._sa_step = first
            updates = [sa.RUNNER_STEP.value_set(first.value)]
            if not _has_problem(record, "scale_set"):
                # A stored value that fails the record check may not fit a search attribute
                # (the server terminates a run whose upsert it refuses): left out.
                updates.insert(0, sa.SCALE_SET.value_set(record.scale_set))
            workflow.upsert_search_attributes(updates)
        if record.instance_status is S.DELETED:
            self._step(DeletionStep.DONE, record)
            return self._result(DeletionOutcome.ALREADY_DELETED)

        # 2. Registration before compute: a registered runner can still be handed a job.
        if carry is not None and carry.registration_left is not None:
            registration_left = carry.registration_left
            self._registration = carry.registration or self._registration
        else:
            self._step(DeletionStep.PENDING_DELETE, record)
            registration_left, self._registration = await self._deregister(
                record, self._first_mode(record, carry)
            )
            if self._force and record.instance_status is S.PENDING_DELETE:
                record = await self._enter_lane(runner)  # a force arrived meanwhile: say so

        # 3. deleting. The audit says what happened to the registration, removed or not.
        self._step(DeletionStep.DELETING, record)
        record = await self._lane(runner, S.DELETING, self._registration)

        # 4. The compute, until the provider confirms it gone (or a force gives up).
        leaked = await self._delete_instance(record, registration_left)

        # 5. deleted, with the tombstone in the same write.
        self._step(DeletionStep.DELETED, record)
        finish = await workflow.execute_activity_method(
            RunnerStoreActivities.finish_deleted,
            FinishDeletion(runner=runner, incarnation=record.created_at),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary="deleting -> deleted (tombstone)",
        )
        # The runner is deleted now, whatever the registration cleanup below still does.
        state.tombstoned = True
        state.recovered = finish.recovered
        if finish.recovered:
            state.decision = (
                f"final write refused (row was {finish.found_status}); "
                "finished through the audited recovery path"
            )
        if registration_left:
            await self._cleanup_registration(record)
        self._step(DeletionStep.DONE, None if finish.replaced else finish.record)
        state.leaked_provider_id = leaked
        return self._result(DeletionOutcome.DELETED)

    def _first_mode(self, record: RunnerRecord, carry: DeletionCarry | None) -> DeregisterMode:
        if self._force or record.instance_status is S.DELETING:
            # Once the record says `deleting`, the compute's deletion was decided: one answer,
            # and a registration that cannot go yet is cleaned up after the compute.
            return DeregisterMode.FORCE
        if carry is not None and carry.escalated:
            return DeregisterMode.RECHECK
        if carry is not None and carry.busy_since is not None:
            return DeregisterMode.BUSY
        return DeregisterMode.WAIT

    async def _lane(self, runner: str, target: InstanceStatus, reason: str) -> RunnerRecord:
        result: LaneResult = await workflow.execute_activity_method(
            RunnerStoreActivities.advance_lane,
            LaneWrite(runner=runner, target=target, reason=reason),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary=f"record -> {target}",
        )
        if result.move is LaneMove.BLOCKED or result.record is None:
            found = result.record.instance_status if result.record else "missing"
            raise ApplicationError(
                f"runner {runner!r}: cannot move the record from {found} to {target}",
                type="LaneBlocked",
                non_retryable=True,
            )
        assert self._state is not None
        self._state.status = result.record.instance_status.value
        self._publish()
        return result.record

    async def _enter_lane(self, runner: str) -> RunnerRecord:
        requested = self._requests[-1] if self._requests else "deletion requested"
        try:
            return await self._lane(runner, entry_target(self._force), requested)
        except ActivityError as err:
            if not (isinstance(err.cause, ApplicationError) and err.cause.type == UNKNOWN_RUNNER):
                raise
        assert self._state is not None
        self._state.error = f"no runner named {runner!r} in the runner store"
        self._publish()
        raise ApplicationError(
            f"runner: no runner named {runner!r} in the runner store; "
            "`keeper runner list` shows the known runners",
            type=UNKNOWN_RUNNER,
            non_retryable=True,
        )

    async def _deregister(self, record: RunnerRecord, mode: DeregisterMode) -> tuple[bool, str]:
        """Removes the GitHub registration. Returns whether it is left for after the compute
        is gone (a busy runner the policy or a force said to delete anyway), and what
        happened to it, for the record's audit. The rules are domain.runners.deregister_steps;
        this loop only carries their moves out."""
        state = self._state
        assert state is not None
        ref = registration_ref(record)
        if ref is None:
            state.github = NO_REGISTRATION
            self._publish()
            return False, NO_REGISTRATION
        self._step(DeletionStep.DEREGISTER, record)
        reports_auth = workflow.patched(GITHUB_AUTH_ATTENTION)
        dereg = Deregistration(
            mode=mode,
            busy_since=state.busy_since,
            escalated=state.escalated,
            decision=state.decision,
            error=state.error,
            github=state.github,
            github_attempts=state.github_attempts,
            attention=state.attention,
        )
        while True:
            dereg = replace(dereg, force=self._force).asking()
            busy_until = dereg.busy_since + self._policy.busy_wait if dereg.busy_since else None
            try:
                result = await self._interruptible(
                    self._ask_github(
                        ref, dereg.mode, busy_until, reports_auth and dereg.report_auth()
                    ),
                    carry=lambda mode=dereg.mode: self._carry(registration_left=None, mode=mode),
                )
            except ActivityError as err:
                gave_up = on_gave_up(dereg, _cause(err)) if err.retry_state in _GAVE_UP else None
                if gave_up is None:
                    raise
                state.waiting = None
                move = gave_up
            else:
                if result is None:  # a force arrived while GitHub was being asked
                    move = on_force(dereg)
                else:
                    state.waiting = None
                    move = on_answer(
                        replace(dereg, waiting_shown=self._sa_step in _WAITING),
                        result.answer,
                        attempts=result.attempts,
                        policy=self._policy,
                        now=workflow.now(),
                        runner=record.name,
                        token_source=result.token_source,
                    )
            dereg = move.state
            self._take(dereg)
            if move.step is not None:
                self._step(move.step, record, searchable=move.searchable)
            else:
                self._publish()
            if move.act is not Act.ASK:
                return move.act is Act.LEAVE, move.audit or NO_REGISTRATION

    def _take(self, dereg: Deregistration) -> None:
        """The deregistration step's state, written back into the deletion's."""
        state = self._state
        assert state is not None
        state.busy_since = dereg.busy_since
        state.escalated = dereg.escalated
        state.decision = dereg.decision
        state.error = dereg.error
        state.github = dereg.github
        state.github_attempts = dereg.github_attempts
        state.attention = dereg.attention

    def _ask_github(
        self,
        ref: RegistrationRef,
        mode: DeregisterMode,
        busy_until: datetime | None,
        report_auth: bool = False,
    ) -> asyncio.Task[DeregisterResult]:
        assert self._state is not None
        self._state.waiting = GITHUB_WAIT
        self._publish()
        attempts = self._policy.force_provider_attempts if mode is DeregisterMode.FORCE else 0
        if mode is DeregisterMode.CLEANUP:
            attempts = self._policy.registration_cleanup_attempts
        return workflow.start_activity_method(
            GitHubActivities.deregister,
            DeregisterCall(
                ref=ref,
                mode=mode.value,
                policy=self._policy,
                busy_until=busy_until,
                report_auth=report_auth,
            ),
            start_to_close_timeout=opts.GITHUB_START_TO_CLOSE,
            retry_policy=opts.github_retry(self._policy, attempts),
            summary=f"{mode.value}: remove GitHub registration {ref.runner_id} "
            f"({md_text(ref.scope)})",
        )

    async def _delete_instance(self, record: RunnerRecord, registration_left: bool) -> str | None:
        """Returns the provider id left behind by a forced delete, if any."""
        state = self._state
        assert state is not None
        self._step(DeletionStep.PROVIDER_DELETE, record)
        instance_id = record.provider_id or record.name
        bad_id = [p for p in record.problems if p.startswith("provider_id:")]
        if bad_id and not self._force:
            # No provider can take this id (the store refuses such rows now; this one is
            # older): asking again will not help, so an operator decides.
            await self._escalate_until_forced(
                record,
                f"the record's provider id is invalid ({bad_id[0]})",
                lambda: self._carry(registration_left=registration_left),
            )
        call = ProviderDelete(
            runner=record.name,
            instance_id=instance_id,
            pool_id=record.scale_set,
            timeout_s=self._policy.provider_timeout.total_seconds(),
        )
        while True:
            forced = self._force
            state.waiting = PROVIDER_WAIT
            self._publish()
            task = workflow.start_activity_method(
                ProviderActivities.provider_delete,
                call,
                # An attempt may first wait out an earlier one's lease (runtime/instance_lease).
                start_to_close_timeout=2 * timedelta(seconds=call.timeout_s) + opts.PROVIDER_MARGIN,
                heartbeat_timeout=self._policy.provider_heartbeat,
                # A force cancels the attempt in flight; the forced one starts only once the
                # cancelled one has killed its process and given the instance's lease back.
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
                if workflow.patched(PROVIDER_CANCEL_WAITS)
                else ActivityCancellationType.TRY_CANCEL,
                retry_policy=opts.provider_retry(
                    self._policy, self._policy.force_provider_attempts if forced else 0
                ),
                summary=f"{'force ' if forced else ''}provider delete "
                f"{md_text(call.instance_id)} (pool {md_text(call.pool_id)})",
            )
            try:
                result: ProviderResult | None = await self._interruptible(
                    task,
                    carry=lambda: self._carry(registration_left=registration_left),
                    on_force=not forced,
                )
            except ActivityError as err:
                if not forced:
                    raise
                return await self._give_up_instance(record, instance_id, err)
            if result is None:  # a force arrived: the attempts are capped from here on
                continue
            state.waiting = None
            state.provider = describe_provider(result.answer)
            state.provider_attempts += result.attempts
            self._publish()
            return None

    async def _escalate_until_forced(self, record: RunnerRecord, why: str, carry: Any) -> None:
        state = self._state
        assert state is not None
        state.escalated = True
        state.decision = f"{why}; escalated to an operator"
        state.error = (
            f"{why}. Fix the record, or run `keeper runner delete {record.name} --force`: "
            "keeper then tries the provider a few times and records the instance as a leak"
        )
        self._step(DeletionStep.ESCALATED, record)
        metrics.escalated()
        await workflow.wait_condition(lambda: self._force or self._history_is_long())
        if not self._force:
            await self._continue_as_new(carry())
        state.escalated = False
        state.error = None
        state.decision = f"{why}; answered: force requested"
        self._step(DeletionStep.PROVIDER_DELETE, record, searchable=True)

    async def _give_up_instance(
        self, record: RunnerRecord, instance_id: str, err: ActivityError
    ) -> str:
        state = self._state
        assert state is not None
        state.waiting = None
        state.provider = _cause(err)
        state.provider_attempts += self._policy.force_provider_attempts
        reason = (
            f"forced delete gave up after {self._policy.force_provider_attempts} attempts: "
            f"{state.provider}"
        )
        self._step(DeletionStep.PROVIDER_DELETE, record, searchable=True)
        await workflow.execute_activity_method(
            RunnerStoreActivities.record_leak,
            LeakReport(
                runner=record.name,
                provider_id=instance_id,
                scale_set=record.scale_set,
                reason=reason,
            ),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary=f"record leaked instance {md_text(instance_id)} for the orphan sweep",
        )
        state.decision = f"leak recorded: {instance_id} ({reason})"
        self._publish()
        return instance_id

    async def _cleanup_registration(self, record: RunnerRecord) -> None:
        """After a busy runner's compute is gone it is offline, and GitHub lets the
        registration go. Bounded: GitHub itself removes offline runners eventually."""
        state = self._state
        assert state is not None
        ref = registration_ref(record)
        if ref is None:
            return
        state.step = DeletionStep.DONE
        state.status = S.DELETED.value
        state.background = (
            f"removing GitHub registration {ref.runner_id} now that the runner is offline "
            f"(at most {self._policy.registration_cleanup_attempts} tries); the runner is "
            "deleted whatever it answers"
        )
        try:
            result = await self._ask_github(ref, DeregisterMode.CLEANUP, None)
        except ActivityError as err:
            state.decision = (
                f"{state.decision or ''}; registration still present ({_cause(err)}): GitHub "
                "removes offline runners after 14 days"
            ).lstrip("; ")
        else:
            state.github = result.answer.message
            state.github_attempts += result.attempts
        state.waiting = None
        state.background = None

    # ---- waiting without history -------------------------------------------------------

    async def _interruptible(
        self,
        task: asyncio.Task[T],
        *,
        carry: Any,
        on_force: bool = True,
    ) -> T | None:
        """Awaits an activity that Temporal retries for as long as it takes. Returns None
        when a force request arrives first (the call is cancelled so the caller can ask
        again with a force's patience), and continues as new when the history is long."""
        forced_before = self._force
        waiter = asyncio.ensure_future(
            workflow.wait_condition(
                lambda: (on_force and self._force != forced_before) or self._history_is_long()
            )
        )
        await workflow.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            return task.result()
        task.cancel()
        with contextlib.suppress(ActivityError, CancelledError, asyncio.CancelledError):
            await task
        if self._history_is_long():
            await self._continue_as_new(carry())
        return None

    def _history_is_long(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self._policy.history_events_limit
        )

    def _carry(
        self, *, registration_left: bool | None, mode: DeregisterMode | None = None
    ) -> DeletionCarry:
        state = self._state
        assert state is not None
        shown = state.model_dump(include=set(CARRIED_VIEW_FIELDS))
        # Rolled over while re-checking: the next run goes on re-checking.
        shown["escalated"] = state.escalated or mode is DeregisterMode.RECHECK
        return DeletionCarry(
            run=state.run + 1,
            force=self._force,
            requests=tuple(self._requests[-CARRIED_REQUESTS:]),
            rejected=tuple(self._rejected[-CARRIED_REQUESTS:]),
            registration_left=registration_left,
            registration=self._registration if registration_left is not None else None,
            **shown,
        )

    async def _continue_as_new(self, carry: DeletionCarry) -> NoReturn:
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.logger.info(
            "history at %d events: continuing as run %d",
            workflow.info().get_current_history_length(),
            carry.run,
        )
        assert self._state is not None
        workflow.continue_as_new(
            RunnerDeletionInput(
                runner=self._state.runner, request=None, policy=self._policy, carried=carry
            )
        )

    def _resume_view(self, carry: DeletionCarry) -> None:
        state = self._state
        assert state is not None
        # Search attributes come along with a continue-as-new; so must what they say.
        step = workflow.info().typed_search_attributes.get(sa.RUNNER_STEP)
        self._sa_step = DeletionStep(step) if step in DeletionStep._value2member_map_ else None
        state.run = carry.run
        for name in CARRIED_VIEW_FIELDS:
            setattr(state, name, getattr(carry, name))

    # ---- plumbing ----------------------------------------------------------------------

    def _step(
        self, step: DeletionStep, record: RunnerRecord | None, *, searchable: bool = False
    ) -> None:
        """Moves the current step. The RunnerStep search attribute follows only the steps an
        operator searches for (waiting, escalated, retrying, done): each upsert is a history
        event and a visibility write, and the happy path needs no more than two."""
        assert self._state is not None
        if step is DeletionStep.ESCALATED and self._sa_step is not DeletionStep.ESCALATED:
            # The RunnerStep attribute comes along with a continue-as-new, so a run that
            # resumes an escalation does not raise it again.
            self._alert_escalated(record)
        self._state.step = step
        if record is not None:
            self._state.status = record.instance_status.value
        if (searchable or step in SEARCHABLE_STEPS) and step is not self._sa_step:
            self._sa_step = step
            workflow.upsert_search_attributes([sa.RUNNER_STEP.value_set(step.value)])
        self._publish()

    def _alert_escalated(self, record: RunnerRecord | None) -> None:
        state = self._state
        assert state is not None
        if not workflow.patched(ALERTS_ESCALATED):
            return
        info = workflow.info()
        # One alert per escalation episode: what escalated it names the episode.
        key = f"{info.first_execution_run_id}/{state.decision or ''}"
        if key in self._alerted:
            return
        self._alerted.add(key)
        evidence = [
            line
            for line in (
                f"scale set: {state.scale_set}" if state.scale_set else None,
                f"status: {record.instance_status.value}" if record is not None else None,
                state.error,
            )
            if line
        ]
        summary = f"{state.runner}: {state.decision or 'an operator must decide'}"
        raise_alert(
            make_alert(AlertKind.DELETION_ESCALATED, info.workflow_id, key, summary, evidence)
        )

    def _publish(self) -> None:
        if self._state is None:
            return
        workflow.set_current_details(render_details(view_of(self._state)))

    def _result(self, outcome: DeletionOutcome) -> DeletionResult:
        assert self._state is not None
        self._state.requests = list(self._requests)
        return result_of(self._state, outcome)


_WAITING = frozenset({DeletionStep.BUSY_WAIT, DeletionStep.ESCALATED})
# Retry states that mean "the attempts a force allows are used up".
_GAVE_UP = frozenset({RetryState.MAXIMUM_ATTEMPTS_REACHED, RetryState.TIMEOUT})


def _has_problem(record: RunnerRecord, field: str) -> bool:
    return any(problem.startswith(f"{field}:") for problem in record.problems)


def _cause(err: ActivityError) -> str:
    cause = err.cause
    text = str(cause) if cause is not None else str(err)
    return text[:300]


def _problem(err: Exception) -> str:
    if isinstance(err, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in err.errors()
        )[:300]
    return str(err)[:300]
