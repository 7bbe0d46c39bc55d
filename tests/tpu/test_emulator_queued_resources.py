"""Queued-resource lifecycle of the TPU emulator, driven by the real TpuAsyncClient."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.cloud.tpu_v2 import TpuAsyncClient
from google.cloud.tpu_v2.types import cloud_tpu

from emulators.tpu import Scenario, TpuEmulator
from emulators.tpu.state import EXPIRED_MESSAGE
from emulators.tpu.testing import (
    PARENT,
    STEPPED,
    TEST_IP_PREFIX,
    create_qr,
    node_name,
    qr_name,
    qr_state,
    wait_op,
    wait_until,
)

# The emulator and tpu fixtures live there rather than in conftest.py.
pytest_plugins = ("tests.emulator_fixtures",)


def _qr(emu: TpuEmulator, qr_id: str) -> dict:
    matches = [qr for qr in emu.state()["queued_resources"] if qr["id"] == qr_id]
    assert matches, f"no record of {qr_id}"
    return matches[-1]


def _states(record: dict) -> list[str]:
    return [h["state"] for h in record["history"]]


async def test_a_queued_resource_turns_active_and_its_labelled_nodes_vms_get_ips_and_phone_home(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    labels = {"keeper-owner": "tpu-bootstrap-s1", "keeper-managed": "true"}
    op = await create_qr(tpu, "s1", request_id="req-1", labels=labels)
    assert await qr_state(tpu, "s1") == "CREATING"
    emulator.advance(0.2)
    created = await wait_op(op)
    assert created.name == qr_name("s1")
    assert created.state.state.name == "WAITING_FOR_RESOURCES"

    emulator.advance(10)
    assert await qr_state(tpu, "s1") == "PROVISIONING"
    node = await tpu.get_node(name=node_name("s1"), timeout=5)
    assert node.state.name == "CREATING"
    assert dict(node.labels) == labels
    assert node.queued_resource == qr_name("s1")
    # v4-16 has two hosts; endpoints exist from the start but carry no IP yet.
    assert [(e.ip_address, e.port) for e in node.network_endpoints] == [
        ("", emulator.config.vm_health_port)
    ] * 2

    emulator.advance(10)
    assert await qr_state(tpu, "s1") == "ACTIVE"
    node = await tpu.get_node(name=node_name("s1"), timeout=5)
    assert node.state.name == "READY"
    assert all(e.ip_address == "" for e in node.network_endpoints)

    emulator.advance(5)
    node = await tpu.get_node(name=node_name("s1"), timeout=5)
    ips = [e.ip_address for e in node.network_endpoints]
    assert len(set(ips)) == 2
    assert all(ip.startswith(TEST_IP_PREFIX + ".") for ip in ips)

    await wait_until(
        lambda: all(vm["phoned_home_at"] for vm in emulator.state()["vms"]), what="phone-home"
    )
    state = emulator.state()
    regs = sorted(state["registrations"], key=lambda r: r["vm_index"])
    assert [(r["qr"], r["node"], r["vm_index"], r["ip"]) for r in regs] == [
        ("s1", "s1", 0, ips[0]),
        ("s1", "s1", 1, ips[1]),
    ]
    assert all(r["source_ip"] == r["ip"] for r in regs), "must register from the VM address"

    record = _qr(emulator, "s1")
    assert _states(record) == ["CREATING", "WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"]
    assert record["labels"] == labels
    assert record["node_ids"] == ["s1"]
    assert state["calls"]["CreateQueuedResource"] == 1
    assert state["calls"]["GetQueuedResource"] == 3
    assert state["calls"]["GetNode"] == 3
    assert emulator.leaks() == ["queued_resource/s1 (ACTIVE)", "node/s1 (READY)"] + [
        f"vm/s1/{i} phoned home from {ips[i]}" for i in range(2)
    ]
    assert emulator.leaks({"s1"}) == []


async def test_history_is_stamped_with_due_times_after_a_big_jump(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    await create_qr(tpu, "jump")
    emulator.advance(3600)
    assert await qr_state(tpu, "jump") == "ACTIVE"
    record = _qr(emulator, "jump")
    at = {h["state"]: datetime.fromisoformat(h["at"]) for h in record["history"]}
    created = datetime.fromisoformat(record["created_at"])
    assert (at["PROVISIONING"] - created).total_seconds() == pytest.approx(10, abs=0.01)
    assert (at["ACTIVE"] - at["PROVISIONING"]).total_seconds() == pytest.approx(10, abs=0.01)


async def test_vms_boot_and_phone_home_with_nobody_reading(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    await create_qr(tpu, "quiet")
    # Move the clock without evaluating anything; only the background ticker can act now.
    emulator.clock.advance(30)
    await wait_until(lambda: len(emulator.world.registrations) == 2, what="ticker-driven boot")
    assert [h.state for h in emulator.world.qrs[qr_name("quiet")].history][-1] == "ACTIVE"


async def test_second_create_is_already_exists_even_while_deleting(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    await create_qr(tpu, "dup")
    with pytest.raises(gexc.AlreadyExists):
        await create_qr(tpu, "dup")
    delete = await tpu.delete_queued_resource(
        request=cloud_tpu.DeleteQueuedResourceRequest(name=qr_name("dup"), force=True)
    )
    assert await qr_state(tpu, "dup") == "DELETING"
    with pytest.raises(gexc.AlreadyExists):
        await create_qr(tpu, "dup")
    emulator.advance(STEPPED.delete_duration)
    await wait_op(delete)
    with pytest.raises(gexc.NotFound):
        await qr_state(tpu, "dup")
    # Once gone, the name is free again; the old record stays as a tombstone.
    await create_qr(tpu, "dup")
    records = [qr for qr in emulator.state()["queued_resources"] if qr["id"] == "dup"]
    assert [r["state"] for r in records] == ["DELETED", "CREATING"]
    assert records[0]["deleted_at"] is not None


async def test_same_request_id_returns_the_same_operation(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    first = await create_qr(tpu, "idem", request_id="11111111-2222")
    again = await create_qr(tpu, "idem", request_id="11111111-2222")
    assert again.operation.name == first.operation.name
    with pytest.raises(gexc.AlreadyExists):
        await create_qr(tpu, "idem", request_id="another-request")
    assert len(emulator.state()["queued_resources"]) == 1


async def _active_slice_with_vms(emulator: TpuEmulator, tpu: TpuAsyncClient, qr_id: str) -> list:
    await create_qr(tpu, qr_id)
    emulator.advance(25)
    node = await tpu.get_node(name=node_name(qr_id), timeout=5)
    await wait_until(
        lambda: sum(1 for vm in emulator.state()["vms"] if vm["phoned_home_at"]) == 2,
        what="VMs phoned home",
    )
    return [e.ip_address for e in node.network_endpoints]


async def test_force_delete_wipes_nodes_and_vms_then_not_found(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    ips = await _active_slice_with_vms(emulator, tpu, "gone")
    port = emulator.config.vm_health_port
    async with httpx.AsyncClient(timeout=1.0) as http:
        assert (await http.get(f"http://{ips[0]}:{port}/healthz")).status_code == 200

        op = await tpu.delete_queued_resource(
            request=cloud_tpu.DeleteQueuedResourceRequest(
                name=qr_name("gone"), force=True, request_id="del-1"
            ),
            timeout=5,
        )
        assert await qr_state(tpu, "gone") == "DELETING"
        # Nodes go at once, and with them the VMs.
        with pytest.raises(gexc.NotFound):
            await tpu.get_node(name=node_name("gone"), timeout=5)
        for ip in ips:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"http://{ip}:{port}/healthz")
    # Retrying the delete with the same request id is the same operation.
    retry = await tpu.delete_queued_resource(
        request=cloud_tpu.DeleteQueuedResourceRequest(
            name=qr_name("gone"), force=True, request_id="del-1"
        )
    )
    assert retry.operation.name == op.operation.name
    assert not await op.done()
    emulator.advance(STEPPED.delete_duration)
    await wait_op(op)
    with pytest.raises(gexc.NotFound):
        await qr_state(tpu, "gone")
    with pytest.raises(gexc.NotFound):
        await tpu.delete_queued_resource(
            request=cloud_tpu.DeleteQueuedResourceRequest(name=qr_name("gone"), force=True)
        )

    state = emulator.state()
    (node,) = state["nodes"]
    assert node["state"] == "DELETED" and node["deleted_at"] is not None
    assert _states(node) == ["CREATING", "READY", "DELETING", "DELETED"]
    assert all(vm["stopped_at"] and vm["health"] == "down" for vm in state["vms"])
    assert emulator.leaks() == []
    # The registrations did happen, and stay visible to the strict check.
    assert len(emulator.leaks(include_stopped_vms=True)) == 2


async def test_delete_of_a_deleting_qr_completes_when_it_is_gone(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    await create_qr(tpu, "twice")
    first = await tpu.delete_queued_resource(
        request=cloud_tpu.DeleteQueuedResourceRequest(name=qr_name("twice"), force=True)
    )
    second = await tpu.delete_queued_resource(
        request=cloud_tpu.DeleteQueuedResourceRequest(name=qr_name("twice"), force=True)
    )
    assert second.operation.name != first.operation.name
    assert not await second.done()
    emulator.advance(STEPPED.delete_duration)
    await wait_op(first)
    await wait_op(second)


async def test_non_force_delete_needs_force_while_nodes_exist(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    await _active_slice_with_vms(emulator, tpu, "busy")
    with pytest.raises(gexc.FailedPrecondition):
        await tpu.delete_queued_resource(name=qr_name("busy"), timeout=5)
    assert await qr_state(tpu, "busy") == "ACTIVE"

    # Waiting for capacity there are no nodes, so a plain delete works.
    await create_qr(tpu, "queued")
    emulator.advance(0.2)
    assert await qr_state(tpu, "queued") == "WAITING_FOR_RESOURCES"
    op = await tpu.delete_queued_resource(name=qr_name("queued"), timeout=5)
    emulator.advance(STEPPED.delete_duration)
    await wait_op(op)
    with pytest.raises(gexc.NotFound):
        await qr_state(tpu, "queued")


async def test_valid_until_duration_expires_into_failed(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    emulator.set_scenario("late", Scenario(assign_after=100))
    await create_qr(tpu, "late", valid_until_seconds=30)
    emulator.advance(29)
    assert await qr_state(tpu, "late") == "WAITING_FOR_RESOURCES"
    emulator.advance(2)
    qr = await tpu.get_queued_resource(name=qr_name("late"), timeout=5)
    assert qr.state.state.name == "FAILED"
    assert qr.state.failed_data.error.message == EXPIRED_MESSAGE
    # Expired requests stay (and are never fulfilled) until deleted.
    emulator.advance(500)
    assert await qr_state(tpu, "late") == "FAILED"
    assert emulator.state()["nodes"] == []
    assert _qr(emulator, "late")["error"]["message"] == EXPIRED_MESSAGE


async def test_terminal_failed_scenario_carries_the_error(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    terminal = {
        "state": "FAILED",
        "after": 5,
        "message": "stockout in zone",
        "code": "RESOURCE_EXHAUSTED",
    }
    emulator.set_scenario(
        "doomed", Scenario.model_validate({**STEPPED.model_dump(), "terminal": terminal})
    )
    await create_qr(tpu, "doomed")
    emulator.advance(4)
    assert await qr_state(tpu, "doomed") == "WAITING_FOR_RESOURCES"
    emulator.advance(100)
    qr = await tpu.get_queued_resource(name=qr_name("doomed"), timeout=5)
    assert qr.state.state.name == "FAILED"
    assert qr.state.failed_data.error.message == "stockout in zone"
    assert qr.state.failed_data.error.code == 8
    assert qr.state.state_initiator.name == "SERVICE"
    assert emulator.state()["nodes"] == []


async def test_terminal_suspended_after_active_takes_the_nodes(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    emulator.set_scenario(
        "spot",
        Scenario.model_validate(
            {**STEPPED.model_dump(), "terminal": {"state": "SUSPENDED", "after": 40}}
        ),
    )
    await create_qr(tpu, "spot")
    emulator.advance(30)
    assert await qr_state(tpu, "spot") == "ACTIVE"
    emulator.advance(15)
    assert await qr_state(tpu, "spot") == "SUSPENDED"
    with pytest.raises(gexc.NotFound):
        await tpu.get_node(name=node_name("spot"), timeout=5)
    # SUSPENDED may be deleted without force.
    op = await tpu.delete_queued_resource(name=qr_name("spot"), timeout=5)
    emulator.advance(STEPPED.delete_duration)
    await wait_op(op)


async def test_late_fulfilment_never_happens_after_deletion(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    # The incident: a reserved QR sat waiting, its owner gave up at 10 minutes, and GCP
    # fulfilled it 70 minutes later. Deleted in time, it must never produce a node or VM.
    slow = Scenario(assign_after=4200, active_after=60, ips_after=5, delete_duration=3)
    emulator.set_scenario("abandoned", slow)
    emulator.set_scenario("deleted", slow)
    await create_qr(tpu, "abandoned")
    await create_qr(tpu, "deleted")
    emulator.advance(600)
    assert await qr_state(tpu, "deleted") == "WAITING_FOR_RESOURCES"
    op = await tpu.delete_queued_resource(
        request=cloud_tpu.DeleteQueuedResourceRequest(name=qr_name("deleted"), force=True)
    )
    emulator.advance(3)
    await wait_op(op)

    emulator.advance(4200)
    # The abandoned one does get fulfilled and its VMs phone home as zombies...
    await wait_until(
        lambda: len(emulator.state()["registrations"]) == 2, what="zombie registrations"
    )
    state = emulator.state()
    assert {reg["qr"] for reg in state["registrations"]} == {"abandoned"}
    assert {node["id"] for node in state["nodes"]} == {"abandoned"}
    assert {vm["node"] for vm in state["vms"]} == {"abandoned"}
    assert "queued_resource/abandoned (ACTIVE)" in emulator.leaks()
    assert any(leak.startswith("vm/abandoned/") for leak in emulator.leaks())
    # ...while the deleted one never went past waiting.
    deleted = _qr(emulator, "deleted")
    assert _states(deleted) == ["CREATING", "WAITING_FOR_RESOURCES", "DELETING", "DELETED"]
    assert deleted["node_ids"] == ["deleted"]
    with pytest.raises(gexc.NotFound):
        await tpu.get_node(name=node_name("deleted"), timeout=5)
    assert not any("deleted" in leak for leak in emulator.leaks())


async def test_queued_resources_and_nodes_are_listed_in_creation_order_by_page_and_per_location(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    for qr_id in ("a", "b", "c"):
        await create_qr(tpu, qr_id)
    emulator.advance(20)
    pager = await tpu.list_queued_resources(parent=PARENT, timeout=5)
    names = [qr.name async for qr in pager]
    assert names == [qr_name(i) for i in ("a", "b", "c")]
    page = await tpu.list_queued_resources(
        request=cloud_tpu.ListQueuedResourcesRequest(parent=PARENT, page_size=2)
    )
    assert len(page._response.queued_resources) == 2 and page._response.next_page_token
    nodes = [node.name async for node in await tpu.list_nodes(parent=PARENT)]
    assert nodes == [node_name(i) for i in ("a", "b", "c")]
    other = await tpu.list_queued_resources(parent="projects/proj/locations/elsewhere")
    assert [qr async for qr in other] == []


async def test_a_multislice_request_makes_a_node_per_slice_and_numbers_vms_slice_wide(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    labels = {"keeper-owner": "tpu-bootstrap-ms"}
    await create_qr(
        tpu, "ms", multislice=("ms", 3), labels=labels, metadata={"startup-script": "x"}
    )
    emulator.advance(25)
    nodes = [node async for node in await tpu.list_nodes(parent=PARENT)]
    assert [n.name for n in nodes] == [node_name(f"ms-{i}") for i in range(3)]
    assert all(n.multislice_node and dict(n.labels) == labels for n in nodes)
    assert all(n.metadata["startup-script"] == "x" for n in nodes)
    vms = emulator.state()["vms"]
    assert [(vm["node"], vm["index"]) for vm in vms] == [
        (f"ms-{n}", n * 2 + i) for n in range(3) for i in range(2)
    ]
    assert _qr(emulator, "ms")["node_ids"] == ["ms-0", "ms-1", "ms-2"]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"qr_id": "bad/id"}, "queued_resource_id"),
        ({"qr_id": "ok", "accelerator_type": "v9-8"}, "accelerator_type"),
        ({"qr_id": "ok", "accelerator_type": ""}, "accelerator_type"),
        ({"qr_id": "ok", "metadata": {"keeper-health-port": "http"}}, "keeper-health-port"),
    ],
)
async def test_a_create_with_a_bad_argument_is_invalid_naming_it(
    tpu: TpuAsyncClient, kwargs: dict, fragment: str
) -> None:
    with pytest.raises(gexc.InvalidArgument, match=fragment):
        await create_qr(tpu, **kwargs)


async def test_missing_node_spec_is_invalid(tpu: TpuAsyncClient) -> None:
    request = cloud_tpu.CreateQueuedResourceRequest(
        parent=PARENT, queued_resource_id="empty", queued_resource=cloud_tpu.QueuedResource()
    )
    with pytest.raises(gexc.InvalidArgument, match="node_spec"):
        await tpu.create_queued_resource(request=request, timeout=5)
