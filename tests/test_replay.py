"""Replays recorded bootstrap and runner-deletion histories against the current workflow code.

A change that would break running workflows (a new command, a reordered activity) makes
these fail. When a change is meant to be compatible, re-record with

    KEEPER_RECORD_HISTORIES=1 pytest tests/test_replay.py

and keep the old files next to the new ones when the change needs `workflow.patched`.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from domain.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from domain.slice_request import Capacity
from emulators.tpu import Scenario, TpuEmulator
from tests.harness import env_flag, running_worker, slice_request
from workers.registry import WORKFLOWS
from workflows.tpu_bootstrap import TpuSliceBootstrap

HISTORIES = Path(__file__).parent / "histories"

SCENARIOS = {
    "reserved-ready": (slice_request("replay-ready"), Scenario(assign_after=600)),
    "assign-deadline": (slice_request("replay-assign"), Scenario(assign_after=None)),
    "health-deadline": (
        slice_request("replay-health", deadlines={"health": "1m"}),
        Scenario(assign_after=0, active_after=0, unhealthy_vms=[1]),
    ),
    "on-demand-ready": (
        slice_request("replay-node", capacity=Capacity.ON_DEMAND),
        Scenario(active_after=30),
    ),
}


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
@pytest.mark.parametrize("label", list(SCENARIOS))
async def test_record(time_env, clocked_emu: TpuEmulator, label: str):
    request, scenario = SCENARIOS[label]
    clocked_emu.set_scenario(request.slice_name, scenario)
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await time_env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=f"{bootstrap_workflow_id(request.slice_name)}",
            task_queue=worker.task_queue,
        )
        # Failed bootstraps are histories worth keeping too.
        with contextlib.suppress(Exception):
            await handle.result()
    HISTORIES.mkdir(exist_ok=True)
    for suffix, workflow_id in (
        ("supervisor", handle.id),
        ("child", bootstrap_run_workflow_id(request.slice_name)),
    ):
        history = await time_env.client.get_workflow_handle(workflow_id).fetch_history()
        (HISTORIES / f"{label}.{suffix}.json").write_text(history.to_json())


def recorded() -> list[Path]:
    return sorted(HISTORIES.glob("*.json"))


def test_histories_are_recorded():
    labels = {path.name.split(".")[0] for path in recorded()}
    assert labels >= set(SCENARIOS) | set(RUNNER_SCENARIOS), (
        "re-record with KEEPER_RECORD_HISTORIES=1"
    )


@pytest.mark.parametrize("path", recorded(), ids=lambda p: p.stem)
async def test_replay(path: Path):
    history = WorkflowHistory.from_json(path.stem, await asyncio.to_thread(path.read_text))
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


# ---- runner deletions -----------------------------------------------------------------

RUNNER_SCENARIOS = ["runner-deleted", "runner-escalated-forced", "runner-leak", "runner-recovered"]


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
@pytest.mark.parametrize("label", RUNNER_SCENARIOS)
async def test_record_runner(dev_env, tmp_path: Path, label: str):
    from domain.runner_status import InstanceStatus
    from emulators.provider import state as provider_state
    from tests.runner_world import eventually, force_write, runner_worker, runner_world

    name = f"replay-{label}"
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world):
        if label == "runner-escalated-forced":
            world.add_runner(name, busy=True)
        elif label == "runner-leak":
            world.add_runner(name, mode="failing")
        elif label == "runner-recovered":
            world.add_runner(name, mode="slow", mode_seconds=1.0)
        else:
            world.add_runner(name)
        handle = await world.request(dev_env.client, name)
        if label == "runner-escalated-forced":
            await asyncio.sleep(4.5)  # past FAST_POLICY's busy bound: escalated
            await world.request(dev_env.client, name, force=True)
        elif label == "runner-leak":
            await eventually(
                lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 2
            )
            await world.request(dev_env.client, name, force=True)
        elif label == "runner-recovered":
            await eventually(
                lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 1
            )
            force_write(world.store, name, InstanceStatus.PENDING_DELETE)
        await handle.result()
        history = await handle.fetch_history()
    (HISTORIES / f"{label}.json").write_text(history.to_json())
