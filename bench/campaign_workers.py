"""The workers a campaign kills: one in this process, or a `keeper worker` subprocess.

A kill of an in-process worker is a shutdown and a new Worker on the same queue (what the
short campaign does; seconds cheaper). A kill of a subprocess is SIGKILL to its process
group, then a new process from the same settings file: the worker gets no chance to finish
anything, as when a node dies.

A run asks for a kill once it has seen its own step under way (`since`, loop time). Kills
are one at a time; a run whose step was already under way when the last kill landed shares
that kill instead of asking for another, so hundreds of runs in flight do not queue
hundreds of restarts. `kills` counts the kills performed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from temporalio.worker import Worker

from tests.e2e_support import start_worker_process
from tests.runners.world import RunnerWorld
from tests.worker_processes import write_worker_config


class InProcessWorker:
    def __init__(self, factory: Callable[[], Worker]) -> None:
        self._factory = factory
        self._worker: Worker | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.kills = 0
        self._last_kill = float("-inf")

    async def start(self) -> None:
        self._worker = self._factory()
        self._task = asyncio.create_task(self._worker.run())

    async def stop(self) -> None:
        if self._worker is not None and self._task is not None:
            await self._worker.shutdown()
            await self._task
        self._worker = self._task = None

    async def kill(self, since: float) -> None:
        async with self._lock:
            if self._last_kill > since:
                return  # the step `since` was already under way when this kill landed
            self._last_kill = asyncio.get_running_loop().time()
            self.kills += 1
            await self.stop()
            await self.start()


def write_tpu_worker_config(path: Path, address: str, grpc_target: str, task_queue: str) -> Path:
    """Settings for a worker process serving only the TPU family on `<task_queue>-tpu`."""
    return write_worker_config(
        path,
        address=address,
        task_queue=task_queue,
        families=["tpu"],
        tpu={
            "endpoint": "emulator",
            "emulator_address": grpc_target,
            "project": "keeper-test",
            "zone": "us-central2-b",
            "call_timeout": "5s",
        },
        health={"timeout": "1s"},
        runners={"store_url": f"sqlite:///{path.parent / 'runners.db'}"},
    )


def write_runner_worker_config(path: Path, address: str, world: RunnerWorld, token: str) -> Path:
    """Settings for a worker process serving only the runner family of `world`, with the
    deletion timings of tests/runners/world.py's FAST_POLICY."""
    token_file = path.parent / "github-token"
    token_file.write_text(token + "\n")
    return write_worker_config(
        path,
        address=address,
        task_queue=world.task_queue.removesuffix("-runners"),
        families=["runners"],
        runners={
            "store_url": str(world.store.engine.url),
            "github": {"api_url": world.github.url, "token_file": str(token_file)},
            "provider": {"config_file": str(world.provider_config)},
            "deletion": {
                "busy_wait": "3s",
                "busy_poll": "300ms",
                "provider_timeout": "3s",
                "force_provider_attempts": 2,
                # A delete the killed worker held is retried once its heartbeat is missed.
                "provider_heartbeat": "2s",
                "retry_initial": "200ms",
                "retry_max": "1s",
            },
            "reconcile_interval": "1h",
        },
    )


class ProcessWorker:
    def __init__(self, config: Path, log: Path) -> None:
        self._config = config
        self._log = log
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = asyncio.Lock()
        self.kills = 0
        self._last_kill = float("-inf")

    async def start(self) -> None:
        self._process = start_worker_process(self._config, self._log)

    async def _wait(self, within: float) -> None:
        assert self._process is not None
        await asyncio.to_thread(self._process.wait, within)

    async def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            await self._wait(20)
        self._process = None

    async def kill(self, since: float) -> None:
        async with self._lock:
            if self._last_kill > since:
                return  # the step `since` was already under way when this kill landed
            self._last_kill = asyncio.get_running_loop().time()
            self.kills += 1
            assert self._process is not None
            os.killpg(self._process.pid, signal.SIGKILL)
            await self._wait(10)
            await self.start()


Killable = InProcessWorker | ProcessWorker
