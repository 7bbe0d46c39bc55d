"""Servers the suite starts itself: Temporal's time-skipping test server, the Temporal dev
server, and the TPU emulator. Nothing is downloaded; the binaries come from the dev extra."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import EmulatorConfig, TpuEmulator
from emulators.tpu.testing import follow_clock
from runtime import search_attributes as sa
from store import RunnerStore, open_store
from tests.harness import env_flag, register_search_attributes, tool_path
from tests.postgres_server import PostgresServer, postgres_server
from tests.runner_world import RunnerWorld, runner_world


@pytest.fixture
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """A fresh time-skipping server per test.

    The test server keeps a time-skipping lock for work it believes is still outstanding
    from a finished test, after which a later test's retries run in real time; a new
    server per test (about a second) keeps every test independent.
    """
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=tool_path("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    await register_search_attributes(env.client)
    async with env:
        yield env


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=tool_path("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.ALL),
        ui=False,
        dev_server_log_level="error",
    )
    async with env:
        yield env


@pytest.fixture(scope="session")
async def shared_emulator() -> AsyncIterator[TpuEmulator]:
    # A loopback prefix of this run's own, so two suites on one machine never bind the same
    # VM address (127.20 is the dev stack's, 127.33-127.43 the benchmarks').
    prefix = f"127.{100 + os.getpid() % 150}"
    emu = TpuEmulator(EmulatorConfig(ip_prefix=prefix, vm_health_port=18080))
    await emu.start()
    try:
        yield emu
    finally:
        await emu.stop()


@pytest.fixture
async def emu(shared_emulator: TpuEmulator) -> AsyncIterator[TpuEmulator]:
    shared_emulator.reset()
    yield shared_emulator
    shared_emulator.reset()


@pytest.fixture
async def clocked_emu(
    time_env: WorkflowEnvironment, emu: TpuEmulator
) -> AsyncIterator[TpuEmulator]:
    """The emulator, with its clock following the time-skipping server's."""
    task = asyncio.create_task(follow_clock(time_env, emu))
    try:
        yield emu
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer | None]:
    with postgres_server() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, pg_server: PostgresServer | None
) -> str:
    """A fresh, empty runner store on each back end."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runners.db'}"
    if pg_server is None:
        message = (
            "PostgreSQL server binaries not found (Debian: apt-get install postgresql); "
            "`make test` installs them"
        )
        if env_flag("KEEPER_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    return pg_server.create_database()


@pytest.fixture
def runner_store(store_url: str) -> Iterator[RunnerStore]:
    store = open_store(store_url)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[RunnerWorld]:
    """A runner world: SQLite store, GitHub emulator, emulated provider (tests/runner_world.py)."""
    async with runner_world(tmp_path) as w:
        yield w
