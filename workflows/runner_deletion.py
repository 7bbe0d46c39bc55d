"""RunnerDeletion: the one owner of a runner's deletion, from request to tombstone.

Workflow id `runner-delete-<runner>`. Every actor that wants a runner gone (its agent
reporting terminated, a scale-down, an operator, the reconciler) starts this workflow or
joins the running one; none of them writes a deletion-lane status. Each step re-reads the
record and acts on what the store holds, so every intermediate status resumes after a
crash. The lane is forward-only: a cancel request does not abandon a deletion that
has started, because a half-deleted runner is exactly the leak keeper exists to prevent.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.runners import GitHubActivities, ProviderActivities, RunnerStoreActivities
    from domain.deletion_view import DeletionView, backoff, render_details
    from domain.github import DeregistrationAnswer
    from domain.provider import ProviderAnswer, ProviderOutcome
    from domain.runner_calls import (
        FinishDeletion,
        LaneResult,
        LaneWrite,
        LeakReport,
        ProviderDelete,
        RegistrationRef,
    )
    from domain.runner_lane import LaneMove, entry_target
    from domain.runner_models import (
        BusyTimeoutAction,
        DeletionOutcome,
        DeletionRequest,
        DeletionResult,
        DeletionStep,
        RunnerDeletionInput,
        RunnerRecord,
    )
    from domain.runner_status import InstanceStatus
    from workflows import activity_options as opts
    from workflows import search_attributes as sa
    from workflows.shielded import run_to_completion

S = InstanceStatus
REQUEST_SIGNAL = "request"
SEARCHABLE_STEPS = frozenset({DeletionStep.BUSY_WAIT, DeletionStep.ESCALATED, DeletionStep.DONE})
UNKNOWN_RUNNER = "UnknownRunner"


@workflow.defn(
    name="RunnerDeletion",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
)
class RunnerDeletion:
    def __init__(self) -> None:
        self._view: DeletionView | None = None
        self._force = False
        self._requests: list[str] = []
        self._sa_step: DeletionStep | None = None

    @workflow.query(description="Step, record status, GitHub and provider answers, attempts.")
    def status(self) -> DeletionView | None:
        return self._view

    @workflow.signal(name=REQUEST_SIGNAL, description="Another actor asks for this deletion.")
    def request(self, request: DeletionRequest) -> None:
        self._note_request(request)
        self._publish()

    def _note_request(self, request: DeletionRequest) -> None:
        label = request.requested_by.value + (" (force)" if request.force else "")
        if request.reason:
            label += f": {request.reason}"
        self._requests.append(label)
        if request.force:
            self._force = True
        if self._view is not None:
            self._view.requests = list(self._requests)
            self._view.force = self._force

    @workflow.run
    async def run(self, inp: RunnerDeletionInput) -> DeletionResult:
        self._policy = inp.policy
        # A request sent with the start (signal-with-start) was handled before `run`.
        self._view = DeletionView(
            runner=inp.runner, requests=list(self._requests), force=self._force
        )
        if inp.request is not None:
            self._note_request(inp.request)
        if workflow.info().typed_search_attributes.get(sa.RUNNER_NAME) is None:
            # Started by hand (temporal workflow start) rather than by keeper's request.
            workflow.upsert_search_attributes([sa.RUNNER_NAME.value_set(inp.runner)])
        self._publish()
        # Once started, the deletion finishes: a cancel is recorded and shown, not obeyed,
        # since stopping halfway is what strands records on the lane.
        result, _ = await run_to_completion(self._delete(inp.runner), self._cancel_seen)
        return result

    def _cancel_seen(self) -> None:
        assert self._view is not None
        self._view.cancel_requested = True
        self._publish()

    async def _delete(self, runner: str) -> DeletionResult:
        assert self._view is not None
        # 1. Onto the lane, reading the record in the same step. A record already on the
        # lane counts as success; a tombstone means there is nothing left to do.
        try:
            record = await self._enter_lane(runner)
        except ActivityError as err:
            if not (isinstance(err.cause, ApplicationError) and err.cause.type == UNKNOWN_RUNNER):
                raise
            self._view.error = f"no runner named {runner!r} in the runner store"
            self._publish()
            raise ApplicationError(
                f"runner: no runner named {runner!r} in the runner store; "
                "`keeper runner list` shows the known runners",
                type=UNKNOWN_RUNNER,
                non_retryable=True,
            ) from None
        if record.instance_status is S.PENDING_FORCE_DELETE and not self._force:
            # A forced deletion whose run ended early (terminated) stays forced when
            # another request resumes it.
            self._force = True
            self._view.force = True
        self._view.scale_set = record.scale_set
        first = (
            DeletionStep.DONE
            if record.instance_status is S.DELETED
            else DeletionStep.PENDING_DELETE
        )
        self._sa_step = first
        workflow.upsert_search_attributes(
            [sa.SCALE_SET.value_set(record.scale_set), sa.RUNNER_STEP.value_set(first.value)]
        )
        if record.instance_status is S.DELETED:
            self._step(DeletionStep.DONE, record)
            return self._result(DeletionOutcome.ALREADY_DELETED)
        self._step(DeletionStep.PENDING_DELETE, record)

        # 2. Registration before compute: a registered runner can still be handed a job.
        registration_left = await self._deregister(record)
        if self._force and record.instance_status is S.PENDING_DELETE:
            record = await self._enter_lane(runner)  # a force arrived meanwhile: say so

        # 3. deleting.
        self._step(DeletionStep.DELETING, record)
        record = await self._lane(runner, S.DELETING, "registration removed")

        # 4. The compute, until the provider confirms it gone (or a force gives up).
        leaked = await self._delete_instance(record)

        # 5. deleted, with the tombstone in the same write.
        self._step(DeletionStep.DELETED, record)
        finish = await workflow.execute_activity_method(
            RunnerStoreActivities.finish_deleted,
            FinishDeletion(runner=runner, incarnation=record.created_at),
            start_to_close_timeout=opts.STORE_START_TO_CLOSE,
            retry_policy=opts.STORE_RETRY,
            summary="deleting -> deleted (tombstone)",
        )
        if finish.recovered:
            self._view.decision = (
                f"final write refused (row was {finish.found_status}); "
                "finished through the audited recovery path"
            )
        if registration_left:
            await self._cleanup_registration(record)
        self._step(DeletionStep.DONE, None if finish.replaced else finish.record)
        return self._result(DeletionOutcome.DELETED, leaked=leaked, recovered=finish.recovered)

    # ---- steps -------------------------------------------------------------------------

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
        assert self._view is not None
        self._view.status = result.record.instance_status.value
        self._publish()
        return result.record

    async def _enter_lane(self, runner: str) -> RunnerRecord:
        requested = self._requests[-1] if self._requests else "deletion requested"
        return await self._lane(runner, entry_target(self._force), requested)

    async def _deregister(self, record: RunnerRecord) -> bool:
        """Removes the GitHub registration. Returns True if it is left for after the
        compute is gone (a busy runner the policy or a force said to delete anyway)."""
        view = self._view
        assert view is not None
        ref = _registration(record)
        if ref is None:
            view.github = "no registration recorded"
            self._publish()
            return False
        self._step(DeletionStep.DEREGISTER, record)
        failures = 0
        escalated = False
        while True:
            answer = await self._remove_registration(ref)
            if answer.done:
                view.busy_since = None
                view.next_try_at = None
                if escalated:
                    view.error = None
                    view.decision = f"resolved while escalated: GitHub answered {answer.message}"
                # After an escalation, RunnerStep moves off `escalated` too.
                self._step(DeletionStep.DEREGISTER, record, searchable=escalated)
                return False
            if answer.busy:
                failures = 0
                if self._force:
                    view.decision = "runner busy; force: deleting the compute anyway"
                    return True
                now = workflow.now()
                if view.busy_since is None:
                    view.busy_since = now
                if escalated or now - view.busy_since >= self._policy.busy_wait:
                    if not escalated and self._policy.on_busy_timeout is BusyTimeoutAction.PROCEED:
                        view.decision = (
                            f"still busy after {self._policy.busy_wait}: proceeding "
                            "(policy on_busy_timeout=proceed); the job on it is lost"
                        )
                        self._publish()
                        return True
                    escalated = True
                    await self._escalate(
                        record,
                        f"runner still busy after {self._policy.busy_wait}",
                        f"runner {record.name} is still running a job. Let it finish (keeper "
                        "checks again by itself), or run "
                        f"`keeper runner delete {record.name} --force` to delete it anyway",
                    )
                    continue
                self._step(DeletionStep.BUSY_WAIT, record)
                await self._pause(self._policy.busy_poll)
                continue
            if not answer.retryable and not self._force:
                # A 4xx that is neither "busy" nor "gone": retrying the same call will not
                # change it, so an operator decides.
                escalated = True
                await self._escalate(
                    record,
                    f"GitHub refused the removal ({answer.message})",
                    f"GitHub refused to remove runner {record.name}: {answer.message}. Fix "
                    "the cause (keeper checks again by itself), or run "
                    f"`keeper runner delete {record.name} --force` to delete it anyway",
                )
                continue
            failures += 1
            self._step(DeletionStep.DEREGISTER, record, searchable=True)
            if self._force and failures >= self._policy.force_provider_attempts:
                view.decision = (
                    f"force: GitHub kept failing ({answer.message}); "
                    "registration left for GitHub's offline-runner cleanup"
                )
                return True
            wait = backoff(failures, self._policy.retry_initial, self._policy.retry_max)
            if answer.retry_after_s:
                wait = max(wait, timedelta(seconds=answer.retry_after_s))
            await self._pause(wait)

    async def _remove_registration(self, ref: RegistrationRef) -> DeregistrationAnswer:
        assert self._view is not None
        answer: DeregistrationAnswer = await workflow.execute_activity_method(
            GitHubActivities.remove_registration,
            ref,
            start_to_close_timeout=opts.GITHUB_START_TO_CLOSE,
            retry_policy=opts.GITHUB_RETRY,
            summary=f"remove GitHub registration {ref.runner_id} ({ref.scope})",
        )
        self._view.github = answer.message
        self._view.github_attempts += 1
        self._publish()
        return answer

    async def _escalate(self, record: RunnerRecord, why: str, what_to_do: str) -> None:
        """Stops the retries and waits for an operator's force. Every
        `policy.escalation_recheck` it returns anyway, so the caller asks GitHub once more:
        a job that ended, or a cause that was fixed, finishes the deletion by itself."""
        view = self._view
        assert view is not None
        view.decision = f"{why}; escalated to an operator"
        view.error = what_to_do
        self._step(DeletionStep.ESCALATED, record)
        await self._pause(self._policy.escalation_recheck)
        if self._force:
            view.error = None
            view.decision = f"{why}; escalation answered: force requested"
            # RunnerStep moves off `escalated`: nobody needs to find this one any more.
            self._step(DeletionStep.DEREGISTER, record, searchable=True)

    async def _delete_instance(self, record: RunnerRecord) -> str | None:
        """Returns the provider id left behind by a forced delete, if any."""
        view = self._view
        assert view is not None
        self._step(DeletionStep.PROVIDER_DELETE, record)
        instance_id = record.provider_id or record.name
        call = ProviderDelete(
            runner=record.name,
            instance_id=instance_id,
            pool_id=record.scale_set,
            timeout_s=self._policy.provider_timeout.total_seconds(),
        )
        failures = 0
        while True:
            answer = await self._provider_attempt(call)
            view.provider = _describe_provider(answer)
            view.provider_attempts += 1
            self._publish()
            if answer.gone:
                view.next_try_at = None
                return None
            failures += 1
            self._step(DeletionStep.PROVIDER_DELETE, record, searchable=True)
            if self._force and failures >= self._policy.force_provider_attempts:
                reason = f"forced delete gave up after {failures} attempts: {view.provider}"
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
                    summary=f"record leaked instance {instance_id} for the orphan sweep",
                )
                view.decision = f"leak recorded: {instance_id} ({reason})"
                self._publish()
                return instance_id
            await self._pause(backoff(failures, self._policy.retry_initial, self._policy.retry_max))

    async def _provider_attempt(self, call: ProviderDelete) -> ProviderAnswer:
        started = workflow.now()
        try:
            return await workflow.execute_activity_method(
                ProviderActivities.delete_instance,
                call,
                start_to_close_timeout=timedelta(seconds=call.timeout_s) + opts.PROVIDER_MARGIN,
                heartbeat_timeout=self._policy.provider_heartbeat,
                retry_policy=opts.ONE_ATTEMPT,
                summary=f"provider delete {call.instance_id} (pool {call.pool_id})",
            )
        except ActivityError as err:
            # A lost worker (heartbeat timeout) or an adapter crash: one failed attempt.
            cause = err.cause or err
            return ProviderAnswer(
                outcome=ProviderOutcome.FAILED,
                exit_code=None,
                message=f"attempt lost: {cause}",
                duration_s=(workflow.now() - started).total_seconds(),
            )

    async def _cleanup_registration(self, record: RunnerRecord) -> None:
        """After a busy runner's compute is gone it is offline, and GitHub lets the
        registration go. Bounded: GitHub itself removes offline runners eventually."""
        assert self._view is not None
        ref = _registration(record)
        if ref is None:
            return
        for attempt in range(1, self._policy.registration_cleanup_attempts + 1):
            answer = await self._remove_registration(ref)
            if answer.done:
                return
            await self._pause(backoff(attempt, self._policy.retry_initial, self._policy.retry_max))
        self._view.decision = (
            self._view.decision or ""
        ) + "; registration still present: GitHub removes offline runners after 14 days"

    # ---- plumbing ----------------------------------------------------------------------

    async def _pause(self, wait: timedelta) -> None:
        """Sleeps between attempts; a force request cuts the wait short."""
        assert self._view is not None
        self._view.next_try_at = workflow.now() + wait
        self._publish()
        force_before = self._force
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._force != force_before, timeout=wait)
        self._view.next_try_at = None

    def _step(
        self, step: DeletionStep, record: RunnerRecord | None, *, searchable: bool = False
    ) -> None:
        """Moves the current step. The RunnerStep search attribute follows only the steps an
        operator searches for (waiting, escalated, retrying, done): each upsert is a history
        event and a visibility write, and the happy path needs no more than two."""
        assert self._view is not None
        self._view.step = step
        if record is not None:
            self._view.status = record.instance_status.value
        if (searchable or step in SEARCHABLE_STEPS) and step is not self._sa_step:
            self._sa_step = step
            workflow.upsert_search_attributes([sa.RUNNER_STEP.value_set(step.value)])
        self._publish()

    def _publish(self) -> None:
        if self._view is None:
            return
        workflow.set_current_details(render_details(self._view))

    def _result(
        self,
        outcome: DeletionOutcome,
        *,
        leaked: str | None = None,
        recovered: bool = False,
    ) -> DeletionResult:
        assert self._view is not None
        return DeletionResult(
            runner=self._view.runner,
            outcome=outcome,
            forced=self._force,
            leaked_provider_id=leaked,
            registration=self._view.github,
            provider=self._view.provider,
            recovered=recovered,
            busy_decision=self._view.decision,
            requests=tuple(self._requests),
        )


def _registration(record: RunnerRecord) -> RegistrationRef | None:
    if record.github_runner_id is None or record.github_scope is None:
        return None
    return RegistrationRef(
        runner=record.name, scope=record.github_scope, runner_id=record.github_runner_id
    )


def _describe_provider(answer: ProviderAnswer) -> str:
    text = answer.outcome.value
    if answer.exit_code is not None:
        text += f" (exit {answer.exit_code})"
    if answer.message and not answer.gone:
        text += f": {answer.message[:200]}"
    return text + f" in {answer.duration_s:.1f}s"
