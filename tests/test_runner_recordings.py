"""Recordings of runner deletions, replayed by tests/test_replay.py like every other
recording. On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> pytest tests/test_runner_recordings.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.recording import on_demand, until_rolled_over, write_recording
from tests.runner_world import FAST_POLICY, runner_worker, runner_world

SCENARIOS = ["runner-auth-attention", "runner-forced-busy-cleanup"]


async def _until_error(handle: Any, text: str, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while text not in (((await handle.query("status")) or {}).get("error") or ""):
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id}: no {text!r}"
        await asyncio.sleep(0.1)


@on_demand
@pytest.mark.parametrize("label", SCENARIOS)
async def test_record_runner_since_auth_attention(dev_env, tmp_path: Path, label: str) -> None:
    name = f"replay-{label}"
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world):
        if label == "runner-auth-attention":
            record = world.add_runner(name)
            world.github.inject(401, runner_id=record.github_runner_id, times=100_000)
            handle = await world.request(dev_env.client, name)
            await _until_error(handle, "cannot progress by itself")
            world.github.clear_faults()
        else:
            world.add_runner(name, busy=True)
            handle = await world.request(
                dev_env.client,
                name,
                force=True,
                policy=FAST_POLICY.model_copy(update={"registration_cleanup_attempts": 3}),
            )
        await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    write_recording(f"{label}.json", history.to_json())


RUNNER_SCENARIOS = ["runner-deleted", "runner-escalated-forced", "runner-leak", "runner-recovered"]
# Paths that exist since `deletion-v2`: a busy runner that finishes its job while escalated,
# a rejected request, and a deletion whose history rolls over (both runs are recorded).
RUNNER_V2_SCENARIOS = ["runner-escalated-resolved", "runner-rejected-request", "runner-rolled-over"]


async def _until_step(handle: Any, step: str, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        view = await handle.query("status")
        if view and view["step"] == step:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id} never reached {step}"
        await asyncio.sleep(0.1)


@on_demand
@pytest.mark.parametrize("label", RUNNER_SCENARIOS + RUNNER_V2_SCENARIOS)
async def test_record_runner(dev_env, tmp_path: Path, label: str):
    from emulators.provider import state as provider_state
    from keeper.domain.runners.status import InstanceStatus
    from tests.runner_world import FAST_POLICY, eventually, force_write, runner_worker, runner_world

    name = f"replay-{label}"
    policy = FAST_POLICY
    if label == "runner-rolled-over":
        policy = FAST_POLICY.model_copy(update={"history_events_limit": 100})
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world):
        busy = label in (
            "runner-escalated-forced",
            "runner-escalated-resolved",
            "runner-rolled-over",
        )
        if label == "runner-leak":
            world.add_runner(name, mode="failing")
        elif label == "runner-recovered":
            world.add_runner(name, mode="slow", mode_seconds=1.0)
        else:
            world.add_runner(name, busy=busy or label == "runner-rejected-request")
        handle = await world.request(dev_env.client, name, policy=policy)
        runner_id = world.store.require(name).github_runner_id
        if label == "runner-escalated-forced":
            await _until_step(handle, "escalated")
            await world.request(dev_env.client, name, force=True, policy=policy)
        elif label == "runner-escalated-resolved":
            await _until_step(handle, "escalated")
            world.github.set_busy(runner_id, False)
        elif label == "runner-rejected-request":
            await _until_step(handle, "busy_wait")
            await handle.signal("request", {"force": "yes"})
            world.github.set_busy(runner_id, False)
        elif label == "runner-rolled-over":
            await _until_step(handle, "escalated")
            for i in range(40):
                await world.request(dev_env.client, name, reason=f"again {i}", policy=policy)
            first_run = handle.result_run_id
            latest = dev_env.client.get_workflow_handle(handle.id)
            await until_rolled_over(latest, first_run)
            first = dev_env.client.get_workflow_handle(handle.id, run_id=first_run)
            write_recording(f"{label}.first.json", (await first.fetch_history()).to_json())
            world.github.set_busy(runner_id, False)
            handle = latest
        elif label == "runner-leak":
            await eventually(
                lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 2
            )
            await world.request(dev_env.client, name, force=True, policy=policy)
        elif label == "runner-recovered":
            await eventually(
                lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 1
            )
            force_write(world.store, name, InstanceStatus.PENDING_DELETE)
        await handle.result()
        history = await handle.fetch_history()
    suffix = ".last" if label == "runner-rolled-over" else ""
    write_recording(f"{label}{suffix}.json", history.to_json())
