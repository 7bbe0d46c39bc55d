"""observe_slice against the TPU emulator with the real client: the bootstraps one worker
waits for in a zone are read with one ListQueuedResources per poll interval, not one
GetQueuedResource each, and a slice the list does not hold is read on its own."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud.tpu_v2 import TpuAsyncClient
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from emulators.tpu import Scenario, TpuEmulator
from emulators.tpu.testing import PROJECT, ZONE, client_for, create_qr, make_config, qr_state
from keeper.activities.tpu.cloud import TpuActivities
from keeper.domain.tpu.models import ObserveInput, SliceRef
from keeper.domain.tpu.observation import SliceObservation
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.qr_state import GONE
from keeper.workflows.tpu.activity_options import poll_retry

POLL = timedelta(seconds=30)
NEVER = Scenario(assign_after=None)


async def started(max_page_size: int = 1000) -> TpuEmulator:
    emu = TpuEmulator(make_config(max_page_size=max_page_size, default_scenario=NEVER))
    await emu.start()
    return emu


@pytest.fixture
async def emulator() -> AsyncIterator[TpuEmulator]:
    emu = await started()
    try:
        yield emu
    finally:
        await emu.stop()


@pytest.fixture
async def small_pages() -> AsyncIterator[TpuEmulator]:
    emu = await started(max_page_size=3)
    try:
        yield emu
    finally:
        await emu.stop()


class Worker:
    """One worker process's TpuActivities on the real client, polled as Temporal polls."""

    def __init__(self, emu: TpuEmulator) -> None:
        self.emu = emu
        self.client, self.channel = client_for(emu)
        self.activities = TpuActivities(self.client, call_timeout=timedelta(seconds=5))

    def calls(self) -> Counter[str]:
        return Counter(self.emu.state()["calls"])

    async def poll(
        self, slice_name: str, retry_policy: bool = True, at: float | None = None
    ) -> SliceObservation:
        """One attempt of observe_slice, started `at` (by default now) on the emulator's
        clock; it returns whatever it saw (last_key "" never matches)."""
        at = self.emu.clock.now() if at is None else at
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            ActivityEnvironment.default_info(),
            activity_type="tpu.observe_slice",
            workflow_run_id=f"run-{slice_name}",
            started_time=datetime.fromtimestamp(at, UTC),
            retry_policy=poll_retry(POLL) if retry_policy else None,
        )
        inp = ObserveInput(
            slice=SliceRef(
                project=PROJECT,
                zone=ZONE,
                slice_name=slice_name,
                queued=True,
                node_ids=[slice_name],
            ),
            expected_vms=2,
            last_key="",
            phase=Phase.ASSIGN,
        )
        return await env.run(self.activities.observe_slice, inp)

    async def round(self, names: list[str]) -> list[SliceObservation]:
        """Every slice polled at once, as bootstraps whose polls fall due together are."""
        return await asyncio.gather(*(self.poll(name) for name in names))


async def waiting_slices(client: TpuAsyncClient, count: int) -> list[str]:
    names = [f"wait-{i:02d}" for i in range(count)]
    for name in names:
        await create_qr(client, name)
    return names


async def test_waiting_slices_cost_one_list_per_interval_and_no_gets(
    emulator: TpuEmulator,
) -> None:
    worker = Worker(emulator)
    names = await waiting_slices(worker.client, 12)
    emulator.advance(1)
    before = worker.calls()
    rounds = 4
    for _ in range(rounds):
        seen = await worker.round(names)
        assert {obs.qr_state for obs in seen} == {"WAITING_FOR_RESOURCES"}
        emulator.advance(POLL.total_seconds())
    made = worker.calls() - before
    assert made == Counter({"ListQueuedResources": rounds})
    # Staggered polls inside one interval share the interval's list too.
    for i, name in enumerate(names):
        emulator.advance(POLL.total_seconds() / len(names) * (1 if i else 0))
        await worker.poll(name)
    assert worker.calls() - before == Counter({"ListQueuedResources": rounds + 1})
    for name in names:
        assert await qr_state(worker.client, name) == "WAITING_FOR_RESOURCES"
    await worker.channel.close()


async def test_a_slice_the_list_does_not_hold_is_read_on_its_own(emulator: TpuEmulator) -> None:
    worker = Worker(emulator)
    names = await waiting_slices(worker.client, 3)
    await worker.round(names)
    before = worker.calls()
    # Created after the list, at the same moment: the list is fresh but does not hold it.
    await create_qr(worker.client, "late")
    late = await worker.poll("late")
    assert late.qr_state != GONE
    assert late.qr_state == await qr_state(worker.client, "late")
    # Only a Get's NotFound says gone.
    gone = await worker.poll("never-created")
    assert gone.qr_state == GONE
    made = worker.calls() - before
    assert made == Counter({"CreateQueuedResource": 1, "GetQueuedResource": 3})
    await worker.channel.close()


async def test_every_page_of_the_zone_is_read(small_pages: TpuEmulator) -> None:
    worker = Worker(small_pages)
    names = await waiting_slices(worker.client, 8)
    small_pages.advance(1)
    before = worker.calls()
    seen = await worker.round(names)
    assert {obs.qr_state for obs in seen} == {"WAITING_FOR_RESOURCES"}
    # 8 resources, 3 a page: three pages of one list, and no slice read on its own.
    assert worker.calls() - before == Counter({"ListQueuedResources": 3})
    await worker.channel.close()


async def test_a_throttled_list_falls_back_to_each_slices_own_read(emulator: TpuEmulator) -> None:
    worker = Worker(emulator)
    names = await waiting_slices(worker.client, 5)
    emulator.advance(1)
    emulator.inject_fault("ListQueuedResources", "RESOURCE_EXHAUSTED")
    before = worker.calls()
    seen = await worker.round(names)
    assert {obs.qr_state for obs in seen} == {"WAITING_FOR_RESOURCES"}
    # The failed list is not tried again within the interval: each slice read its own.
    await worker.round(names)
    assert worker.calls() - before == Counter(
        {"ListQueuedResources": 1, "GetQueuedResource": 2 * len(names)}
    )
    # One interval on, the list is tried again and answers every slice.
    emulator.advance(POLL.total_seconds())
    await worker.round(names)
    assert worker.calls() - before == Counter(
        {"ListQueuedResources": 2, "GetQueuedResource": 2 * len(names)}
    )
    await worker.channel.close()


async def test_throttled_list_and_reads_back_off_as_a_throttled_read_did(
    emulator: TpuEmulator,
) -> None:
    worker = Worker(emulator)
    names = await waiting_slices(worker.client, 2)
    emulator.advance(1)
    emulator.inject_fault("ListQueuedResources", "RESOURCE_EXHAUSTED")
    emulator.inject_fault("GetQueuedResource", "RESOURCE_EXHAUSTED", count=4)
    for streak in (1, 2):
        for name in names:
            with pytest.raises(ApplicationError) as caught:
                await worker.poll(name)
            assert caught.value.type == "RateLimited"
            # RateLimitTracker: the poll interval x 2^streak, per polling activity.
            assert caught.value.next_retry_delay == POLL * 2**streak
    emulator.advance(POLL.total_seconds())
    assert {obs.qr_state for obs in await worker.round(names)} == {"WAITING_FOR_RESOURCES"}
    await worker.channel.close()


async def test_without_a_retry_policy_only_a_list_from_the_same_moment_serves(
    emulator: TpuEmulator,
) -> None:
    """The time-skipping test server hands the activity no retry policy: a list then serves
    only attempts that started no later than it, so a poll never sees an older answer."""
    worker = Worker(emulator)
    names = await waiting_slices(worker.client, 3)
    emulator.advance(1)
    before = worker.calls()
    at = emulator.clock.now()
    for name in names:
        await worker.poll(name, retry_policy=False, at=at)
    # An attempt that started before the list was made is served by it too.
    await worker.poll(names[0], retry_policy=False, at=at - 1)
    assert worker.calls() - before == Counter({"ListQueuedResources": 1})
    await worker.poll(names[0], retry_policy=False, at=at + 1)
    assert worker.calls() - before == Counter({"ListQueuedResources": 2})
    await worker.channel.close()
