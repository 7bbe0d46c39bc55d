"""A teardown cannot be stopped halfway: a cancel waits for the delete, and a teardown
terminated mid-delete leaves its slice to the next sweep."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapResult, DeletionReport, SweepReport, SweepRequest
from keeper.domain.tpu.naming import bootstrap_workflow_id, teardown_workflow_id
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.sweeper import TpuSweeper
from keeper.workflows.tpu.teardown import TpuSliceTeardown
from tests.e2e_support import temporal_cli
from tests.harness import assert_no_leaks, running_worker, slice_request

pytestmark = pytest.mark.e2e

FAST = Scenario(assign_after=0.3, active_after=0.3, ips_after=0.1, delete_duration=0.3)


async def handed_over(client: Client, queue: str, emu: TpuEmulator) -> SliceRequest:
    request = slice_request(poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, FAST)
    await asyncio.wait_for(
        client.execute_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=queue,
            result_type=BootstrapResult,
        ),
        60,
    )
    return request


async def start_teardown(
    client: Client, queue: str, request: SliceRequest
) -> WorkflowHandle[Any, DeletionReport]:
    return await client.start_workflow(
        TpuSliceTeardown.run,
        {"slice_name": request.slice_name, "project": request.project, "zone": request.zone},
        id=teardown_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=DeletionReport,
    )


async def until_delete_attempt(handle: WorkflowHandle[Any, Any], attempt: int) -> None:
    """Waits until the teardown's delete has failed and is on its `attempt`-th try."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    while loop.time() < end:
        pending = (await handle.describe()).raw_description.pending_activities
        if pending and pending[0].attempt >= attempt:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id}: delete never reached attempt {attempt}")


def qr_deleted(emu: TpuEmulator, slice_name: str) -> bool:
    (record,) = [q for q in emu.state()["queued_resources"] if q["id"] == slice_name]
    return record["deleted_at"] is not None


async def test_a_cancel_during_the_delete_waits_for_it(dev_env, emu: TpuEmulator):
    async with running_worker(dev_env.client, emu) as worker:
        request = await handed_over(dev_env.client, worker.task_queue, emu)
        # Two refused deletes: the cancel lands while the teardown is retrying.
        emu.inject_fault("DeleteQueuedResource", "UNAVAILABLE", count=2, slice=request.slice_name)
        handle = await start_teardown(dev_env.client, worker.task_queue, request)
        await until_delete_attempt(handle, 2)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
        details = await temporal_cli(dev_env, "workflow", "metadata", "-w", handle.id)
    assert isinstance(caught.value.cause, CancelledError)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert qr_deleted(emu, request.slice_name)
    assert "cancel requested" in details.stdout, details.stdout
    assert_no_leaks(emu)


async def test_a_teardown_terminated_mid_delete_leaves_its_slice_to_the_sweeper(
    dev_env, emu: TpuEmulator
):
    async with running_worker(dev_env.client, emu) as worker:
        request = await handed_over(dev_env.client, worker.task_queue, emu)
        emu.inject_fault(
            "DeleteQueuedResource", "UNAVAILABLE", count=1_000_000, slice=request.slice_name
        )
        handle = await start_teardown(dev_env.client, worker.task_queue, request)
        await until_delete_attempt(handle, 2)
        await handle.terminate(reason="test: operator terminated the teardown")
        emu.clear_faults()
        assert not qr_deleted(emu, request.slice_name)
        # The sweep reads the teardown's fate from visibility, which lags a close a moment.
        query = f'WorkflowId = "{handle.id}" AND ExecutionStatus = "Terminated"'
        for _ in range(300):
            if [e async for e in dev_env.client.list_workflows(query)]:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{handle.id} never listed as terminated")
        report = await dev_env.client.execute_workflow(
            TpuSweeper.run,
            SweepRequest(project=request.project, zone=request.zone),
            id=f"tpu-sweeper-test-{uuid.uuid4().hex[:6]}",
            task_queue=worker.task_queue,
            result_type=SweepReport,
        )
    qr = f"projects/{request.project}/locations/{request.zone}/queuedResources/{request.slice_name}"
    owner = bootstrap_workflow_id(request.slice_name)
    assert report.deleted == [f"{qr} (owner {owner}: COMPLETED, teardown TERMINATED)"]
    assert qr_deleted(emu, request.slice_name)
    assert_no_leaks(emu)
