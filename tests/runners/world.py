"""A runner world for the deletion tests: a real store, the GitHub emulator over real HTTP,
the emulated GARM provider as a real executable, and a keeper worker serving them."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from sqlalchemy import update
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from emulators.github.server import GitHubEmulator
from emulators.provider import WRAPPER, launcher_env
from emulators.provider import state as provider_state
from keeper.domain.runners.models import (
    DeletionPolicy,
    DeletionRequest,
    DeletionResult,
    Requester,
    RunnerRecord,
    deletion_workflow_id,
)
from keeper.domain.runners.status import AgentStatus, InstanceStatus
from keeper.runtime.runners.deps import RunnerDeps
from keeper.runtime.runners.garm_provider import ExternalProvider
from keeper.runtime.runners.github_client import GitHubClient
from keeper.runtime.runners.requests import Requested, request_deletion
from keeper.runtime.settings import Settings
from keeper.runtime.tpu.client import emulator_client
from keeper.store import RunnerStore, open_store
from keeper.store.runners.schema import runners
from keeper.workers.main import build_worker
from tests.harness import settings_for_tests

SCOPE = "org:acme"
TOKEN = "ghp_keeper_test_token"

# Quick retries so a test's failure paths finish in seconds of real time: the policy of the
# world's worker (runner_worker), as runners.deletion is a deployment's.
FAST_POLICY = DeletionPolicy(
    busy_wait=timedelta(seconds=3),
    busy_poll=timedelta(milliseconds=300),
    provider_timeout=timedelta(seconds=3),
    retry_initial=timedelta(milliseconds=200),
    retry_max=timedelta(seconds=1),
    force_provider_attempts=2,
    registration_cleanup_attempts=5,
    # Not the default 5 minutes: a runner that stays busy past busy_wait on a loaded machine
    # escalates, and a test whose job then ends would wait that long for the next look.
    escalation_recheck=timedelta(seconds=2),
)


@dataclass
class RunnerWorld:
    store: RunnerStore
    github: GitHubEmulator
    provider_config: Path
    deps: RunnerDeps
    policy: DeletionPolicy = FAST_POLICY
    # What `settings.temporal.family_queue("runners")` names for a base queue of
    # `keeper-<hex>`, so the CLI and a worker process started from settings find this one.
    task_queue: str = field(default_factory=lambda: f"keeper-{uuid.uuid4().hex[:8]}-runners")

    def add_runner(
        self,
        name: str,
        *,
        scale_set: str = "set-a",
        status: InstanceStatus = InstanceStatus.RUNNING,
        busy: bool = False,
        registered: bool = True,
        instance: bool = True,
        mode: str | None = None,
        mode_seconds: float = 0.0,
        fail_times: int | None = None,
    ) -> RunnerRecord:
        provider_id = None
        if instance:
            rec = provider_state.add_instance(
                self.provider_config,
                name,
                scale_set,
                provider_id=f"i-{name}",
                mode=mode,
                mode_seconds=mode_seconds,
                fail_times=fail_times,
            )
            provider_id = rec["provider_id"]
        github_id = None
        if registered:
            github_id = self.github.add_runner(
                SCOPE, name, busy=busy, labels=["self-hosted", "keeper-managed", scale_set]
            )
        return self.store.add(
            RunnerRecord(
                name=name,
                scale_set=scale_set,
                provider_id=provider_id,
                github_runner_id=github_id,
                github_scope=SCOPE if registered else None,
                instance_status=status,
                agent_status=AgentStatus.ACTIVE if busy else AgentStatus.IDLE,
            )
        )

    def leave_in_deleting(self, name: str) -> RunnerRecord:
        """A record a crashed owner left in `deleting`: written as its deletion workflow
        would have, with no workflow running now."""
        owner = deletion_workflow_id(name)
        record = self.store.require(name)
        for target in (InstanceStatus.PENDING_DELETE, InstanceStatus.DELETING):
            result = self.store.advance_lane(
                name, expect=record.instance_status, version=record.version, to=target, owner=owner
            )
            assert result.ok and result.record is not None
            record = result.record
        return record

    def instance_exists(self, name: str) -> bool:
        return f"i-{name}" in provider_state.instances(self.provider_config)

    def registration_exists(self, record: RunnerRecord) -> bool:
        return any(
            r["id"] == record.github_runner_id
            for r in self.github.state()["runners"].get(SCOPE, [])
        )

    def status(self, name: str) -> InstanceStatus:
        return self.store.require(name).instance_status

    async def request(
        self,
        client: Client,
        name: str,
        by: Requester = Requester.OPERATOR,
        *,
        force: bool = False,
        reason: str = "",
    ) -> WorkflowHandle[Any, DeletionResult]:
        """Asks as every actor does (the `request` update, with the start); the handle of
        the deletion run that took it."""
        return (await self.ask(client, name, by, force=force, reason=reason)).handle

    async def ask(
        self,
        client: Client,
        name: str,
        by: Requester = Requester.OPERATOR,
        *,
        force: bool = False,
        reason: str = "",
    ) -> Requested:
        """`request`, with the deletion's answer."""
        return await request_deletion(
            client,
            name,
            DeletionRequest(requested_by=by, force=force, reason=reason),
            task_queue=self.task_queue,
        )

    async def agent_terminated(self, client: Client, name: str) -> None:
        """The agent path: record what it said, then ask (never write the lane)."""
        record = self.store.require(name)
        await asyncio.to_thread(
            self.store.set_agent_status,
            name,
            status=AgentStatus.TERMINATED,
            version=record.version,
        )
        await self.request(client, name, Requester.AGENT, reason="agent reported terminated")


def _github_follows_provider(world: RunnerWorld) -> None:
    """A runner whose VM is gone goes offline and stops being busy, as on GitHub."""
    # GitHub first: `add_runner` creates the VM before it registers the runner, so every
    # runner read here has its VM in the list read next unless the VM really went. Read the
    # other way round, a runner added between the two reads looked like one whose VM went.
    registered = world.github.state()["runners"].get(SCOPE, [])
    live = {r["name"] for r in provider_state.instances(world.provider_config).values()}
    for runner in registered:
        if runner["name"] not in live and (runner["busy"] or runner["status"] == "online"):
            # Deregistered since the read (keeper's deletion, or the test itself): nothing
            # is left to follow.
            with contextlib.suppress(KeyError):
                world.github.set_busy(runner["id"], False)
                world.github.set_status(runner["id"], "offline")


@contextlib.asynccontextmanager
async def runner_world(tmp_path: Path, store_url: str | None = None) -> AsyncIterator[RunnerWorld]:
    github = GitHubEmulator(token=TOKEN)
    url = await github.start()
    config = provider_state.write_config(tmp_path / "provider" / "config.json")
    store = open_store(store_url or f"sqlite:///{tmp_path / 'runners.db'}")
    deps = RunnerDeps(
        store=store,
        github=GitHubClient(url, SecretStr(TOKEN), timeout=5.0),
        provider=ExternalProvider(WRAPPER, config, "keeper-test", extra_env=launcher_env()),
    )
    world = RunnerWorld(store=store, github=github, provider_config=config, deps=deps)

    async def follow() -> None:
        while True:
            await asyncio.to_thread(_github_follows_provider, world)
            await asyncio.sleep(0.1)

    follower = asyncio.create_task(follow())
    try:
        yield world
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        await deps.github.aclose()
        await github.stop()
        store.close()


def world_settings(world: RunnerWorld, policy: DeletionPolicy | None = None) -> Settings:
    """A worker's settings for the world: its deletions follow `policy` (the world's unless
    given), as a deployment's follow runners.deletion."""
    settings = settings_for_tests()
    settings.runners.deletion = policy or world.policy
    return settings


@contextlib.asynccontextmanager
async def runner_worker(
    client: Client, world: RunnerWorld, policy: DeletionPolicy | None = None
) -> AsyncIterator[Worker]:
    """A worker serving the world; every deletion it runs reads `policy` (the world's
    unless given) at the start of each run, through `runners.policy`."""
    # The TPU client is never called by runner workflows; its channel connects lazily.
    worker = build_worker(
        client,
        world_settings(world, policy),
        emulator_client("127.0.0.1:9"),
        world.task_queue,
        world.deps,
    )
    async with worker:
        yield worker


async def eventually(predicate: Callable[[], bool], within: float = 20.0, what: str = "it") -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await asyncio.to_thread(predicate):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.05)


def lane_history(world: RunnerWorld, name: str) -> list[tuple[str | None, str, bool]]:
    return [(e.from_status, e.to_status, e.forced) for e in world.store.audit(name)]


def force_write(store: RunnerStore, name: str, status: InstanceStatus) -> None:
    """What #854's design allowed any actor to do: overwrite the row, no compare, no table.
    keeper's store has no such method; tests use raw SQL to play a legacy writer."""
    with store.engine.begin() as conn:
        conn.execute(
            update(runners)
            .where(runners.c.name == name)
            .values(instance_status=status.value, version=runners.c.version + 1)
        )
