"""TpuSliceBootstrap on the time-skipping server: deadlines, terminal states, the incident.

The emulated cloud is real gRPC driven by the real google-cloud-tpu client; only time is
skipped. Every test ends by checking the emulator for anything left behind.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapFailure, BootstrapResult
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.tpu.slice_request import Capacity, SliceRequest
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.harness import assert_no_leaks, running_worker, slice_request


async def bootstrap(env: WorkflowEnvironment, queue: str, request: SliceRequest):
    return await env.client.execute_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


async def failed_bootstrap(
    env: WorkflowEnvironment, queue: str, request: SliceRequest
) -> BootstrapFailure:
    with pytest.raises(WorkflowFailureError) as caught:
        await bootstrap(env, queue, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == "SliceBootstrapFailed"
    return BootstrapFailure.model_validate(cause.details[0])


async def test_reserved_slice_goes_through_every_phase(time_env, clocked_emu: TpuEmulator):
    request = slice_request()
    async with running_worker(time_env.client, clocked_emu) as worker:
        result = await bootstrap(time_env, worker.task_queue, request)
    assert len(result.vms) == request.expected_vms == 4
    assert [p for p in result.phase_seconds] == ["submit", "assign", "provision", "ready", "health"]
    assert_no_leaks(clocked_emu, frozenset({request.slice_name}))


async def phase_work_duration(env: WorkflowEnvironment, request: SliceRequest) -> timedelta:
    """Server time from the start of the phase child to its failure.

    Measured on the child's own history because the test server may skip time while a
    real-time activity (compensation) runs, which makes the client's clock useless here.
    """
    child = env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
    events = (await child.fetch_history()).events
    return events[-1].event_time.ToDatetime() - events[0].event_time.ToDatetime()


def qr_record(emu: TpuEmulator, slice_name: str) -> dict:
    (record,) = [q for q in emu.state()["queued_resources"] if q["id"] == slice_name]
    return record


def phoned_home(emu: TpuEmulator, slice_name: str) -> list[dict]:
    return [r for r in emu.state()["registrations"] if r.get("qr") == slice_name]


# How long a fulfilled slice's VMs may take to boot and phone home on a busy machine. The
# positive control below waits this long for them, and the zombie check waits as long
# for a witness slice's VMs before it looks for keeper's.
PHONE_HOME_WITHIN_S = 30.0


async def wait_phoned_home(emu: TpuEmulator, slice_name: str, vms: int) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PHONE_HOME_WITHIN_S
    while len(phoned_home(emu, slice_name)) < vms:
        assert loop.time() < deadline, (
            f"{slice_name}: {len(phoned_home(emu, slice_name))} of {vms} VMs phoned home "
            f"within {PHONE_HOME_WITHIN_S:g}s"
        )
        await asyncio.sleep(0.05)


async def create_unowned_qr(
    emu: TpuEmulator, request: SliceRequest, valid_until: timedelta = timedelta(hours=4)
) -> None:
    """The QR as the incident's controller left it: created, then never deleted."""
    from google.cloud import tpu_v2

    from keeper.activities.tpu.cloud import build_queued_resource
    from keeper.domain.tpu.naming import owner_labels, parent
    from keeper.runtime.tpu.client import emulator_client

    client = emulator_client(emu.grpc_target)
    await client.create_queued_resource(
        request=tpu_v2.CreateQueuedResourceRequest(
            parent=parent(request.project, request.zone),
            queued_resource_id=request.slice_name,
            queued_resource=build_queued_resource(
                request, owner_labels("nobody", "none"), valid_until
            ),
        )
    )


async def qr_created(emu: TpuEmulator, slice_name: str, within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not any(q["id"] == slice_name for q in emu.state()["queued_resources"]):
        assert loop.time() < deadline, f"{slice_name}: no QR created within {within:g}s"
        await asyncio.sleep(0.01)


def created_at(emu: TpuEmulator, slice_name: str) -> float:
    return datetime.fromisoformat(qr_record(emu, slice_name)["created_at"]).timestamp()


@pytest.mark.parametrize(
    ("phase", "scenario", "budget"),
    [
        ("assign", Scenario(assign_after=None), "4h"),
        ("provision", Scenario(assign_after=0, active_after=None), "1h"),
        ("ready", Scenario(assign_after=0, active_after=0, vms_without_ip=[1]), "10m"),
        ("health", Scenario(assign_after=0, active_after=0, unhealthy_vms=[2]), "10m"),
    ],
)
async def test_each_phase_deadline_fires_and_the_queued_resource_is_deleted(
    time_env, clocked_emu: TpuEmulator, phase: str, scenario: Scenario, budget: str
):
    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, scenario)
    async with running_worker(time_env.client, clocked_emu) as worker:
        failure = await failed_bootstrap(time_env, worker.task_queue, request)
    assert (failure.phase.value, failure.kind) == (phase, "deadline")
    assert f"{phase} deadline ({budget}) exceeded" in failure.message
    assert failure.compensation is not None
    assert failure.compensation.deleted == [
        f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}"
    ]
    record = qr_record(clocked_emu, request.slice_name)
    assert record["deleted_at"] is not None
    assert_no_leaks(clocked_emu)


async def test_health_deadline_names_the_vms_that_fail(time_env, clocked_emu: TpuEmulator):
    # A short health budget: an unreachable VM costs a real probe timeout in every round.
    request = slice_request(accelerator_type="v4-64", deadlines={"health": "2m"})  # 8 VMs
    clocked_emu.set_scenario(
        request.slice_name,
        Scenario(assign_after=0, active_after=0, unhealthy_vms=[2], unreachable_vms=[5]),
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        failure = await failed_bootstrap(time_env, worker.task_queue, request)
    assert failure.phase.value == "health"
    assert sorted(vm.index for vm in failure.failing_vms) == [2, 5]
    reasons = {vm.index: vm.reason for vm in failure.failing_vms}
    assert reasons[2] == "HTTP 503"
    assert "no answer" in reasons[5]
    assert "2 of 8 VMs not healthy" in failure.message
    assert_no_leaks(clocked_emu)


async def test_incident_reserved_qr_abandoned_at_deadline_never_becomes_zombie_workers(
    time_env, clocked_emu: TpuEmulator
):
    """Seed 000: a reserved QR still waiting at its deadline, fulfilled by GCP 70 min later.

    A witness QR that nobody deletes, created after keeper's with the same fulfilment delay,
    shows when keeper's QR would have produced zombies: once the witness's VMs have phoned
    home, keeper's would have been fulfilled no later, in the same or an earlier pass.
    """
    request = slice_request(accelerator_type="v4-64")
    witness = slice_request(accelerator_type="v4-64")
    fulfil_after = timedelta(hours=4, minutes=70).total_seconds()
    for name in (request.slice_name, witness.slice_name):
        clocked_emu.set_scenario(name, Scenario(assign_after=fulfil_after))
    async with running_worker(time_env.client, clocked_emu) as worker:
        result = asyncio.create_task(failed_bootstrap(time_env, worker.task_queue, request))
        await qr_created(clocked_emu, request.slice_name)
        # Queued for longer than the fulfilment takes, unlike keeper's own backstop.
        await create_unowned_qr(clocked_emu, witness, timedelta(seconds=2 * fulfil_after))
        failure = await result
    assert (failure.phase.value, failure.kind) == ("assign", "deadline")
    # Reported failed at once: within one poll interval of the 4h budget, not hours later.
    took = await phase_work_duration(time_env, request)
    assert timedelta(hours=4) - 2 * request.poll_interval <= took
    assert took <= timedelta(hours=4) + request.poll_interval
    assert qr_record(clocked_emu, request.slice_name)["deleted_at"] is not None
    assert created_at(clocked_emu, witness.slice_name) >= created_at(
        clocked_emu, request.slice_name
    )

    # The moment GCP would have fulfilled the request comes and goes: the witness's VMs
    # boot and phone home; keeper's slice has no node, no VM and no registration.
    due = created_at(clocked_emu, witness.slice_name) + fulfil_after
    clocked_emu.advance(max(due - clocked_emu.clock.now(), 0) + timedelta(hours=1).total_seconds())
    await wait_phoned_home(clocked_emu, witness.slice_name, witness.expected_vms)
    state = clocked_emu.state()
    assert [n for n in state["nodes"] if n["queued_resource_id"] == request.slice_name] == []
    assert [vm for vm in state["vms"] if vm["qr"] == request.slice_name] == []
    assert phoned_home(clocked_emu, request.slice_name) == []
    assert clocked_emu.leaks({witness.slice_name}, include_stopped_vms=True) == []
    clocked_emu.reset()


async def test_incident_replayed_without_keeper_does_produce_zombies(clocked_emu: TpuEmulator):
    """The same QR left alone, as the incident's controller did: the emulator must show the
    zombie workers, or the test above proves nothing."""
    request = slice_request(accelerator_type="v4-64")
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=600))
    await create_unowned_qr(clocked_emu, request)
    clocked_emu.advance(4200)
    await wait_phoned_home(clocked_emu, request.slice_name, request.expected_vms)
    assert len(phoned_home(clocked_emu, request.slice_name)) == 8
    assert clocked_emu.leaks(set()) != []
    clocked_emu.reset()


@pytest.mark.parametrize("state", ["FAILED", "SUSPENDING", "SUSPENDED", "DELETING"])
async def test_terminal_state_ends_the_bootstrap_at_once(
    time_env, clocked_emu: TpuEmulator, state: str
):
    request = slice_request()
    clocked_emu.set_scenario(
        request.slice_name,
        Scenario(
            assign_after=None,
            terminal={"state": state, "after": 90, "message": "stockout in us-central2-b"},
        ),
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        failure = await failed_bootstrap(time_env, worker.task_queue, request)
    took = await phase_work_duration(time_env, request)
    assert (failure.phase.value, failure.kind) == ("assign", "terminal")
    assert f"queued resource is {state}" in failure.message
    if state == "FAILED":
        assert "stockout in us-central2-b" in failure.message
    assert took < timedelta(minutes=5), "a terminal state must not wait for the deadline"
    assert_no_leaks(clocked_emu)


async def test_queued_resource_deleted_behind_our_back_is_terminal(
    time_env, clocked_emu: TpuEmulator
):
    from keeper.runtime.tpu.client import emulator_client

    request = slice_request()
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    client = emulator_client(clocked_emu.grpc_target)
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await time_env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
        )
        await qr_created(clocked_emu, request.slice_name)
        from google.cloud import tpu_v2

        await client.delete_queued_resource(
            request=tpu_v2.DeleteQueuedResourceRequest(
                name=f"projects/keeper-test/locations/us-central2-b/queuedResources/{request.slice_name}",
                force=True,
            )
        )
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result()
    failure = BootstrapFailure.model_validate(caught.value.cause.details[0])
    assert failure.kind == "terminal"
    assert "DELETING" in failure.message or "NOT_FOUND" in failure.message
    assert_no_leaks(clocked_emu)


async def test_on_demand_node_bootstraps_without_a_queue(time_env, clocked_emu: TpuEmulator):
    request = slice_request(capacity=Capacity.ON_DEMAND, accelerator_type="v5litepod-16")
    async with running_worker(time_env.client, clocked_emu) as worker:
        result = await bootstrap(time_env, worker.task_queue, request)
    assert result.queued_resource is None
    assert list(result.phase_seconds) == ["submit", "ready", "health"]
    assert len(result.vms) == 4
    assert clocked_emu.state()["queued_resources"] == []
    assert_no_leaks(clocked_emu, frozenset({request.slice_name}))


async def test_preemptible_node_that_never_gets_ready_is_deleted_at_the_cloud_ready_deadline(
    time_env, clocked_emu: TpuEmulator
):
    request = slice_request(capacity=Capacity.PREEMPTIBLE)
    clocked_emu.set_scenario(request.slice_name, Scenario(active_after=None))
    async with running_worker(time_env.client, clocked_emu) as worker:
        failure = await failed_bootstrap(time_env, worker.task_queue, request)
    assert (failure.phase.value, failure.kind) == ("ready", "deadline")
    assert "ready deadline (10m) exceeded" in failure.message
    assert failure.compensation is not None
    assert failure.compensation.deleted == [
        f"projects/keeper-test/locations/us-central2-b/nodes/{request.slice_name}"
    ]
    assert_no_leaks(clocked_emu)


async def test_history_does_not_grow_with_the_wait(time_env, clocked_emu: TpuEmulator):
    """Events of a bootstrap that waited 10 minutes vs one that waited 4 hours (minus a
    minute, to stay inside the assign budget)."""
    counts = {}
    for label, wait in (("10m", timedelta(minutes=10)), ("4h", timedelta(hours=4, minutes=-1))):
        request = slice_request()
        clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=wait.total_seconds()))
        async with running_worker(time_env.client, clocked_emu) as worker:
            await bootstrap(time_env, worker.task_queue, request)
        parent = time_env.client.get_workflow_handle(bootstrap_workflow_id(request.slice_name))
        child = time_env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        counts[label] = len((await parent.fetch_history()).events) + len(
            (await child.fetch_history()).events
        )
    # The only variation is how many distinct QR states a poll happened to see (CREATING
    # lasts a fraction of a second, and the emulator's clock trails a skipped jump): at most
    # two observations, ~15 events each. Either wait may see more of them; growth with the
    # wait would show as the longer one costing more.
    assert counts["4h"] - counts["10m"] <= 32, counts
    assert counts["4h"] < 200, counts


def test_bad_input_is_rejected_naming_the_field():
    with pytest.raises(ValueError) as caught:
        slice_request(slice_name="Bad_Name")
    assert "slice_name" in str(caught.value)
