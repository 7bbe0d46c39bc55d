"""Plain nodes and the simulated VM fleet: health endpoints, phone-home, addresses."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.cloud.tpu_v2 import TpuAsyncClient

from emulators.tpu import Scenario, TpuEmulator
from emulators.tpu.testing import (
    PARENT,
    STEPPED,
    client_for,
    create_qr,
    free_port,
    make_config,
    node_body,
    node_name,
    wait_op,
    wait_until,
)

# The emulator and tpu fixtures live there rather than in conftest.py.
pytest_plugins = ("tests.emulator_fixtures",)


def _phoned_home(emu: TpuEmulator) -> int:
    return sum(1 for vm in emu.state()["vms"] if vm["phoned_home_at"])


async def test_a_vm_answers_health_as_its_scenario_says_and_a_changed_scenario_applies_at_once(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    emulator.set_scenario(
        "mixed",
        Scenario(
            assign_after=0,
            active_after=0,
            ips_after=0,
            vm_count=4,
            unhealthy_vms=[1],
            unreachable_vms=[2],
            vms_without_ip=[3],
        ),
    )
    await create_qr(tpu, "mixed")
    await wait_until(lambda: _phoned_home(emulator) == 3, what="three VMs registered")
    node = await tpu.get_node(name=node_name("mixed"), timeout=5)
    ips = [e.ip_address for e in node.network_endpoints]
    assert ips[3] == "" and all(ips[:3])
    port = emulator.config.vm_health_port
    async with httpx.AsyncClient(timeout=0.3) as http:
        ok = await http.get(f"http://{ips[0]}:{port}/healthz")
        assert (ok.status_code, ok.json()) == (200, {"status": "ok"})
        assert (await http.get(f"http://{ips[1]}:{port}/healthz")).status_code == 503
        started = asyncio.get_running_loop().time()
        with pytest.raises(httpx.ReadTimeout):
            await http.get(f"http://{ips[2]}:{port}/healthz")
        # Bounded by the client's timeout, not by a refusal.
        assert asyncio.get_running_loop().time() - started >= 0.25
        assert (await http.get(f"http://{ips[0]}:{port}/other")).status_code == 404
    health = [vm["health"] for vm in emulator.state()["vms"]]
    assert health == ["ok", "unhealthy", "unreachable", "down"]

    # Scenarios are read live: the demo can break a VM of a running slice.
    emulator.set_scenario("mixed", Scenario(vm_count=4, unhealthy_vms=[0]))
    async with httpx.AsyncClient(timeout=0.3) as http:
        assert (await http.get(f"http://{ips[0]}:{port}/healthz")).status_code == 503


async def test_keep_alive_connections_serve_several_probes(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    emulator.set_scenario("ka", Scenario(assign_after=0, active_after=0, ips_after=0))
    await create_qr(tpu, "ka")
    await wait_until(lambda: _phoned_home(emulator) == 2, what="boot")
    ip = emulator.state()["vms"][0]["ip"]
    reader, writer = await asyncio.open_connection(ip, emulator.config.vm_health_port)
    for _ in range(3):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert await reader.readexactly(16) == b'{"status": "ok"}'
    writer.close()


async def test_a_vm_serves_health_on_its_metadata_port_only_after_health_after(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    port = free_port()
    emulator.set_scenario(
        "meta", Scenario(assign_after=0, active_after=0, ips_after=0, health_after=30)
    )
    await create_qr(tpu, "meta", metadata={"keeper-health-port": str(port)})
    node = await tpu.get_node(name=node_name("meta"), timeout=5)
    assert {e.port for e in node.network_endpoints} == {port}
    ip = node.network_endpoints[0].ip_address
    async with httpx.AsyncClient(timeout=0.5) as http:
        # Has an IP but is still booting: nothing listens yet.
        with pytest.raises(httpx.ConnectError):
            await http.get(f"http://{ip}:{port}/healthz")
        assert emulator.state()["vms"][0]["booted_at"] is None
        emulator.advance(30)
        await wait_until(lambda: _phoned_home(emulator) == 2, what="boot after health_after")
        assert (await http.get(f"http://{ip}:{port}/healthz")).status_code == 200


async def test_phone_home_can_be_switched_off(emulator: TpuEmulator, tpu: TpuAsyncClient) -> None:
    emulator.set_scenario(
        "silent", Scenario(assign_after=0, active_after=0, ips_after=0, phone_home=False)
    )
    await create_qr(tpu, "silent")
    # A boot ends after its phone-home: once none is left running, none can register later.
    await wait_until(
        lambda: (
            all(vm["booted_at"] for vm in emulator.state()["vms"]) and emulator.fleet.booting() == 0
        ),
        what="VMs booted",
    )
    state = emulator.state()
    assert len(state["vms"]) == 2
    assert state["registrations"] == []
    assert all(vm["phoned_home_at"] is None for vm in state["vms"])


async def test_a_vm_phones_home_from_its_own_address_to_an_external_registration_url() -> None:
    received: list[tuple[dict, str]] = []

    from aiohttp import web

    async def register(request: web.Request) -> web.Response:
        received.append((await request.json(), request.remote or ""))
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/workers", register)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fast = Scenario(assign_after=0, active_after=0, ips_after=0, vm_count=1)
    emu = TpuEmulator(
        make_config(registration_url=f"http://127.0.0.1:{port}/workers", default_scenario=fast)
    )
    await emu.start()
    client, channel = client_for(emu)
    try:
        await create_qr(client, "ext")
        await wait_until(lambda: len(received) == 1, what="external registration")
        payload, source = received[0]
        assert payload == {"qr": "ext", "node": "ext", "vm_index": 0, "ip": source}
        await wait_until(lambda: _phoned_home(emu) == 1, what="phoned_home_at recorded")
        assert emu.state()["registrations"] == []
    finally:
        await channel.close()
        await emu.stop()
        await runner.cleanup()


async def test_a_node_without_a_queued_resource_boots_phones_home_and_is_deleted_leaving_nothing(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    labels = {"keeper-owner": "someone"}
    op = await tpu.create_node(
        parent=PARENT, node_id="plain", node=node_body("v4-8", labels=labels), timeout=5
    )
    node = await tpu.get_node(name=node_name("plain"), timeout=5)
    assert node.state.name == "CREATING" and node.queued_resource == ""
    with pytest.raises(gexc.AlreadyExists):
        await tpu.create_node(parent=PARENT, node_id="plain", node=node_body("v4-8"))
    emulator.advance(STEPPED.active_after)
    ready = await wait_op(op)
    assert ready.state.name == "READY" and dict(ready.labels) == labels
    assert [e.ip_address for e in ready.network_endpoints] == [""]
    emulator.advance(STEPPED.ips_after)
    node = await tpu.get_node(name=node_name("plain"), timeout=5)
    assert node.network_endpoints[0].ip_address
    await wait_until(lambda: _phoned_home(emulator) == 1, what="plain VM phoned home")
    assert emulator.state()["registrations"][0]["qr"] is None

    delete = await tpu.delete_node(name=node_name("plain"), timeout=5)
    node = await tpu.get_node(name=node_name("plain"), timeout=5)
    assert node.state.name == "DELETING"
    assert emulator.state()["vms"][0]["health"] == "down"
    emulator.advance(STEPPED.delete_duration)
    await wait_op(delete)
    with pytest.raises(gexc.NotFound):
        await tpu.get_node(name=node_name("plain"), timeout=5)
    (record,) = emulator.state()["nodes"]
    assert [h["state"] for h in record["history"]] == ["CREATING", "READY", "DELETING", "DELETED"]
    assert emulator.leaks() == []


async def test_node_deleted_before_ready_fails_its_create_operation(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    op = await tpu.create_node(parent=PARENT, node_id="early", node=node_body("v4-8"))
    await tpu.delete_node(name=node_name("early"))
    # The async operation client reports operation errors as a plain GoogleAPICallError.
    with pytest.raises(gexc.GoogleAPICallError, match="deleted before it became ready"):
        await wait_op(op)
    assert op.operation.error.code == 10  # ABORTED


async def test_two_emulators_never_share_vm_addresses() -> None:
    fast = Scenario(assign_after=0, active_after=0, ips_after=0, vm_count=3, phone_home=False)
    emus = [
        TpuEmulator(make_config(ip_prefix=prefix, default_scenario=fast))
        for prefix in ("127.29", "127.28", "127.29")
    ]
    for emu in emus:
        await emu.start()
    try:
        for emu in emus:
            client, channel = client_for(emu)
            await create_qr(client, "same-id")
            await channel.close()
        addresses = [vm["ip"] for emu in emus for vm in emu.state()["vms"]]
        assert len(addresses) == 9 and len(set(addresses)) == 9
        assert all(ip.startswith("127.28.") for ip in addresses[3:6])
        assert not any(ip.endswith((".0", ".255")) for ip in addresses)
    finally:
        for emu in emus:
            await emu.stop()


async def test_stop_closes_every_vm() -> None:
    fast = Scenario(assign_after=0, active_after=0, ips_after=0, vm_count=2)
    emu = TpuEmulator(make_config(default_scenario=fast))
    await emu.start()
    client, channel = client_for(emu)
    await create_qr(client, "stopme")
    await wait_until(lambda: _phoned_home(emu) == 2, what="boot")
    ips = [vm["ip"] for vm in emu.state()["vms"]]
    await channel.close()
    await emu.stop()
    async with httpx.AsyncClient(timeout=0.5) as http:
        for ip in ips:
            with pytest.raises(httpx.ConnectError):
                await http.get(f"http://{ip}:{emu.config.vm_health_port}/healthz")


async def test_a_512_vm_slice_boots_phones_home_and_answers_quickly(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    emulator.set_scenario(
        "big", Scenario(assign_after=0, active_after=0, ips_after=0, unhealthy_vms=[7])
    )
    started = asyncio.get_running_loop().time()
    await create_qr(tpu, "big", accelerator_type="v4-4096")
    await wait_until(lambda: _phoned_home(emulator) == 512, limit=15, what="512 VMs")
    node = await tpu.get_node(name=node_name("big"), timeout=5)
    assert len(node.network_endpoints) == 512
    port = emulator.config.vm_health_port

    async def probe(ip: str) -> bytes:
        reader, writer = await asyncio.open_connection(ip, port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: vm\r\nConnection: close\r\n\r\n")
        status = await reader.readline()
        writer.close()
        return status.split(b" ")[1]

    codes = await asyncio.gather(*(probe(e.ip_address) for e in node.network_endpoints))
    assert codes.count(b"200") == 511 and codes[7] == b"503"
    assert asyncio.get_running_loop().time() - started < 10
