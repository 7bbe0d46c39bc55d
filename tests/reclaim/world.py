"""A job-reclaim world: the spur emulator, keeper's tap in front of its controller, the
intake, the reclaim memory and a worker for the reclaim family, on the dev server.

Agents dial the tap as their controller, as they would in production, so every heartbeat a
test sends goes through the real forwarding path and the real intake.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from emulators.spur import SpurEmulator, SpurEmulatorConfig
from emulators.spur.agent import AgentDown
from emulators.spur.config import AgentSpec, numbered_agents
from keeper.domain.reclaim.calls import OperatorRelease
from keeper.domain.reclaim.models import RELEASE_UPDATE
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.state import JobReclaimResult
from keeper.domain.reclaim.steps import Mode
from keeper.runtime.reclaim.deps import open_reclaim_deps
from keeper.runtime.reclaim.intake import Intake
from keeper.runtime.reclaim.service import run_tap
from keeper.runtime.reclaim.tap import HeartbeatTap
from keeper.runtime.settings import Settings
from keeper.runtime.settings.reclaim import ReclaimSettings
from keeper.workers.families.reclaim import reclaim_activities
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS
from keeper.workers.runner import workflow_runner
from keeper.workflows.reclaim.job_reclaim import JobReclaim

# Fast enough for a test, slow enough that each step is seen: two graceful cancels and one
# forced kill, each followed by a short wait for evidence.
FAST = ReclaimPolicy(
    end_grace=timedelta(minutes=2),
    graceful_tries=2,
    forced_tries=1,
    retry_initial=timedelta(seconds=1),
    retry_max=timedelta(seconds=2),
    release_beats=2,
    # An idle node's empty heartbeats: three, over at least 0.3 s (the tests beat by hand).
    idle_release_beats=3,
    idle_release_window=timedelta(milliseconds=300),
    drained_recheck=timedelta(seconds=1),
    history_events_limit=400,
    # The emulator and keeper share this host's clock; a wipe's reissued ids come within
    # a second of the originals here, not minutes as in production.
    clock_skew=timedelta(milliseconds=50),
    # The tests' agents beat when a test says, not every 30 s, so "first seen within a few
    # heartbeats of a new epoch" means nothing here: off, but where a test sets it.
    epoch_fence=timedelta(0),
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until(check: Callable[[], Any], within: float = 20.0, what: str = "") -> Any:
    """Polls `check` (sync or async) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)


async def every_agent_known(
    emu: SpurEmulator, tap: HeartbeatTap, intake: Intake, within: float = 60.0
) -> None:
    """Waits until the intake knows every agent, registering again the ones it lacks.

    An agent registers once as it starts and, with no heartbeat loop (the tests send each
    beat), never again on its own. On a loaded host that one RegisterAgent can miss its
    deadline through the tap, or its copy can fail in the intake, and the world would wait
    for a node that never comes. Registering is idempotent at the controller.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        await tap.drained()
        await intake.idle()
        if len(intake.memory.known_nodes()) >= len(emu.agents):
            return
        if loop.time() > deadline:
            missing = [name for name, agent in emu.agents.items() if not agent.registered]
            raise AssertionError(
                f"timed out waiting for registrations: the intake knows "
                f"{sorted(intake.memory.known_nodes())}; agents not registered: {missing}; "
                f"tap {tap.counters}"
            )
        unregistered = [a for a in emu.agents.values() if not a.registered]
        for agent in unregistered or list(emu.agents.values()):
            with contextlib.suppress(grpc.aio.AioRpcError, AgentDown):
                await agent.register()
        await asyncio.sleep(0.5)


@dataclass
class ReclaimWorld:
    emu: SpurEmulator
    settings: Settings
    client: Client
    tap: HeartbeatTap
    intake: Intake
    intake_port: int
    _worker: Worker | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @property
    def memory(self):  # type: ignore[no-untyped-def]
        return self.intake.memory

    async def beat(self, node: str) -> list[int]:
        """One heartbeat of `node`'s agent through the tap, decided by the intake (or, when
        the controller refused it, counted and ignored)."""
        counters = self.intake.counters
        before = counters.reports + counters.refused
        sent = await self.emu.beat_now(node)
        await self.tap.drained()
        await until(
            lambda: counters.reports + counters.refused > before, what=f"{node}'s heartbeat"
        )
        await self.intake.idle()
        return sent

    async def start_worker(self) -> None:
        if self._worker is not None:
            return
        deps = open_reclaim_deps(self.settings.reclaim)
        self._stack.push_async_callback(deps.aclose)
        worker = Worker(
            self.client,
            task_queue=self.settings.temporal.family_queue("reclaim"),
            workflows=[JobReclaim],
            activities=reclaim_activities(self.settings, self.client, deps),
            interceptors=WORKFLOW_INTERCEPTORS,
            workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
            graceful_shutdown_timeout=timedelta(seconds=1),
            workflow_runner=workflow_runner(False, self.client.data_converter),
        )
        await self._stack.enter_async_context(worker)
        self._worker = worker

    def workflows(self, node: str | None = None) -> list[tuple[Any, str]]:
        """(holding, workflow id) of every holding that has a reclaim."""
        nodes = [node] if node else sorted(self.memory.known_nodes())
        return [pair for n in nodes for pair in self.memory.open_workflows_of(n)]

    def handle(self, workflow_id: str) -> WorkflowHandle[Any, JobReclaimResult]:
        return self.client.get_workflow_handle(workflow_id, result_type=JobReclaimResult)

    async def result(self, workflow_id: str, within: float = 30.0) -> JobReclaimResult:
        return await asyncio.wait_for(self.handle(workflow_id).result(), within)

    async def release(
        self, workflow_id: str, by: str = "test", reason: str = "", within: float = 30.0
    ) -> JobReclaimResult:
        """An operator's `release` Update (`keeper reclaim release`): its answer, how the
        reclaim ended, once it closed."""
        update = self.handle(workflow_id).execute_update(
            RELEASE_UPDATE, OperatorRelease(by=by, reason=reason), result_type=JobReclaimResult
        )
        return await asyncio.wait_for(update, within)

    def cancels(self, job_id: int | None = None) -> list[Any]:
        return [c for c in self.emu.cancels() if job_id is None or c.job_id == job_id]


@contextlib.asynccontextmanager
async def reclaim_world(
    client: Client,
    tmp_path: Path,
    *,
    agents: list[AgentSpec] | None = None,
    mode: Mode = Mode.ACT,
    policy: ReclaimPolicy = FAST,
    worker: bool = True,
    token: str | None = None,
    token_file: Path | None = None,
) -> AsyncIterator[ReclaimWorld]:
    """`policy`: the settings' `reclaim.timing`, which the intake decides with and each
    reclaim run reads from the worker (the `reclaim.policy` activity); a test changes it for
    later runs through `world.settings.reclaim.timing`. `token`: the controller and agents
    require it on every call; keeper reads it from `token_file` (reclaim.token_file) or from
    KEEPER_SPUR_TOKEN, as the caller arranged."""
    # The tap must know the controller's port before the emulator binds it (the emulator's
    # agents register through the tap), so the port is picked free and bound a moment later:
    # another process of a parallel run can take it in between. Then it is picked again.
    for attempt in range(1, PORT_TRIES + 1):
        async with contextlib.AsyncExitStack() as stack:
            try:
                world = await _world(
                    stack, client, tmp_path, agents, mode, policy, token, token_file
                )
            except RuntimeError as err:
                if "Failed to bind" not in str(err) or attempt == PORT_TRIES:
                    raise
                continue
            if worker:
                await world.start_worker()
            yield world
            return


# How many controller ports reclaim_world picks before it gives up on binding one.
PORT_TRIES = 3


async def _world(
    stack: contextlib.AsyncExitStack,
    client: Client,
    tmp_path: Path,
    agents: list[AgentSpec] | None,
    mode: Mode,
    policy: ReclaimPolicy,
    token: str | None,
    token_file: Path | None,
) -> ReclaimWorld:
    controller_port = free_port()
    settings = Settings()
    settings.temporal.task_queue = f"reclaim-test-{uuid.uuid4().hex[:8]}"
    settings.reclaim = ReclaimSettings(
        mode=mode,
        controller_address=f"127.0.0.1:{controller_port}",
        tap_address="127.0.0.1:0",
        intake_address="127.0.0.1:0",
        token_file=token_file,
        store_url=f"sqlite:///{tmp_path / 'reclaim.db'}",
        call_timeout=timedelta(seconds=5),
        cancel_timeout=timedelta(seconds=1),
        timing=policy,
        batch_window=timedelta(milliseconds=20),
    )
    tap, intake, intake_port = await stack.enter_async_context(run_tap(settings, client))
    emu = SpurEmulator(
        SpurEmulatorConfig(
            controller_port=controller_port,
            agents=agents if agents is not None else numbered_agents(3),
            controller_address=f"127.0.0.1:{tap.port}",
            kill_grace=0.2,
            token=token,
        )
    )
    await emu.start()
    stack.push_async_callback(emu.stop)
    world = ReclaimWorld(emu, settings, client, tap, intake, intake_port)
    stack.push_async_callback(world._stack.aclose)
    # Every agent registered through the tap: keeper knows its address.
    await every_agent_known(emu, tap, intake)
    return world
