"""Recordings of runner deletions past the `github-auth-attention` patch, replayed by
tests/test_replay.py like every other recording. On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=2026-12-01-runner-auth \\
        pytest tests/test_runner_recordings.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.harness import env_flag
from tests.runner_world import FAST_POLICY, runner_worker, runner_world
from tests.test_replay import write_recording

SCENARIOS = ["runner-auth-attention", "runner-forced-busy-cleanup"]


async def _until_error(handle: Any, text: str, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while text not in (((await handle.query("status")) or {}).get("error") or ""):
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id}: no {text!r}"
        await asyncio.sleep(0.1)


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
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
