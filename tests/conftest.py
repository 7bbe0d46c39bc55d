"""Servers the suite starts itself: Temporal's time-skipping test server, the Temporal dev
server, and the TPU emulator. Nothing is downloaded; the binaries come from the dev extra."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import EmulatorConfig, TpuEmulator
from emulators.tpu.testing import clock_following, free_port
from keeper.cli.output import use_json
from keeper.runtime import search_attributes as sa
from keeper.store import RunnerStore, open_store
from tests.harness import env_flag, register_search_attributes, tool_path
from tests.postgres_server import PostgresServer, postgres_server
from tests.runners.world import RunnerWorld, runner_world


@pytest.fixture(autouse=True)
def text_output_by_default() -> None:
    """Each `keeper` is a process of its own, so its `--json` lasts one command; tests that
    invoke commands in-process share a thread, and one test's `--json` must not decide how
    the next one's command prints."""
    use_json(False)


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


# The port a claim on a loopback prefix is held on (see claimed_ip_prefix).
_PREFIX_CLAIM_PORT = 18079


@contextlib.contextmanager
def claimed_ip_prefix() -> Iterator[str]:
    """A loopback prefix no other test process on this machine is using, held until exit.

    The emulated VMs of a workflow test listen on the request's health port (8080) at their
    own loopback addresses, so two processes with one prefix would bind the same address.
    Each process (an xdist worker, another worktree's suite) claims its prefix by listening
    on <prefix>.255.255, an address the emulator never hands out; the claim ends with the
    process, even a killed one. The candidates start at one derived from the pid so
    concurrent processes rarely try the same one first. 127.20 is the dev stack's, 127.27-29
    and 127.33-127.44 are other tests' and the benchmarks'; 100-249 avoids all of them.
    """
    start = os.getpid() % 150
    for step in range(150):
        prefix = f"127.{100 + (start + step) % 150}"
        claim = socket.socket()
        try:
            claim.bind((f"{prefix}.255.255", _PREFIX_CLAIM_PORT))
            claim.listen(1)
        except OSError:
            claim.close()
            continue
        with claim:
            yield prefix
        return
    raise RuntimeError("every loopback prefix 127.100-127.249 is claimed by another process")


@pytest.fixture(scope="session")
async def shared_emulator() -> AsyncIterator[TpuEmulator]:
    # A loopback prefix of this process's own, so neither the other xdist worker nor another
    # suite on this machine binds the same VM address, and a free default health port.
    with claimed_ip_prefix() as prefix:
        emu = TpuEmulator(EmulatorConfig(ip_prefix=prefix, vm_health_port=free_port()))
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
    async with clock_following(time_env, emu):
        yield emu


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
    """A runner world: SQLite store, GitHub emulator, emulated provider (tests/runners/world.py)."""
    async with runner_world(tmp_path) as w:
        yield w
