"""RunnerDeletion on the dev server: the real store, GitHub emulator and provider executable."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.domain.runners.models import DeletionOutcome, Requester, deletion_workflow_id
from keeper.domain.runners.status import InstanceStatus
from tests.runners.world import TOKEN, RunnerWorld, lane_history, runner_worker, runner_world

S = InstanceStatus


async def test_deletes_registration_then_compute_then_record(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("r-happy")
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-happy", reason="test")
        result = await handle.result()
    assert result.outcome is DeletionOutcome.DELETED
    assert result.leaked_provider_id is None and not result.recovered
    assert world.status("r-happy") is S.DELETED
    assert not world.instance_exists("r-happy")
    assert not world.registration_exists(record)
    assert lane_history(world, "r-happy") == [
        (None, "running", False),
        ("running", "pending_delete", False),
        ("pending_delete", "deleting", False),
        ("deleting", "deleted", False),
    ]
    # Registration before compute: GitHub had answered the DELETE before the provider's
    # first call started (both logs carry wall-clock times of this one machine).
    deletes = [r for r in world.github.requests if r["method"] == "DELETE"]
    assert deletes and deletes[0]["status"] == 204
    calls = provider_state.invocations(world.provider_config, command="DeleteInstance")
    assert calls and deletes[0]["at"] < calls[0]["started"]
    assert handle.id == deletion_workflow_id("r-happy")
    desc = await handle.describe()
    attrs = {k.name: v for k, v in ((p.key, p.value) for p in desc.typed_search_attributes)}
    assert attrs["RunnerName"] == "r-happy"
    assert attrs["ScaleSet"] == "set-a"
    assert attrs["KeeperStep"] == "done"
    # The GitHub token stays in the worker's HTTP client: never in a payload or history.
    history = (await handle.fetch_history()).to_json()
    assert TOKEN not in history and "ghp_" not in history


async def test_deletes_through_a_postgresql_store(
    dev_env: WorkflowEnvironment, tmp_path: Path, store_url: str
) -> None:
    """The same deletion with the store on each back end (the workers of several hosts
    would share the PostgreSQL one)."""
    async with runner_world(tmp_path, store_url) as world:
        world.add_runner("r-backend")
        async with runner_worker(dev_env.client, world):
            result = await (await world.request(dev_env.client, "r-backend")).result()
        assert result.outcome is DeletionOutcome.DELETED
        assert world.status("r-backend") is S.DELETED
        assert world.store.backend in store_url.split(":")[0]


async def test_unknown_runner_fails_naming_it_and_changes_nothing(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "ghost-1")
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    assert "no runner named 'ghost-1'" in str(info.value.cause)
    assert world.store.list(include_deleted=True) == []
    assert provider_state.invocations(world.provider_config) == []


async def test_a_request_after_the_deletion_finished_starts_a_run_that_finds_the_tombstone(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-twice")
    async with runner_worker(dev_env.client, world):
        first = await world.ask(dev_env.client, "r-twice")
        deleted = await first.handle.result()
        again = await world.ask(dev_env.client, "r-twice")
        second = await again.handle.result()
    assert not first.answer.joined and not again.answer.joined  # each started its run
    assert again.handle.result_run_id != first.handle.result_run_id
    assert deleted.outcome is DeletionOutcome.DELETED
    assert second.outcome is DeletionOutcome.ALREADY_DELETED
    assert provider_state.attempts(world.provider_config, "i-r-twice") == 1


async def test_concurrent_requests_are_one_deletion_and_each_is_answered(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-race", mode="slow", mode_seconds=1.0)
    async with runner_worker(dev_env.client, world):
        asked = await asyncio.gather(
            world.ask(dev_env.client, "r-race", Requester.AGENT),
            world.ask(dev_env.client, "r-race", Requester.SCALE_DOWN),
            world.ask(dev_env.client, "r-race", Requester.OPERATOR),
            world.ask(dev_env.client, "r-race", Requester.RECONCILER),
        )
        results = await asyncio.gather(*(a.handle.result() for a in asked))
    assert len({a.handle.result_run_id for a in asked}) == 1
    # One of them started the deletion; the others joined it.
    assert sorted(a.answer.joined for a in asked) == [False, True, True, True]
    assert all(r.outcome is DeletionOutcome.DELETED for r in results)
    assert len(results[0].requests) == 4
    assert provider_state.attempts(world.provider_config, "i-r-race") == 1


async def test_a_repeated_request_joins_the_running_deletion_and_is_recorded(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-again", mode="slow", mode_seconds=1.0)
    async with runner_worker(dev_env.client, world):
        first = await world.ask(dev_env.client, "r-again", reason="scale down")
        again = await world.ask(dev_env.client, "r-again", reason="scale down")
        result = await first.handle.result()
    assert not first.answer.joined and again.answer.joined
    assert again.handle.result_run_id == first.handle.result_run_id
    assert again.answer.view.requests == ["operator: scale down", "operator: scale down"]
    assert result.outcome is DeletionOutcome.DELETED and not result.forced
    assert provider_state.attempts(world.provider_config, "i-r-again") == 1
