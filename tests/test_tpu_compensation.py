"""Compensation that finishes however the slice name was used before, and that is loud when
it cannot finish: bounded windows, a stuck status with the last error, bounded history."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from domain.bootstrap_models import BootstrapFailure, BootstrapResult, BootstrapStatus
from domain.naming import bootstrap_workflow_id
from domain.slice_request import SliceRequest
from emulators.tpu import Scenario, TpuEmulator
from tests.harness import assert_no_leaks, running_worker, slice_request
from workflows.tpu_bootstrap import TpuSliceBootstrap

# The demo's demo-stockout: the QR fails while queued, within seconds.
STOCKOUT = Scenario(
    assign_after=None,
    terminal={"state": "FAILED", "after": 8, "message": "no more capacity in zone"},
)


async def start(
    env: WorkflowEnvironment, queue: str, request: SliceRequest
) -> WorkflowHandle[TpuSliceBootstrap, BootstrapResult]:
    return await env.client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


async def failure_of(
    handle: WorkflowHandle[TpuSliceBootstrap, BootstrapResult],
) -> BootstrapFailure:
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), cause
    return BootstrapFailure.model_validate(cause.details[0])


async def test_a_slice_name_reused_after_a_failure_is_compensated_again(
    time_env, clocked_emu: TpuEmulator
):
    request = slice_request("demo-stockout")
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    async with running_worker(time_env.client, clocked_emu) as worker:
        for run in ("first", "second"):
            handle = await start(time_env, worker.task_queue, request)
            # A compensation sending the first run's request id again never ends: bounded.
            failure = await asyncio.wait_for(failure_of(handle), 60)
            assert failure.kind == "terminal", run
            assert failure.compensation is not None
            assert failure.compensation.deleted == [qr], run
    records = [q for q in clocked_emu.state()["queued_resources"] if q["id"] == request.slice_name]
    assert len(records) == 2
    assert all(record["deleted_at"] is not None for record in records)
    assert_no_leaks(clocked_emu)


async def test_a_stuck_compensation_is_reported_keeps_history_bounded_and_finishes(
    time_env, clocked_emu: TpuEmulator, caplog: pytest.LogCaptureFixture
):
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    # Every delete of this QR is refused until the test clears the fault, 2 hours on.
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    caplog.set_level(logging.WARNING)
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await start(time_env, worker.task_queue, request)
        # Awaiting the result is what lets the test server skip time.
        result = asyncio.create_task(failure_of(handle))
        stuck = await wait_for_status(handle, lambda s: s.compensation_stuck)
        assert stuck.compensation_started_at is not None
        assert stuck.compensation_stuck_since is not None
        assert stuck.compensation_stuck_since - stuck.compensation_started_at >= timedelta(
            minutes=15
        )
        assert "PermissionDenied" in (stuck.compensation_last_error or "")
        assert stuck.compensation is not None and stuck.compensation.startswith("stuck for")
        assert "grant roles/tpu.admin" in stuck.compensation
        assert any(
            "compensation of" in r.getMessage() and "stuck for" in r.getMessage()
            for r in caplog.records
            if r.levelno == logging.WARNING
        )

        two_hours_on = stuck.compensation_started_at + timedelta(hours=2)
        while await time_env.get_current_time() < two_hours_on:
            assert not result.done(), "compensation gave up while deletes were refused"
            await asyncio.sleep(0.05)
        clocked_emu.clear_faults()
        failure = await asyncio.wait_for(result, 120)
        history = await handle.fetch_history()
        final = await handle.query("status", result_type=BootstrapStatus)
    assert failure.compensation is not None and failure.compensation.deleted
    assert not final.compensation_stuck
    assert final.compensation and final.compensation.startswith("deleted")
    # Windows double up to an hour: a few events each, however long it stays stuck.
    assert len(history.events) < 100, len(history.events)
    assert_no_leaks(clocked_emu)


async def wait_for_status(
    handle: WorkflowHandle[TpuSliceBootstrap, BootstrapResult],
    condition: object,
    within: float = 60.0,
) -> BootstrapStatus:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    seen: BootstrapStatus | None = None
    while loop.time() < end:
        try:
            seen = await handle.query("status", result_type=BootstrapStatus)
        except Exception:  # the first workflow task may not have run yet
            seen = None
        if seen is not None and condition(seen):  # type: ignore[operator]
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id}: condition not met; last seen {seen}")
