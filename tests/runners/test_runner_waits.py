"""How a deletion waits: Temporal retries the calls, the workflow records decisions, and
whatever it waits on (a rate limit, an escalation, a bad record) shows and can be forced."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.testing import WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.activities.runners.deletion import GITHUB_RETRY
from keeper.domain.runners.deletion_state import RunnerDeletionInput
from keeper.domain.runners.models import (
    REQUEST_UPDATE,
    DeletionOutcome,
    DeletionResult,
    DeletionStep,
)
from keeper.domain.runners.status import InstanceStatus
from keeper.runtime.temporal_client import DATA_CONVERTER
from keeper.runtime.waiting import WAITING
from keeper.store.runners.schema import runners
from keeper.workflows.runners.deletion import RunnerDeletion
from tests.runners.world import FAST_POLICY, RunnerWorld, runner_worker

S = InstanceStatus


async def until(check: Any, within: float = 30.0, what: str = "it") -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def pending_call(handle: WorkflowHandle[Any, Any], activity: str) -> Any:
    for pending in (await handle.describe()).raw_description.pending_activities:
        if pending.activity_type.name == activity and pending.HasField("last_failure"):
            return pending
    return None


async def step_of(handle: WorkflowHandle[Any, Any]) -> str | None:
    view = await handle.query("status")
    return view["step"] if view else None


async def test_a_malformed_request_is_refused_naming_the_field_and_never_acted_on(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-bad-request", busy=True)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-bad-request")
        # What `temporal workflow update execute --name request --input '{"force": "yes"}'`
        # sends: refused to its sender, naming the field.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(REQUEST_UPDATE, {"force": "yes"})
        assert "force" in str(refused.value.cause) and "boolean" in str(refused.value.cause)
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(REQUEST_UPDATE, args=[{"requested_by": "agent"}, "extra"])
        view = await handle.query("status")
        assert view["force"] is False and view["requests"] == ["operator"]
        record = world.store.require("r-bad-request")
        world.github.set_busy(record.github_runner_id, False)
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.outcome is DeletionOutcome.DELETED and not result.forced
    # A refused request leaves no trace in the history: only the one accepted is there.
    accepted = [
        e for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
    ]  # fmt: skip
    assert len(accepted) == 1


async def details(handle: WorkflowHandle[Any, Any]) -> str:
    """The current details, as the UI reads them (the built-in metadata query)."""
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def test_a_deletion_refuses_a_workflow_id_keeper_cannot_find(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-own-id")
    async with runner_worker(dev_env.client, world):
        handle = await dev_env.client.start_workflow(
            RunnerDeletion.run,
            RunnerDeletionInput(runner="r-own-id"),
            id="my-own-id",
            task_queue=world.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    message = str(failure.value.cause)
    assert "runner-delete-r-own-id" in message and "my-own-id" in message
    # Nothing was touched: the record is where it was.
    assert world.status("r-own-id") is S.RUNNING and world.instance_exists("r-own-id")


async def test_a_day_long_retry_after_is_capped_shown_with_its_date_and_a_force_cuts_it(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("r-rate")
    # One answer asks for 27.8 hours; the next try, capped, is 10 minutes out.
    world.github.inject(429, runner_id=record.github_runner_id, retry_after=100000, times=1)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-rate")
        pending = await until(
            lambda: pending_call(handle, "runners.deregister"), what="a rate-limited retry"
        )
        next_try = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
        message = pending.last_failure.message
        assert "GitHub asked for 27.8h" in message and "(capped)" in message
        assert next_try - datetime.now(UTC) <= timedelta(minutes=10, seconds=5)
        assert next_try.strftime("%Y-%m-%dT%H:%M") in message
        await world.request(dev_env.client, "r-rate", force=True)
        # Only the force can end it this soon: it cancels the call waiting out the 10 minutes.
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.outcome is DeletionOutcome.DELETED and result.forced
    assert not world.registration_exists(record)


async def test_a_busy_runner_reads_as_a_wait_and_an_error_asked_again_as_an_error(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """The pending deregistration, as the UI and `temporal workflow describe` show it: while
    the runner runs a job, a wait of keeper's WAITING type with no stack trace (as every
    other wait of keeper's); while GitHub answers 5xx, an error of its own type, with its
    trace."""
    record = world.add_runner("r-wait-type", busy=True)
    world.github.inject(500, runner_id=record.github_runner_id, times=4)
    # Escalated on a loaded machine, it notices the job's end within a second.
    policy = FAST_POLICY.model_copy(update={"escalation_recheck": timedelta(seconds=1)})
    # keeper's own converter, as `keeper worker` connects with: it is what drops a wait's trace.
    client = Client(
        dev_env.client.service_client,
        namespace=dev_env.client.namespace,
        data_converter=DATA_CONVERTER,
    )
    async with runner_worker(client, world, policy):
        handle = await world.request(client, "r-wait-type")
        seen: dict[str, Any] = {}

        async def both() -> bool:
            pending = await pending_call(handle, "runners.deregister")
            if pending is not None:
                seen.setdefault(pending.last_failure.application_failure_info.type, pending)
            return {GITHUB_RETRY, WAITING} <= set(seen)

        await until(both, what="a 5xx asked again, then a busy wait")
        error, wait = seen[GITHUB_RETRY].last_failure, seen[WAITING].last_failure
        assert "busy" in wait.message and wait.stack_trace == ""
        assert "busy" not in error.message and error.stack_trace != ""
        world.github.set_busy(record.github_runner_id, False)
        result = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED and not result.forced


async def test_a_record_with_an_invalid_scope_escalates_naming_it_and_a_force_finishes_it(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-bad-scope")
    with world.store.engine.begin() as conn:  # a row written before the store checked scopes
        conn.execute(
            update(runners)
            .where(runners.c.name == "r-bad-scope")
            .values(github_scope="org:not a scope!")
        )
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-bad-scope")
        await until(
            lambda: _is(handle, DeletionStep.ESCALATED), what="the escalation of a bad scope"
        )
        view = await handle.query("status")
        assert "scope is invalid" in view["decision"] and "--force" in view["error"]
        await world.request(dev_env.client, "r-bad-scope", force=True)
        result: DeletionResult = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED and result.forced
    assert world.status("r-bad-scope") is S.DELETED and not world.instance_exists("r-bad-scope")


async def _is(handle: WorkflowHandle[Any, Any], step: DeletionStep) -> bool:
    return await step_of(handle) == step.value


async def test_a_record_whose_provider_id_no_provider_takes_escalates_and_a_force_records_a_leak(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-bad-id", registered=False)
    with world.store.engine.begin() as conn:  # SQLite took NUL before the store checked
        conn.execute(
            update(runners).where(runners.c.name == "r-bad-id").values(provider_id="i-\x00bad")
        )
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-bad-id")
        await until(lambda: _is(handle, DeletionStep.ESCALATED), what="the escalation")
        view = await handle.query("status")
        assert "provider id is invalid" in view["decision"]
        assert world.status("r-bad-id") is S.DELETING
        await world.request(dev_env.client, "r-bad-id", force=True)
        result: DeletionResult = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED and result.forced
    assert result.leaked_provider_id == "i-\x00bad"
    assert [leak.provider_id for leak in world.store.leaks()] == ["i-\x00bad"]


async def test_a_stored_scale_set_no_search_attribute_can_hold_is_still_deleted_by_force(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-long-set", registered=False)
    with world.store.engine.begin() as conn:  # SQLite takes any length; a keyword does not
        conn.execute(
            update(runners).where(runners.c.name == "r-long-set").values(scale_set="s" * 3000)
        )
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-long-set", force=True)
        result: DeletionResult = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome is DeletionOutcome.DELETED
    assert world.status("r-long-set") is S.DELETED


async def test_a_force_during_a_provider_attempt_waits_for_it_and_records_no_false_leak(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-slow", registered=False, mode="slow", mode_seconds=2.5)
    policy = FAST_POLICY.model_copy(
        update={"provider_timeout": timedelta(seconds=10), "force_provider_attempts": 1}
    )
    async with runner_worker(dev_env.client, world, policy):
        handle = await world.request(dev_env.client, "r-slow")
        await until(
            lambda: asyncio.to_thread(
                lambda: provider_state.attempts(world.provider_config, "i-r-slow") >= 1
            ),
            what="the provider call to start",
        )
        await world.request(dev_env.client, "r-slow", force=True)
        result: DeletionResult = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome is DeletionOutcome.DELETED and result.forced
    assert result.leaked_provider_id is None and world.store.leaks() == []
    assert not world.instance_exists("r-slow")
    calls = provider_state.invocations(world.provider_config, command="DeleteInstance")
    # One provider process at a time: each call started after the one before it ended.
    for before, after in itertools.pairwise(calls):
        assert before["ended"] is not None and before["ended"] <= after["started"], calls


async def test_a_row_whose_version_cannot_be_read_fails_the_deletion_saying_what_to_fix(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-no-version", registered=False)
    with world.store.engine.begin() as conn:  # no compare-and-set can match this row
        conn.execute(
            update(runners).where(runners.c.name == "r-no-version").values(version="v-two")
        )
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-no-version", force=True)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
    message = str(failure.value.cause.cause)
    assert "version" in message and "Fix the row by hand" in message
    assert world.instance_exists("r-no-version")  # nothing was deleted behind its back
