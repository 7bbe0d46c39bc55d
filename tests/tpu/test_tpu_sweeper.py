"""The sweeper on the dev server: every location keeper bootstrapped in, one visibility
listing per pass, and bounded deletions that one undeletable orphan cannot hold up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from google.cloud import tpu_v2
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.cloud import build_queued_resource
from keeper.domain.tpu.models import SweepReport, SweepRequest
from keeper.domain.tpu.naming import (
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    owner_labels,
    parent,
)
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import build_worker
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.sweeper import TpuSweeper
from tests import harness
from tests.e2e_support import wait_for_phase
from tests.harness import assert_no_leaks, running_worker, slice_request

pytestmark = pytest.mark.e2e

HOLD = Scenario(assign_after=None, delete_duration=0.2)


@contextlib.asynccontextmanager
async def sweeping_worker(
    client: Client, emulator: TpuEmulator, delete_timeout: timedelta = timedelta(minutes=1)
) -> AsyncIterator[Worker]:
    settings = harness.settings_for_tests()
    settings.sweeper.delete_timeout = delete_timeout
    queue = f"keeper-sweep-{uuid.uuid4().hex[:8]}"
    worker = build_worker(client, settings, emulator_client(emulator.grpc_target), queue)
    async with worker:
        yield worker


async def sweep(client: Client, queue: str, dry_run: bool = False) -> SweepReport:
    return await asyncio.wait_for(
        client.execute_workflow(
            TpuSweeper.run,
            SweepRequest(project="keeper-test", zone="us-central2-b", dry_run=dry_run),
            id=f"tpu-sweeper-test-{uuid.uuid4().hex[:6]}",
            task_queue=queue,
            result_type=SweepReport,
        ),
        90,
    )


async def dead_owner_qr(client: Client, emulator: TpuEmulator, request: SliceRequest) -> None:
    """A QR labelled by a bootstrap that was terminated before it could compensate."""
    dead = await client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=f"nobody-polls-{uuid.uuid4().hex[:6]}",
    )
    await dead.terminate(reason="test: lost before it could compensate")
    emulator.set_scenario(request.slice_name, HOLD)
    await emulator_client(emulator.grpc_target).create_queued_resource(
        request=tpu_v2.CreateQueuedResourceRequest(
            parent=parent(request.project, request.zone),
            queued_resource_id=request.slice_name,
            queued_resource=build_queued_resource(
                request, owner_labels(dead.id, dead.result_run_id or ""), timedelta(hours=4)
            ),
        )
    )


async def until_listed(client: Client, query: str, count: int, within: float = 30.0) -> None:
    """Visibility lags a close by a moment; the sweep under test relies on the listing."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        if len([e async for e in client.list_workflows(query)]) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} workflows listed for {query}")


def names(items: list[str], *slices: str) -> set[str]:
    return {s for s in slices for item in items if f"/{s} " in item}


async def test_one_undeletable_orphan_is_reported_and_the_others_are_deleted(
    dev_env, emu: TpuEmulator, caplog: pytest.LogCaptureFixture
):
    stuck, ordinary = slice_request(), slice_request()
    for request in (stuck, ordinary):
        await dead_owner_qr(dev_env.client, emu, request)
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=stuck.slice_name
    )
    caplog.set_level(logging.WARNING)
    async with sweeping_worker(dev_env.client, emu, delete_timeout=timedelta(seconds=3)) as w:
        report = await sweep(dev_env.client, w.task_queue)
    assert names(report.deleted, stuck.slice_name, ordinary.slice_name) == {ordinary.slice_name}
    assert names(report.failed, stuck.slice_name, ordinary.slice_name) == {stuck.slice_name}
    (failed,) = report.failed
    assert "PermissionDenied" in failed and "roles/tpu.admin" in failed
    assert any(
        "sweeper could not delete" in r.getMessage() and stuck.slice_name in r.getMessage()
        for r in caplog.records
    )
    emu.clear_faults()
    assert_no_leaks(emu, frozenset({stuck.slice_name}))


async def test_a_location_that_cannot_be_listed_is_reported_not_fatal(dev_env, emu: TpuEmulator):
    orphan = slice_request()
    await dead_owner_qr(dev_env.client, emu, orphan)
    # As many failures as the pass has attempts: once, this failed the whole sweep.
    emu.inject_fault("ListQueuedResources", "UNAVAILABLE", count=5)
    async with sweeping_worker(dev_env.client, emu) as worker:
        report = await sweep(dev_env.client, worker.task_queue)
        assert any(
            "listing keeper-test/us-central2-b: ServiceUnavailable" in e for e in report.errors
        ), report
        emu.clear_faults()
        again = await sweep(dev_env.client, worker.task_queue)
    assert names(again.deleted, orphan.slice_name) == {orphan.slice_name}
    assert_no_leaks(emu)


LOCATIONS = [
    ("keeper-test", "us-central2-b"),
    ("keeper-test", "europe-west4-a"),
    ("keeper-other", "us-central2-b"),
    ("keeper-other", "europe-west4-a"),
]


async def test_one_sweep_deletes_orphans_in_every_project_and_zone(dev_env, emu: TpuEmulator):
    requests = [
        slice_request(project=project, zone=zone, poll_interval=timedelta(seconds=1))
        for project, zone in LOCATIONS
    ]
    handles: list[WorkflowHandle[Any, Any]] = []
    async with running_worker(dev_env.client, emu) as worker:
        for request in requests:
            emu.set_scenario(request.slice_name, HOLD)
            # Started as the temporal CLI would: no memo, the workflow records its project.
            handles.append(
                await dev_env.client.start_workflow(
                    TpuSliceBootstrap.run,
                    request,
                    id=bootstrap_workflow_id(request.slice_name),
                    task_queue=worker.task_queue,
                )
            )
        for handle in handles:
            await wait_for_phase(handle, Phase.ASSIGN)
    # No worker runs: terminating both workflows leaves each QR with nobody to delete it.
    for request, handle in zip(requests, handles, strict=True):
        await handle.terminate(reason="test: lost with its worker")
        child = dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        await child.terminate(reason="test: lost with its worker")
    assert len(emu.leaks(set())) == len(LOCATIONS)
    ids = " OR ".join(f'WorkflowId = "{h.id}"' for h in handles)
    await until_listed(dev_env.client, f'({ids}) AND ExecutionStatus = "Terminated"', 4)

    async with sweeping_worker(dev_env.client, emu) as worker:
        report = await sweep(dev_env.client, worker.task_queue)
    everything = {r.slice_name for r in requests}
    assert names(report.deleted, *everything) == everything, report
    assert {f"{p}/{z}" for p, z in LOCATIONS} <= set(report.locations)
    assert report.failed == [] and report.errors == []
    assert_no_leaks(emu)
