"""One check of a watched job, as the worker runs it: the `watch.observe` activity against the
iris emulator over HTTP, outside any workflow."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from emulators.iris import IrisEmulator, IrisEmulatorConfig, ManualWallClock, start_emulator
from keeper.activities.watch.observe import WatchObserver
from keeper.domain.watch.calls import ObserveCall
from keeper.domain.watch.state import ReadingState
from keeper.runtime.watch.iris_client import IrisController
from keeper.workflows.watch.activity_options import CHECK_HEARTBEAT


@pytest.fixture
async def emu() -> AsyncIterator[IrisEmulator]:
    emulator = await start_emulator(IrisEmulatorConfig(settle_interval=0), ManualWallClock())
    try:
        yield emulator
    finally:
        await emulator.stop()


async def _running_job(emu: IrisEmulator) -> str:
    async with httpx.AsyncClient(base_url=emu.url, timeout=5) as control:
        body = {"name": "beat", "scenario": "healthy", "seed": 7}
        job = (await control.post("/control/jobs", json=body)).json()["job_id"]
        forwarded = await control.post("/control/clock/fast-forward", json={"seconds": 100})
        assert forwarded.status_code < 300, forwarded.text
    return str(job)


async def test_a_check_that_answers_within_a_beat_sends_no_heartbeat(emu: IrisEmulator) -> None:
    """A check beats so that the server notices a worker that died while it reads. The server
    times an attempt out a heartbeat timeout after it started whether or not it beat, so a
    check that answers before its first interval sends no beat: one at once would cost a
    heartbeat call on every check and tell the server nothing."""
    job = await _running_job(emu)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=CHECK_HEARTBEAT)
    beats: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    async with IrisController(emu.url, timeout=5) as iris:
        observer = WatchObserver(iris, call_timeout_s=5, cpu_sample_workers=4, log_lines=100)
        obs = await env.run(observer.observe, ObserveCall(job_id=job, reading=ReadingState()))
    # A whole check: the job, its coordinator, and its processes read through the execs.
    assert obs.job_found and obs.coordinator is not None and obs.cpu and obs.failed == []
    assert obs.session_cpu is not None
    assert beats == []
