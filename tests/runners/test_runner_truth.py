"""A deletion says what is true: a refused token needs someone, a registration forced past
is not "removed", and a tombstoned runner is deleted while its registration cleanup runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from keeper.domain.runners.models import DeletionOutcome, Requester
from keeper.domain.runners.status import InstanceStatus
from keeper.runtime.runners.deps import github_token_source
from keeper.runtime.runners.requests import RequestRefused
from keeper.runtime.settings.runners import RunnerSettings
from tests.runners.test_runner_waits import details, until
from tests.runners.world import FAST_POLICY, RunnerWorld, runner_worker

S = InstanceStatus


async def view(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    return await handle.query("status") or {}


def test_the_token_source_names_the_file_or_the_variable(tmp_path: Path) -> None:
    token_file = tmp_path / "github-token"
    settings = RunnerSettings.model_validate({"github": {"token_file": str(token_file)}})
    assert str(token_file) in github_token_source(settings, {})
    assert "does not exist" in github_token_source(settings, {})
    token_file.write_text("ghp_x\n")
    assert github_token_source(settings, {}).startswith(f"runners.github.token_file ({token_file})")
    from_env = github_token_source(settings, {"KEEPER_GITHUB_TOKEN": "ghp_y"})
    assert from_env.startswith("KEEPER_GITHUB_TOKEN") and "ghp_y" not in from_env


async def test_a_refused_token_says_it_needs_attention_and_where_the_token_comes_from(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("r-token")
    world.deps.github_token_source = "runners.github.token_file (/run/secrets/gh-token)"
    world.github.inject(401, runner_id=record.github_runner_id, times=100_000)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-token")

        async def attention() -> str | None:
            error = (await view(handle)).get("error") or ""
            return error if "cannot progress by itself" in error else None

        error = await until(attention, what="the refused token to need attention")
        assert "/run/secrets/gh-token" in error and "401" in error
        shown = await details(handle)
        assert "Needs attention" in shown and "/run/secrets/gh-token" in shown
        # Fixed (the token is accepted again): the deletion goes on by itself and the
        # attention note goes away.
        world.github.clear_faults()
        result = await asyncio.wait_for(handle.result(), 30)
        final = await view(handle)
    assert result.outcome is DeletionOutcome.DELETED and not result.forced
    assert final["error"] is None and not world.registration_exists(record)


async def test_a_forced_busy_deletion_audits_the_registration_it_left(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-forced-busy", busy=True)
    async with runner_worker(dev_env.client, world):
        handle = await world.request(dev_env.client, "r-forced-busy", force=True)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome is DeletionOutcome.DELETED and result.forced
    (entry,) = [a for a in world.store.audit("r-forced-busy") if a.to_status == "deleting"]
    assert entry.reason == "registration left: GitHub answered 422 (runner busy); forced past it"


async def test_an_idle_deletion_audits_the_registration_removed(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    world.add_runner("r-idle")
    async with runner_worker(dev_env.client, world):
        await asyncio.wait_for((await world.request(dev_env.client, "r-idle")).result(), 60)
    (entry,) = [a for a in world.store.audit("r-idle") if a.to_status == "deleting"]
    assert entry.reason == "registration removed (204: runner removed)"


async def test_once_tombstoned_the_view_says_deleted_while_the_cleanup_runs_behind_it(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    record = world.add_runner("r-cleanup", busy=True)
    # GitHub keeps failing: the forced call gives up, and the cleanup after the compute
    # keeps trying for as long as the faults last.
    world.github.inject(500, runner_id=record.github_runner_id, times=100_000)
    policy = FAST_POLICY.model_copy(update={"registration_cleanup_attempts": 1000})
    async with runner_worker(dev_env.client, world, policy):
        handle = await world.request(dev_env.client, "r-cleanup", force=True)

        async def cleaning() -> dict[str, Any] | None:
            shown = await view(handle)
            return shown if shown.get("background") else None

        shown = await until(cleaning, within=60, what="the cleanup after the tombstone")
        assert shown["tombstoned"] and shown["step"] == "done" and shown["status"] == "deleted"
        assert "registration" in shown["background"]
        assert world.status("r-cleanup") is S.DELETED
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        assert "in the background" in await details(handle)
        # Finished: a request changes nothing now, and its sender is told so and why.
        for force in (True, False):
            with pytest.raises(RequestRefused, match="has finished") as refused:
                await world.ask(dev_env.client, "r-cleanup", Requester.AGENT, force=force)
            assert "removing GitHub registration" in str(refused.value)
        world.github.clear_faults()
        result = await asyncio.wait_for(handle.result(), 30)
        final = await view(handle)
    assert result.outcome is DeletionOutcome.DELETED
    assert final["background"] is None and not world.registration_exists(record)
    assert result.requests == ("operator (force)",)  # the refused ones left no trace
