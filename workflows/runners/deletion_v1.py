"""RunnerDeletion as keeper 0.1 ran it: the deletion retried GitHub and the provider in
workflow code, one activity and one timer per attempt.

Frozen. Runs started before the `deletion-v2` patch (workflows/runners/deletion.py) replay
through this code, so nothing here may change the commands it emits. The three builds it
stands for changed escalation without a patch marker; `Era` tells them apart by the run's
start time, the only deterministic evidence of which build started a run. Retire it as
docs/operations.md (Rollouts) describes once no such run is open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import IntEnum

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from keeper.activities.runners.deletion import (
        GitHubActivities,
        ProviderActivities,
        RunnerStoreActivities,
    )
    from keeper.domain.runners.calls import (
        FinishDeletion,
        LaneResult,
        LaneWrite,
        LeakReport,
        ProviderDelete,
        RegistrationRef,
        registration_ref,
    )
    from keeper.domain.runners.deletion_state import DeletionState
    from keeper.domain.runners.deletion_view import backoff
    from keeper.domain.runners.github import DeregistrationAnswer
    from keeper.domain.runners.lane import LaneMove, entry_target
    from keeper.domain.runners.models import (
        BusyTimeoutAction,
        DeletionOutcome,
        DeletionPolicy,
        DeletionResult,
        DeletionStep,
        RunnerRecord,
    )
    from keeper.domain.runners.provider import ProviderAnswer, ProviderOutcome, describe_provider
    from keeper.domain.runners.status import InstanceStatus
    from keeper.runtime.runners import search_attributes as sa
    from keeper.workflows.runners import activity_options as opts

S = InstanceStatus
SEARCHABLE_STEPS = frozenset({DeletionStep.BUSY_WAIT, DeletionStep.ESCALATED, DeletionStep.DONE})
UNKNOWN_RUNNER = "UnknownRunner"


class Era(IntEnum):
    """Which 0.1 build started a run, by when the work on each change began (the commit
    before it): the recordings under tests/histories/2026-11-29-* and the flat ones."""

    WAIT_FOR_FORCE = 0  # b53ec22: an escalation waited for a force, nothing else
    RECHECKS = 1  # e9aae3a: an escalation re-checks GitHub; refused 4xx escalate
    STEP_AFTER_FORCE = 2  # a81f37a: RunnerStep leaves `escalated` once a force answers

    @classmethod
    def of(cls, started: datetime) -> Era:
        if started < datetime(2026, 11, 29, 14, 28, 53, tzinfo=UTC):
            return cls.WAIT_FOR_FORCE
        if started < datetime(2026, 11, 29, 14, 44, 30, tzinfo=UTC):
            return cls.RECHECKS
        return cls.STEP_AFTER_FORCE


class LegacyDeletion:
    """The 0.1 steps, run on the workflow's own state (view, force flag, requests)."""

    def __init__(
        self,
        view: DeletionState,
        policy: DeletionPolicy,
        requests: list[str],
        forced: Callable[[], bool],
        set_force: Callable[[], None],
        publish: Callable[[], None],
    ) -> None:
        self._view = view
        self._policy = policy
        self._requests = requests
        self._forced = forced
        self._set_force = set_force
        self._publish = publish
        self._sa_step: DeletionStep | None = None
        self._era = Era.of(workflow.info().workflow_start_time)

    @property
    def _force(self) -> bool:
        return self._forced()

    async def delete(self, runner: str) -> DeletionResult:
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
        if (
            record.instance_status is S.PENDING_FORCE_DELETE
            and not self._force
            and self._era >= Era.RECHECKS
        ):
            self._set_force()
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

        registration_left = await self._deregister(record)
        if self._force and record.instance_status is S.PENDING_DELETE:
            record = await self._enter_lane(runner)

        self._step(DeletionStep.DELETING, record)
        record = await self._lane(runner, S.DELETING, "registration removed")

        leaked = await self._delete_instance(record)

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
        self._view.status = result.record.instance_status.value
        self._publish()
        return result.record

    async def _enter_lane(self, runner: str) -> RunnerRecord:
        requested = self._requests[-1] if self._requests else "deletion requested"
        return await self._lane(runner, entry_target(self._force), requested)

    async def _deregister(self, record: RunnerRecord) -> bool:
        view = self._view
        ref = registration_ref(record)
        if ref is None:
            view.github = "no registration recorded"
            self._publish()
            return False
        self._step(DeletionStep.DEREGISTER, record)
        failures = 0
        escalated = False
        rechecks = self._era >= Era.RECHECKS
        while True:
            answer = await self._remove_registration(ref)
            if answer.done:
                view.busy_since = None
                view.next_try_at = None
                if escalated:
                    view.error = None
                    view.decision = f"resolved while escalated: GitHub answered {answer.message}"
                self._step(DeletionStep.DEREGISTER, record, searchable=escalated and rechecks)
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
                        f"runner {record.name} is still running a job. Let it finish, or run "
                        f"`keeper runner delete {record.name} --force` to delete it anyway",
                    )
                    continue
                self._step(DeletionStep.BUSY_WAIT, record)
                await self._pause(self._policy.busy_poll)
                continue
            if rechecks and not answer.retryable and not self._force:
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
        view = self._view
        view.decision = f"{why}; escalated to an operator"
        view.error = what_to_do
        self._step(DeletionStep.ESCALATED, record)
        if self._era is Era.WAIT_FOR_FORCE:
            await workflow.wait_condition(lambda: self._force)
        else:
            await self._pause(self._policy.escalation_recheck)
            if not self._force:
                return
        view.error = None
        view.decision = f"{why}; escalation answered: force requested"
        if self._era >= Era.STEP_AFTER_FORCE:
            self._step(DeletionStep.DEREGISTER, record, searchable=True)
        else:
            self._publish()

    async def _delete_instance(self, record: RunnerRecord) -> str | None:
        view = self._view
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
            view.provider = describe_provider(answer)
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
            cause = err.cause or err
            return ProviderAnswer(
                outcome=ProviderOutcome.FAILED,
                exit_code=None,
                message=f"attempt lost: {cause}",
                duration_s=(workflow.now() - started).total_seconds(),
            )

    async def _cleanup_registration(self, record: RunnerRecord) -> None:
        ref = registration_ref(record)
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

    async def _pause(self, wait: timedelta) -> None:
        self._view.next_try_at = workflow.now() + wait
        self._publish()
        force_before = self._force
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(lambda: self._force != force_before, timeout=wait)
        self._view.next_try_at = None

    def _step(
        self, step: DeletionStep, record: RunnerRecord | None, *, searchable: bool = False
    ) -> None:
        self._view.step = step
        if record is not None:
            self._view.status = record.instance_status.value
        if (searchable or step in SEARCHABLE_STEPS) and step is not self._sa_step:
            self._sa_step = step
            workflow.upsert_search_attributes([sa.RUNNER_STEP.value_set(step.value)])
        self._publish()

    def _result(
        self,
        outcome: DeletionOutcome,
        *,
        leaked: str | None = None,
        recovered: bool = False,
    ) -> DeletionResult:
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
