"""The TPU emulator's clock follows the time-skipping server's, call by call.

A workflow's activity can call the emulator right after the server jumped to a deadline.
That call must see the jump even when the background poll has not run since: the race
once failed a ready phase whose last look came before the clock caught up.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from google.cloud.tpu_v2 import TpuAsyncClient
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import TpuEmulator
from emulators.tpu.testing import ServerClock, clock_following, create_qr, qr_state, wait_op

pytest_plugins = ("tests.emulator_fixtures",)


async def test_a_call_right_after_a_skip_sees_it_without_the_background_poll(
    time_env: WorkflowEnvironment, emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    # The poll waits an hour of real time between syncs, so only the per-call sync can
    # bring the skipped hour to the emulator.
    async with clock_following(time_env, emulator, poll_every=3600):
        await wait_op(await create_qr(tpu, "s1"))
        before = emulator.now()
        assert await qr_state(tpu, "s1") == "WAITING_FOR_RESOURCES"
        await time_env.sleep(timedelta(hours=1))
        assert await qr_state(tpu, "s1") == "ACTIVE"
        assert emulator.now() - before >= timedelta(hours=1)


class GatedServer:
    """A test server's clock whose reads wait at a gate, so syncs overlap on purpose."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    async def get_current_time(self) -> datetime:
        read = self.now
        self.waiting += 1
        await self.gate.wait()
        self.waiting -= 1
        return read


async def test_overlapping_syncs_add_a_skip_once(emulator: TpuEmulator) -> None:
    server = GatedServer(datetime(2026, 1, 1, tzinfo=UTC))
    clock = ServerClock(cast(WorkflowEnvironment, server), emulator)
    await clock.sync()
    before = emulator.now()
    server.now += timedelta(hours=1)
    server.gate.clear()
    syncs = [asyncio.create_task(clock.sync()) for _ in range(5)]
    await asyncio.sleep(0)  # each task runs to the gate
    assert server.waiting == len(syncs)
    server.gate.set()
    await asyncio.gather(*syncs)
    skipped = emulator.now() - before
    assert timedelta(hours=1) - timedelta(seconds=1) < skipped < timedelta(hours=1, seconds=1)


async def test_rounding_does_not_run_the_clock_fast(emulator: TpuEmulator) -> None:
    # The server reads in whole milliseconds, a little behind real time: a sync that added
    # every positive step and dropped every negative one would gain on each read.
    server = GatedServer(datetime(2026, 1, 1, tzinfo=UTC))
    clock = ServerClock(cast(WorkflowEnvironment, server), emulator)
    await clock.sync()
    before, real = emulator.now(), time.monotonic()
    for step in range(200):
        server.now += timedelta(milliseconds=3 if step % 2 else 0)
        await clock.sync()
        await asyncio.sleep(0.0015)
    gained = (emulator.now() - before).total_seconds() - (time.monotonic() - real)
    assert gained < 0.05, gained


async def test_one_clock_follows_a_server_per_emulator(
    time_env: WorkflowEnvironment, emulator: TpuEmulator
) -> None:
    async with clock_following(time_env, emulator):
        with pytest.raises(RuntimeError, match="already follows"):
            async with clock_following(time_env, emulator):
                pass
        assert emulator.service.before_call is not None
    assert emulator.service.before_call is None
