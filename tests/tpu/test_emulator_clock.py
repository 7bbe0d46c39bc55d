"""The TPU emulator's clock follows the time-skipping server's, call by call.

A workflow's activity can call the emulator right after the server jumped to a deadline.
That call must see the jump even when the background poll has not run since: the race
once failed a ready phase whose last look came before the clock caught up.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from google.cloud.tpu_v2 import TpuAsyncClient
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import TpuEmulator
from emulators.tpu.testing import clock_following, create_qr, qr_state, wait_op

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


async def test_many_calls_after_a_skip_add_it_once(
    time_env: WorkflowEnvironment, emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    async with clock_following(time_env, emulator, poll_every=3600):
        before = emulator.now()
        await time_env.sleep(timedelta(hours=1))
        await asyncio.gather(*(qr_state(tpu, "absent") for _ in range(5)), return_exceptions=True)
        skipped = emulator.now() - before
    assert timedelta(hours=1) <= skipped < timedelta(hours=1, minutes=1), skipped
