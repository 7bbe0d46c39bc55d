"""TpuSliceBootstrap end to end on the Temporal dev server, against the emulated cloud in
real time: the temporal CLI, cancellation, termination, a killed worker, API faults, bad
input and the sweeper. Every test ends by checking the emulator for leaks."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from google.cloud import tpu_v2
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.cloud import build_queued_resource
from keeper.domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    BootstrapStatus,
    ChildProgress,
    Owner,
    SweepReport,
    SweepRequest,
)
from keeper.domain.tpu.naming import (
    SWEEPER_SCHEDULE_ID,
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    owner_labels,
    parent,
    queued_resource_name,
)
from keeper.domain.tpu.phases import Phase
from keeper.runtime.tpu.client import emulator_client
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.bootstrap_run import CHILD_PROGRESS_SIGNAL
from keeper.workflows.tpu.sweeper import TpuSweeper
from tests.e2e_support import (
    start_worker_process,
    temporal_cli,
    wait_for_phase,
    write_config,
)
from tests.harness import assert_no_leaks, running_worker, slice_request

pytestmark = pytest.mark.e2e

FAST = Scenario(assign_after=0.5, active_after=0.5, ips_after=0.2, delete_duration=0.3)
# Holds a slice in one phase until the test acts.
HOLD = {
    Phase.ASSIGN: Scenario(assign_after=None, delete_duration=0.3),
    Phase.PROVISION: Scenario(assign_after=0.2, active_after=None, delete_duration=0.3),
    Phase.READY: Scenario(assign_after=0.2, active_after=0.2, vms_without_ip=[1]),
    Phase.HEALTH: Scenario(assign_after=0.2, active_after=0.2, ips_after=0, unhealthy_vms=[0]),
}


def quick_request(**overrides):
    return slice_request(poll_interval=timedelta(seconds=1), **overrides)


async def start(env, queue: str, request):
    return await env.client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


@pytest.fixture
def fast_emu(emu: TpuEmulator) -> TpuEmulator:
    emu.set_default_scenario(FAST)
    return emu


async def test_temporal_cli_start_with_json_input_bootstraps_the_slice(dev_env, fast_emu):
    request = quick_request()
    async with running_worker(dev_env.client, fast_emu) as worker:
        started = await temporal_cli(
            dev_env,
            "workflow", "start",
            "--type", "TpuSliceBootstrap",
            "--task-queue", worker.task_queue,
            "--workflow-id", bootstrap_workflow_id(request.slice_name),
            "--input", request.model_dump_json(),
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        handle = dev_env.client.get_workflow_handle(
            bootstrap_workflow_id(request.slice_name), result_type=BootstrapResult
        )
        result = await asyncio.wait_for(handle.result(), 60)
        # Current details are served by a query, so the worker must still be up.
        metadata = await temporal_cli(dev_env, "workflow", "metadata", "-w", handle.id)
    assert len(result.vms) == 4
    description = await handle.describe()
    attributes = {k.name: v for k, v in description.typed_search_attributes}  # type: ignore[misc]
    assert attributes["SliceName"] == request.slice_name
    assert attributes["Zone"] == "us-central2-b"
    assert attributes["KeeperStep"] == "done"
    assert metadata.returncode == 0, metadata.stderr
    assert "VMs healthy | 4/4" in metadata.stdout
    assert_no_leaks(fast_emu, frozenset({request.slice_name}))


async def test_bad_input_fails_the_workflow_at_once_naming_the_field(dev_env, fast_emu):
    async with running_worker(dev_env.client, fast_emu) as worker:
        bad = {"slice_name": "Not_A_Name", "project": "keeper-test", "zone": "us-central2-b"}
        workflow_id = f"tpu-bootstrap-bad-{uuid.uuid4().hex[:6]}"
        started = await temporal_cli(
            dev_env,
            "workflow", "start",
            "--type", "TpuSliceBootstrap",
            "--task-queue", worker.task_queue,
            "--workflow-id", workflow_id,
            "--input", json.dumps(bad),
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        handle = dev_env.client.get_workflow_handle(workflow_id)
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 10)
    message = str(caught.value.cause)
    assert "slice_name" in message
    assert "accelerator_type" in message  # every problem is named, not just the first
    assert (await handle.describe()).status is WorkflowExecutionStatus.FAILED
    assert fast_emu.state()["queued_resources"] == []


@pytest.mark.parametrize(
    "phase", [Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH], ids=lambda p: p.value
)
async def test_cancel_in_each_phase_deletes_the_slice(dev_env, emu, phase: Phase):
    request = quick_request()
    emu.set_scenario(request.slice_name, HOLD[phase])
    async with running_worker(dev_env.client, emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        await wait_for_phase(handle, phase)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
        status = await handle.query("status")
    assert isinstance(caught.value.cause, CancelledError)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED
    assert status["phase"] == "cancelled"
    assert_deleted_by_the_child(emu, request, status)
    assert_no_leaks(emu)


def assert_deleted_by_the_child(emu: TpuEmulator, request, status: dict) -> None:
    """A cancel reaches the phase child first: it deletes the QR, and the supervisor's own
    compensation, which waits for the child to close, finds the QR already gone, and keeps
    the child's report: the status says who deleted it."""
    (record,) = [q for q in emu.state()["queued_resources"] if q["id"] == request.slice_name]
    assert record["deleted_at"] is not None
    assert emu.state()["calls"].get("DeleteQueuedResource", 0) >= 1
    assert status["compensation"] == (
        f"the phase workflow deleted {request.slice_name} when it was cancelled"
    )
    assert status["child_compensation"]["deleted"] == [record["name"]]


async def pending_create_attempt(env, request) -> int:
    """The attempt the phase child's create is on; 0 when none is pending."""
    child = env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
    pending = (await child.describe()).raw_description.pending_activities
    return max(
        (p.attempt for p in pending if p.activity_type.name == "tpu.create_slice"), default=0
    )


async def until(condition, what: str, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not await condition():
        assert loop.time() < end, f"{what} not seen within {within:g}s"
        await asyncio.sleep(0.05)


async def test_cancel_while_create_is_retrying_still_compensates(dev_env, fast_emu):
    request = quick_request()
    # Every create takes effect and then fails, as if each reply were lost: the QR exists
    # though the caller never heard so, and the create is retried until the cancel.
    # Compensation must still find and delete it.
    fast_emu.inject_fault("CreateQueuedResource", "UNAVAILABLE", count=1_000, when="after")
    fast_emu.set_scenario(request.slice_name, HOLD[Phase.ASSIGN])
    async with running_worker(dev_env.client, fast_emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)

        async def retried() -> bool:
            return fast_emu.state()["calls"].get("CreateQueuedResource", 0) >= 2

        await until(retried, "a second create attempt")
        # Still retrying when the cancel lands: the create is pending on a later attempt
        # and the bootstrap never left the submit phase.
        assert await pending_create_attempt(dev_env, request) >= 2
        assert (await handle.query("status"))["phase"] == Phase.SUBMIT.value
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
        status = await handle.query("status")
    assert isinstance(caught.value.cause, CancelledError)
    created = [q for q in fast_emu.state()["queued_resources"] if q["id"] == request.slice_name]
    assert len(created) == 1, "a retried create must not make a second QR"
    assert_deleted_by_the_child(fast_emu, request, status)
    assert_no_leaks(fast_emu)


async def test_second_cancel_during_compensation_does_not_abandon_it(dev_env, emu):
    request = quick_request()
    emu.set_scenario(request.slice_name, Scenario(assign_after=None, delete_duration=3))
    async with running_worker(dev_env.client, emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        await wait_for_phase(handle, Phase.COMPENSATE)
        for _ in range(3):
            await handle.cancel()
            await asyncio.sleep(0.2)  # spread over the 3 s delete, not a wait for anything
        # Every cancel landed while the delete was still running.
        (record,) = [q for q in emu.state()["queued_resources"] if q["id"] == request.slice_name]
        assert record["deleted_at"] is None
        assert (await handle.query("status"))["phase"] == Phase.COMPENSATE.value
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    (record,) = [q for q in emu.state()["queued_resources"] if q["id"] == request.slice_name]
    assert record["deleted_at"] is not None
    assert_no_leaks(emu)


async def test_terminating_the_phase_workflow_is_compensated_by_the_supervisor(dev_env, emu):
    request = quick_request()
    emu.set_scenario(request.slice_name, HOLD[Phase.ASSIGN])
    async with running_worker(dev_env.client, emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        await wait_for_phase(handle, Phase.ASSIGN)
        child = dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        await child.terminate(reason="test: operator terminated the phase workflow")
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    failure = BootstrapFailure.model_validate(cause.details[0])
    assert failure.kind == "terminated"
    assert failure.compensation is not None
    qr = queued_resource_name(request.project, request.zone, request.slice_name)
    assert (failure.compensation.deleted, failure.compensation.not_ours) == ([qr], [])
    assert_no_leaks(emu)


async def test_terminating_the_supervisor_makes_the_child_compensate(dev_env, emu):
    request = quick_request()
    emu.set_scenario(request.slice_name, HOLD[Phase.ASSIGN])
    async with running_worker(dev_env.client, emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.terminate(reason="test: supervisor terminated")
        child = dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(child.result(), 60)
    assert (await child.describe()).status is WorkflowExecutionStatus.CANCELED
    assert_no_leaks(emu)


async def test_the_supervisor_takes_progress_only_from_its_own_child(dev_env, emu):
    """Progress goes by workflow id, which a later bootstrap of the name takes too, so an
    earlier bootstrap's child still compensating reaches it. Each signal names the supervisor
    it is for: the child's own reach it (the supervisor follows it into assign), and one
    naming another bootstrap is not taken, however new its revision."""
    request = quick_request()
    emu.set_scenario(request.slice_name, HOLD[Phase.ASSIGN])
    async with running_worker(dev_env.client, emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        seen = await wait_for_phase(handle, Phase.ASSIGN)
        ours = Owner(workflow_id=handle.id, run_id=handle.first_execution_run_id or "")
        earlier = Owner(workflow_id=handle.id, run_id=str(uuid.uuid4()))
        stale = seen.model_copy(update={"revision": seen.revision + 100, "phase": Phase.COMPENSATE})
        await handle.signal(CHILD_PROGRESS_SIGNAL, ChildProgress(status=stale, supervisor=earlier))
        shown = await handle.query("status", result_type=BootstrapStatus)
        # (The child's own later signals may have moved it on, within assign.)
        assert shown.phase is Phase.ASSIGN and shown.revision < stale.revision, shown
        # The same status naming this supervisor is taken: the check is the sender alone.
        await handle.signal(CHILD_PROGRESS_SIGNAL, ChildProgress(status=stale, supervisor=ours))
        shown = await handle.query("status", result_type=BootstrapStatus)
        assert shown.phase is Phase.COMPENSATE and shown.revision == stale.revision, shown
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    assert_no_leaks(emu)


async def test_worker_killed_mid_phase_and_restarted_finishes_without_leaks(
    dev_env, emu, tmp_path: Path
):
    request = quick_request()
    emu.set_scenario(request.slice_name, Scenario(assign_after=4, active_after=1, ips_after=0.5))
    queue = f"keeper-kill-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    log = tmp_path / "worker.log"
    worker = start_worker_process(config, log)
    try:
        # The worker process serves the TPU family on its own queue, <stem>-tpu.
        handle = await start(dev_env, f"{queue}-tpu", request)
        await wait_for_phase(handle, Phase.ASSIGN, within=60)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        worker = start_worker_process(config, log)
        result = await asyncio.wait_for(handle.result(), 120)
    finally:
        worker.terminate()
        worker.wait(20)
    assert len(result.vms) == request.expected_vms, log.read_text()[-2000:]
    created = [q for q in emu.state()["queued_resources"] if q["id"] == request.slice_name]
    assert len(created) == 1
    # The worker process put the sweeper on its schedule when it started.
    schedule = await dev_env.client.get_schedule_handle(SWEEPER_SCHEDULE_ID).describe()
    assert schedule.schedule.spec.intervals[0].every == timedelta(hours=1)
    assert_no_leaks(emu, frozenset({request.slice_name}))


async def test_transient_api_faults_are_retried(dev_env, fast_emu):
    request = quick_request()
    fast_emu.inject_fault("CreateQueuedResource", "UNAVAILABLE", count=1)
    # The first polls' zone lists fail, so each falls back to its own read, which fails too.
    fast_emu.inject_fault("ListQueuedResources", "UNAVAILABLE", count=3)
    fast_emu.inject_fault("GetQueuedResource", "DEADLINE_EXCEEDED", count=1)
    fast_emu.inject_fault("GetQueuedResource", "RESOURCE_EXHAUSTED", count=2)
    fast_emu.inject_fault("GetNode", "UNAVAILABLE", count=1)
    async with running_worker(dev_env.client, fast_emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        result = await asyncio.wait_for(handle.result(), 90)
    assert len(result.vms) == 4
    # Every fault was used up by a call, and each refused call was followed by another.
    state = fast_emu.state()
    assert state["faults"] == []
    assert state["calls"]["CreateQueuedResource"] >= 2
    assert state["calls"]["ListQueuedResources"] >= 4
    assert state["calls"]["GetQueuedResource"] >= 3
    assert state["calls"]["GetNode"] >= 2
    assert_no_leaks(fast_emu, frozenset({request.slice_name}))


async def test_permission_denied_fails_fast_and_compensates(dev_env, fast_emu):
    request = quick_request()
    # Credentials that may neither list nor read queued resources.
    fast_emu.inject_fault("ListQueuedResources", "PERMISSION_DENIED", count=1)
    fast_emu.inject_fault("GetQueuedResource", "PERMISSION_DENIED", count=1)
    async with running_worker(dev_env.client, fast_emu) as worker:
        handle = await start(dev_env, worker.task_queue, request)
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), 60)
    failure = BootstrapFailure.model_validate(caught.value.cause.details[0])
    assert failure.kind == "error"
    assert "roles/tpu.admin" in failure.message
    assert_no_leaks(fast_emu)


async def test_sweeper_deletes_only_resources_whose_owner_closed_without_success(dev_env, fast_emu):
    client = emulator_client(fast_emu.grpc_target)
    async with running_worker(dev_env.client, fast_emu) as worker:
        # A completed bootstrap: its slice was handed over and must stay.
        kept = quick_request()
        await (await start(dev_env, worker.task_queue, kept)).result()
        # A bootstrap that never ran and was terminated: whatever it labelled is orphaned.
        orphan = quick_request()
        dead = await start(dev_env, "nobody-polls-this-queue", orphan)
        await dead.terminate(reason="test: lost before it could compensate")
        fast_emu.set_scenario(orphan.slice_name, Scenario(assign_after=None))
        await client.create_queued_resource(
            request=tpu_v2.CreateQueuedResourceRequest(
                parent=parent(orphan.project, orphan.zone),
                queued_resource_id=orphan.slice_name,
                queued_resource=build_queued_resource(
                    orphan,
                    owner_labels(dead.id, dead.result_run_id or ""),
                    timedelta(hours=4),
                ),
            )
        )
        report = await dev_env.client.execute_workflow(
            TpuSweeper.run,
            SweepRequest(project="keeper-test", zone="us-central2-b"),
            id=f"tpu-sweeper-test-{uuid.uuid4().hex[:6]}",
            task_queue=worker.task_queue,
            result_type=SweepReport,
        )
    assert report.examined == 2
    orphan_qr = queued_resource_name(orphan.project, orphan.zone, orphan.slice_name)
    assert report.deleted == [f"{orphan_qr} (owner {dead.id}: TERMINATED)"]
    kept_qr = queued_resource_name(kept.project, kept.zone, kept.slice_name)
    assert report.kept == [f"{kept_qr} (owner {bootstrap_workflow_id(kept.slice_name)}: COMPLETED)"]
    assert_no_leaks(fast_emu, frozenset({kept.slice_name}))
