"""Recordings of the TPU family's workflows (bootstrap, its phase child, teardown, sweeper),
replayed by tests/test_replay.py like every other recording. On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> pytest tests/test_tpu_recordings.py
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import Capacity
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.e2e_support import wait_for_phase
from tests.harness import running_worker, slice_request
from tests.recording import on_demand, until_rolled_over, write_recording

STOCKOUT = Scenario(
    assign_after=None,
    terminal={"state": "FAILED", "after": 8, "message": "no more capacity in zone"},
)
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
    # Since `phase-deadline-last-look`: ready only at the last look, at the deadline.
    "ready-last-look": (
        slice_request("replay-last-look", poll_interval=timedelta(minutes=10)),
        Scenario(assign_after=0, active_after=0, ips_after=60),
    ),
    # Since `compensation-bounded-windows`: a QR that fails while queued is compensated, and
    # one whose deletes are refused for 20 minutes turns stuck, then finishes.
    "stockout": (slice_request("replay-stockout"), STOCKOUT),
    "compensation-stuck": (slice_request("replay-stuck"), STOCKOUT),
}
# Scenario -> emulator faults before the bootstrap starts: (method, code, count).
SCENARIO_FAULTS = {"compensation-stuck": ("DeleteQueuedResource", "PERMISSION_DENIED", 30)}


@on_demand
@pytest.mark.parametrize("label", list(SCENARIOS))
async def test_record(time_env, clocked_emu: TpuEmulator, label: str):
    request, scenario = SCENARIOS[label]
    clocked_emu.set_scenario(request.slice_name, scenario)
    if label in SCENARIO_FAULTS:
        method, code, count = SCENARIO_FAULTS[label]
        clocked_emu.inject_fault(method, code, count=count, slice=request.slice_name)
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
    await _record_bootstrap(time_env.client, label, request.slice_name)


async def _record_bootstrap(client: Any, label: str, slice_name: str) -> None:
    """A bootstrap's two histories, supervisor and phase child, as LABEL.{supervisor,child}."""
    for suffix, workflow_id in (
        ("supervisor", bootstrap_workflow_id(slice_name)),
        ("child", bootstrap_run_workflow_id(slice_name)),
    ):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        write_recording(f"{label}.{suffix}.json", history.to_json())


@on_demand
async def test_record_cancel_compensation_stuck(time_env, clocked_emu: TpuEmulator):
    """Since `child-compensation-progress`: a bootstrap cancelled in assign, whose phase
    child's compensation is refused for 20 minutes, turns stuck (the child tells its
    supervisor each window), then finishes."""
    request = slice_request("replay-cancel-stuck")
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=30, slice=request.slice_name
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await time_env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
        )
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        with contextlib.suppress(Exception):
            await handle.result()
    await _record_bootstrap(time_env.client, "cancel-compensation-stuck", request.slice_name)


@on_demand
async def test_record_cancel_compensation_continued(emu: TpuEmulator):
    """Since `child-compensation-continued-status`: a bootstrap cancelled in assign whose
    phase child's compensation is refused until the child continued as new (its supervisor
    waits, alive), then finishes. Both runs of the child are recorded.

    On a dev server of its own that suggests continue-as-new past 40 events: a replay
    reads the suggestion from the history, so it must be the server's (the time-skipping
    server cannot continue a child workflow as new)."""
    from temporalio.testing import WorkflowEnvironment

    from keeper.runtime import search_attributes as sa
    from keeper.runtime.tpu.client import emulator_client
    from keeper.workers.main import build_worker
    from tests import harness

    settings = harness.test_settings()
    # The first window is then a minute (the server ends it at about 30 s), not five.
    settings.bootstrap.compensation_stuck_after = timedelta(seconds=1)
    request = slice_request("replay-cancel-continued", poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    queue = f"keeper-replay-{request.slice_name}"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=harness.tool_path("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.ALL),
        ui=False,
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value",
            "limit.historyCount.suggestContinueAsNew=40",
        ],
    )
    tpu = emulator_client(emu.grpc_target)
    async with env, build_worker(env.client, settings, tpu, queue):
        handle = await env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=queue,
        )
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        child = env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        first_run = (await child.describe()).run_id
        await until_rolled_over(child, first_run, within=150)
        # The continued run has started compensating before the deletes go through.
        await wait_for_phase(child, Phase.COMPENSATE)
        emu.clear_faults()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 120)
        runs = (
            ("supervisor", handle),
            ("child.first", env.client.get_workflow_handle(child.id, run_id=first_run)),
            ("child.last", child),
        )
        for suffix, run in runs:
            history = await run.fetch_history()
            write_recording(f"cancel-compensation-continued.{suffix}.json", history.to_json())


@on_demand
async def test_record_teardown_cancelled_mid_delete(dev_env, emu: TpuEmulator):
    """Since `teardown-shielded-delete`: a cancel waits for the delete it interrupted."""
    from tests.test_tpu_teardown import handed_over, start_teardown, until_delete_attempt

    async with running_worker(dev_env.client, emu) as worker:
        request = await handed_over(dev_env.client, worker.task_queue, emu)
        emu.inject_fault("DeleteQueuedResource", "UNAVAILABLE", count=2, slice=request.slice_name)
        handle = await start_teardown(dev_env.client, worker.task_queue, request)
        await until_delete_attempt(handle, 2)
        await handle.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    write_recording("teardown-cancelled.json", history.to_json())


@on_demand
async def test_record_sweep_with_an_undeletable_orphan(dev_env, emu: TpuEmulator):
    """Since `sweeper-survey-bounded-deletes`: one orphan is deleted, one is reported."""
    from keeper.domain.tpu.models import SweepRequest
    from keeper.workflows.tpu.sweeper import TpuSweeper
    from tests.test_tpu_sweeper import dead_owner_qr, sweeping_worker, until_listed

    stuck, ordinary = slice_request(), slice_request()
    for request in (stuck, ordinary):
        await dead_owner_qr(dev_env.client, emu, request)
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=stuck.slice_name
    )
    ids = " OR ".join(
        f'WorkflowId = "{bootstrap_workflow_id(r.slice_name)}"' for r in (stuck, ordinary)
    )
    await until_listed(dev_env.client, f'({ids}) AND ExecutionStatus = "Terminated"', 2)
    async with sweeping_worker(dev_env.client, emu, delete_timeout=timedelta(seconds=3)) as w:
        handle = await dev_env.client.start_workflow(
            TpuSweeper.run,
            SweepRequest(project="keeper-test", zone="us-central2-b"),
            id=f"tpu-sweeper-manual-replay-{stuck.slice_name}",
            task_queue=w.task_queue,
        )
        await asyncio.wait_for(handle.result(), 90)
        history = await handle.fetch_history()
    write_recording("sweep-undeletable-orphan.json", history.to_json())
