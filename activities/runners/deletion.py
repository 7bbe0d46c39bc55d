"""Activities of the runner deletion: the runner store, GitHub and the provider.

Thin adapters over injected clients. The store is synchronous, so its calls run in a
thread; none of them holds a transaction across anything but its own SQL.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from keeper.domain.runners.calls import (
    DeregisterCall,
    DeregisterResult,
    FinishDeletion,
    FinishResult,
    LaneResult,
    LaneWrite,
    LeakReport,
    ProviderDelete,
    ProviderResult,
)
from keeper.domain.runners.deregistration import DeregisterMode, retry_of
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome, GitHubScope
from keeper.domain.runners.lane import LaneMove, decide
from keeper.domain.runners.models import RunnerRecord, deletion_workflow_id
from keeper.domain.runners.provider import ProviderAnswer, describe_provider
from keeper.domain.runners.status import InstanceStatus
from keeper.runtime.runners.garm_provider import ExternalProvider
from keeper.runtime.runners.github_client import GitHubClient
from keeper.runtime.runners.instance_lease import InstanceLeases, LeaseHeld, held_by
from keeper.runtime.waiting import WAITING
from keeper.store import RunnerStore

S = InstanceStatus

# A compare-and-set refused because another writer moved the row is re-read and retried;
# this many refusals in one attempt means a hot row, and the activity retry takes over.
MAX_CAS_ROUNDS = 20
UNKNOWN_RUNNER = "UnknownRunner"
NOT_THE_OWNER = "NotTheLaneOwner"
UNWRITABLE_RECORD = "UnwritableRecord"
GITHUB_RETRY = "GitHubAskAgain"
# How often an attempt that found the instance's lease held looks again.
LEASE_POLL_MIN_S = 0.2
LEASE_POLL_MAX_S = 2.0
PROVIDER_RETRY = "ProviderAskAgain"


def _owner_of(runner: str) -> str:
    """The lane's one owner: refuse calls from anything but the runner's deletion workflow."""
    owner = deletion_workflow_id(runner)
    if activity.in_activity():
        caller = activity.info().workflow_id
        if caller != owner:
            raise ApplicationError(
                f"{caller} may not write the lane of runner {runner!r}; only {owner} does",
                type=NOT_THE_OWNER,
                non_retryable=True,
            )
    return owner


def _require_writable(record: RunnerRecord) -> None:
    """A row whose version cannot be read can never win a compare-and-set: say so once
    instead of retrying a write that cannot succeed."""
    unreadable = [p for p in record.problems if p.startswith("version:")]
    if unreadable:
        raise ApplicationError(
            f"runner {record.name!r}: the stored row's {unreadable[0]}; no write can be "
            "compared against it. Fix the row by hand (docs/runner-deletion.md, The runner "
            f"store), then run `keeper runner delete {record.name}` again",
            type=UNWRITABLE_RECORD,
            non_retryable=True,
        )


class RunnerStoreActivities:
    def __init__(self, store: RunnerStore) -> None:
        self._store = store

    @activity.defn(name="runners.advance_lane")
    async def advance_lane(self, write: LaneWrite) -> LaneResult:
        owner = _owner_of(write.runner)
        return await asyncio.to_thread(self._advance, write, owner)

    def _advance(self, write: LaneWrite, owner: str) -> LaneResult:
        for _ in range(MAX_CAS_ROUNDS):
            record = self._store.get(write.runner)
            if record is None:
                raise ApplicationError(
                    f"no runner named {write.runner!r} in the runner store",
                    type=UNKNOWN_RUNNER,
                    non_retryable=True,
                )
            _require_writable(record)
            move = decide(record.instance_status, write.target)
            if move is not LaneMove.WRITE:
                return LaneResult(move=move, record=record)
            result = self._store.advance_lane(
                write.runner,
                expect=record.instance_status,
                version=record.version,
                to=write.target,
                owner=owner,
                reason=write.reason,
            )
            if result.ok:
                return LaneResult(move=LaneMove.WRITE, record=result.record)
        raise ApplicationError(
            f"runner {write.runner!r}: the row kept moving under {MAX_CAS_ROUNDS} writes; retrying"
        )

    @activity.defn(name="runners.finish_deleted")
    async def finish_deleted(self, finish: FinishDeletion) -> FinishResult:
        """deleting -> deleted, the tombstone in the same write. Called only once the
        provider confirmed the compute gone."""
        owner = _owner_of(finish.runner)
        return await asyncio.to_thread(self._finish, finish, owner)

    def _finish(self, finish: FinishDeletion, owner: str) -> FinishResult:
        runner = finish.runner
        for _ in range(MAX_CAS_ROUNDS):
            record = self._store.require(runner)
            _require_writable(record)
            if record.created_at != finish.incarnation:
                # An earlier attempt wrote the tombstone (its completion was lost) and a new
                # runner has taken the name since: not this deletion's record.
                return FinishResult(record=record, replaced=True)
            if record.instance_status is S.DELETED:
                return FinishResult(record=record, found_status=S.DELETED)
            if record.instance_status is not S.DELETING:
                # Another writer moved the row off `deleting` (the #854 forced write). The
                # compute is gone, so the record must not stay behind: audited recovery.
                recovered = self._store.recover_to_deleted(
                    runner,
                    actor=owner,
                    reason=(
                        f"provider confirmed the instance gone, but the row was moved to "
                        f"{record.instance_status} (v{record.version}) by another writer"
                    ),
                )
                return FinishResult(
                    record=recovered, recovered=True, found_status=record.instance_status
                )
            result = self._store.advance_lane(
                runner,
                expect=S.DELETING,
                version=record.version,
                to=S.DELETED,
                owner=owner,
                reason="provider confirmed the instance gone",
            )
            if result.ok and result.record:
                return FinishResult(record=result.record, found_status=S.DELETING)
            # Refused: re-read and decide again on what is there now.
        raise ApplicationError(f"runner {runner!r}: the row kept moving; retrying")

    @activity.defn(name="runners.record_leak")
    async def record_leak(self, leak: LeakReport) -> None:
        await asyncio.to_thread(
            self._store.record_leak,
            provider_id=leak.provider_id,
            runner=leak.runner,
            scale_set=leak.scale_set,
            reason=leak.reason,
        )


class GitHubActivities:
    def __init__(self, github: GitHubClient, token_source: str | None = None) -> None:
        self._github = github
        self._token_source = token_source

    @activity.defn(name="runners.deregister")
    async def deregister(self, call: DeregisterCall) -> DeregisterResult:
        """Asks GitHub to remove the registration. An answer that only means "ask again
        later" (domain.runners.deregistration.retry_of) raises, so Temporal's retry asks again
        without a history event; any other answer is returned for the workflow to decide."""
        info = activity.info()
        mode = DeregisterMode(call.mode)
        try:
            scope = GitHubScope.parse(call.ref.scope)
        except ValueError as err:
            # A record whose scope cannot be a GitHub scope: asking again will not fix it.
            answer = DeregistrationAnswer(
                outcome=DeregistrationOutcome.CLIENT_ERROR,
                status_code=None,
                message=f"the runner record's GitHub scope is invalid: {err}",
            )
        else:
            answer = await self._github.remove_runner(scope, call.ref.runner_id)
        now = info.current_attempt_scheduled_time
        busy_left = call.busy_until - now if call.busy_until is not None else None
        retry = retry_of(
            answer,
            mode,
            call.policy,
            attempt=info.attempt,
            busy_left=busy_left,
            report_auth=call.report_auth,
            token_source=self._token_source,
        )
        if retry is None:
            auth = answer.outcome is DeregistrationOutcome.AUTH
            return DeregisterResult(
                answer=answer,
                attempts=info.attempt,
                token_source=self._token_source if auth else None,
            )
        raise ApplicationError(
            f"{retry.reason}; attempt {info.attempt}, {answer.wait_text(now + retry.delay)} "
            f"({retry.why})",
            answer,
            retry.why.value,
            # A wait (busy, escalated) reads as keeper's every other wait: no stack trace; an
            # error asked again (a 5xx, a rate limit, a refused token) keeps its own type.
            type=WAITING if retry.benign else GITHUB_RETRY,
            next_retry_delay=retry.delay,
            category=ApplicationErrorCategory.BENIGN if retry.benign else None,
        )


class ProviderActivities:
    def __init__(self, provider: ExternalProvider, leases: InstanceLeases | None = None) -> None:
        self._provider = provider
        self._leases = leases

    async def _delete(self, call: ProviderDelete) -> ProviderAnswer:
        """One provider call. Raises LeaseHeld when an earlier attempt may still run."""

        def tick(elapsed: float) -> None:
            activity.heartbeat(f"provider delete running for {elapsed:.0f}s")

        info = activity.info()
        heartbeat = info.heartbeat_timeout
        every = min(5.0, heartbeat.total_seconds() / 3) if heartbeat else 5.0
        # An earlier attempt whose worker was lost may still be running on another host:
        # its lease on the instance says until when, and no second process starts before.
        lease = held_by(
            self._leases,
            call.instance_id,
            runs_for=timedelta(seconds=call.timeout_s),
            what=f"{info.workflow_id} attempt {info.attempt}",
        )
        async with lease:
            return await self._provider.delete_instance(
                call.instance_id,
                call.pool_id,
                timeout_s=call.timeout_s,
                on_tick=tick,
                tick_every_s=every,
            )

    @activity.defn(name="runners.provider_delete")
    async def provider_delete(self, call: ProviderDelete) -> ProviderResult:
        """Deletes the instance; returns once the provider says it is gone. A failed
        attempt raises, so the retry policy (not workflow code) tries again."""
        info = activity.info()
        while True:
            try:
                answer = await self._delete(call)
                break
            except LeaseHeld as held:
                # An earlier attempt's process may still run: wait inside this attempt
                # (heartbeating, so a cancel still lands) rather than spend a retry, since a
                # forced delete has only a few. The lease is on the hosts' own clocks.
                left = (held.expires_at - datetime.now(UTC)).total_seconds()
                activity.heartbeat(f"waiting for the instance's lease: {held}")
                await asyncio.sleep(min(max(left, LEASE_POLL_MIN_S), LEASE_POLL_MAX_S))
        if answer.gone:
            return ProviderResult(answer=answer, attempts=info.attempt)
        raise ApplicationError(
            f"provider delete of {call.instance_id}: {describe_provider(answer)}; "
            f"attempt {info.attempt}",
            answer,
            type=PROVIDER_RETRY,
        )
