"""A job-watch world: the iris emulator, a worker for the watch family, on the dev server.

The watch reads the emulator through keeper's real iris client over HTTP; the emulator's
action log says what keeper asked of the controller (a TerminateJob or a LaunchJob).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from emulators.iris import IrisEmulator, IrisEmulatorConfig, start_emulator
from keeper.cli.watch.launch import keep_launch, launch_request
from keeper.domain.watch.cadence import CadencePolicy
from keeper.domain.watch.calls import JobWatchInput, JobWatchResult
from keeper.domain.watch.escalation import EscalationPolicy
from keeper.domain.watch.liveness_models import LivenessPolicy
from keeper.domain.watch.models import WatchView, watch_id
from keeper.domain.watch.relaunch import HeldLaunch
from keeper.runtime.settings import Settings
from keeper.runtime.watch import search_attributes as sa
from keeper.runtime.watch.deps import open_watch_deps
from keeper.wire.iris.codec import to_wire
from keeper.workers.families.watch import watch_activities
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS
from keeper.workers.runner import workflow_runner
from keeper.workflows.watch.job_watch import JobWatch
from tests.reclaim.world import until

# A test's pace: the emulator plays scenario time at `SPEED` x wall time, and the watch
# checks about every second, its gates a few seconds long.
SPEED = 60.0
FAST_CADENCE = CadencePolicy(
    smoke_duration=timedelta(seconds=3),
    smoke_interval=timedelta(milliseconds=500),
    failure_interval=timedelta(milliseconds=500),
    min_interval=timedelta(seconds=1),
    max_interval=timedelta(seconds=1),
    default_interval=timedelta(seconds=1),
)
FAST_LIVENESS = LivenessPolicy(
    stall_ticks=3,
    stall_min_elapsed=timedelta(seconds=3),
    fallback_ticks=2,
    observer_gap=timedelta(seconds=20),
)
FAST_ESCALATION = EscalationPolicy(
    stuck_after=timedelta(seconds=6),
    straggler_after=timedelta(seconds=6),
)


def fast_settings(emulator_url: str, **watch: Any) -> Settings:
    settings = Settings()
    settings.watch.controller_url = emulator_url
    settings.watch.call_timeout = timedelta(seconds=3)
    settings.watch.probe_gap = timedelta(seconds=1)
    settings.watch.cadence = FAST_CADENCE
    settings.watch.liveness = FAST_LIVENESS
    settings.watch.escalation = FAST_ESCALATION
    # Each world its own launch store (the CLI and the worker share it, as on a deployment).
    settings.watch.store_url = (
        f"sqlite:///{tempfile.gettempdir()}/keeper-watch-{uuid.uuid4().hex}.db"
    )
    for key, value in watch.items():
        # The one alert channel carries the watch's notices too.
        section = settings.alerts if key == "webhook_url_file" else settings.watch
        setattr(section, key, value)
    return settings


@dataclass
class WatchWorld:
    emu: IrisEmulator
    settings: Settings
    client: Client
    queue: str
    _worker: Worker | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    def launch(self, scenario: str, name: str | None = None, **overrides: Any) -> str:
        job = self.emu.create_job(
            name or f"{scenario}-{uuid.uuid4().hex[:6]}", "alice", scenario, 7, overrides or None
        )
        return job.job_id

    def launch_held(
        self, scenario: str, env: dict[str, str] | None = None, argv: list[str] | None = None
    ) -> tuple[str, HeldLaunch]:
        """A job launched as `keeper job run` launches one: the watch holds its request (and
        keeper's launch store the full one, when it carries secrets)."""
        name = f"{scenario}-{uuid.uuid4().hex[:6]}"
        request = launch_request(name, argv or ["python", "-m", "pipeline"], None, None, env)
        job = self.emu.create_job(name, "alice", scenario, 7, None, to_wire(request))
        return job.job_id, keep_launch(self.settings, request, f"run/{uuid.uuid4().hex}")

    async def start_worker(self) -> None:
        if self._worker is not None:
            return
        deps = open_watch_deps(self.settings.watch)
        self._stack.push_async_callback(deps.aclose)
        worker = Worker(
            self.client,
            task_queue=self.queue,
            workflows=[JobWatch],
            activities=watch_activities(self.settings, self.client, deps),
            interceptors=WORKFLOW_INTERCEPTORS,
            workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
            graceful_shutdown_timeout=timedelta(seconds=1),
            workflow_runner=workflow_runner(False, self.client.data_converter),
        )
        await self._stack.enter_async_context(worker)
        self._worker = worker

    async def stop_worker(self) -> None:
        if self._worker is None:
            return
        await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()
        self._worker = None

    async def watch(
        self, job_id: str, launch: HeldLaunch | None = None
    ) -> WorkflowHandle[Any, JobWatchResult]:
        return await self.client.start_workflow(
            JobWatch.run,
            JobWatchInput(job_id=job_id, requested_by="test", launch=launch),
            id=watch_id(job_id),
            task_queue=self.queue,
            search_attributes=sa.for_job(job_id),
            result_type=JobWatchResult,
        )

    async def view(self, handle: WorkflowHandle[Any, Any]) -> WatchView | None:
        return await handle.query("status", result_type=WatchView)

    async def until_view(
        self, handle: WorkflowHandle[Any, Any], check: Any, within: float = 60.0, what: str = ""
    ) -> WatchView:
        """Polls the status query until `check(view)` holds; the view it held on."""
        seen: list[WatchView] = []

        async def probe() -> WatchView | None:
            try:
                view = await self.view(handle)
            except RPCError as err:
                if err.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE):
                    raise
                # No worker answered in time (one is being replaced): ask again.
                return None
            if view is not None:
                seen[:] = [view]
                if check(view):
                    return view
            return None

        try:
            return await until(probe, within=within, what=what)
        except AssertionError:
            last = seen[0].model_dump(mode="json") if seen else None
            raise AssertionError(f"timed out waiting for {what}; last view: {last}") from None

    async def result(
        self, handle: WorkflowHandle[Any, Any], within: float = 90.0
    ) -> JobWatchResult:
        """The watch's result, or a failure after `within` seconds (a stuck workflow task
        would otherwise hang the test)."""
        return await asyncio.wait_for(handle.result(), within)

    def actions(self) -> list[dict[str, Any]]:
        return self.emu.actions_json()


@contextlib.asynccontextmanager
async def watch_world(
    client: Client,
    emulator: IrisEmulatorConfig | None = None,
    *,
    worker: bool = True,
    **watch: Any,
) -> AsyncIterator[WatchWorld]:
    """`worker=False`: the caller serves the world's queue (a worker process, say)."""
    emu = await start_emulator(emulator or IrisEmulatorConfig(speed=SPEED))
    # The CLI finds the watch queue from the base (`<base>-watch`), as a deployment's does.
    base = f"keeper-{uuid.uuid4().hex[:8]}"
    world = WatchWorld(
        emu=emu,
        settings=fast_settings(emu.url, **watch),
        client=client,
        queue=f"{base}-watch",
    )
    world.settings.temporal.task_queue = base
    try:
        if worker:
            await world.start_worker()
        yield world
    finally:
        await world.stop_worker()
        await emu.stop()
        store = world.settings.watch.store_url.removeprefix("sqlite:///")
        for path in (store, f"{store}-wal", f"{store}-shm"):
            with contextlib.suppress(FileNotFoundError):
                await asyncio.to_thread(os.remove, path)
