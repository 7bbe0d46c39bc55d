"""Faults, clock, scenarios, the control API, operations and the command-line entry point."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.cloud.tpu_v2 import TpuAsyncClient
from google.longrunning import operations_pb2

from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator
from emulators.tpu.testing import (
    PARENT,
    client_for,
    create_qr,
    free_port,
    make_config,
    qr_state,
)

# The emulator and tpu fixtures live there rather than in conftest.py.
pytest_plugins = ("tests.emulator_fixtures",)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("UNAVAILABLE", gexc.ServiceUnavailable),
        ("RESOURCE_EXHAUSTED", gexc.ResourceExhausted),
        ("DEADLINE_EXCEEDED", gexc.DeadlineExceeded),
    ],
)
async def test_injected_faults_surface_as_client_exceptions(
    emulator: TpuEmulator, tpu: TpuAsyncClient, code: str, error: type[Exception]
) -> None:
    await create_qr(tpu, "f")
    emulator.inject_fault("GetQueuedResource", code, count=2)
    for _ in range(2):
        with pytest.raises(error):
            await qr_state(tpu, "f")
    # Answered again once the faults are spent (the QR may have moved on meanwhile on a busy
    # machine: the client's retries of a deadline take time).
    assert await qr_state(tpu, "f") in ("CREATING", "WAITING_FOR_RESOURCES")
    assert emulator.state()["calls"]["GetQueuedResource"] == 3
    assert emulator.state()["faults"] == []


async def test_a_fault_hits_only_its_slice_a_wildcard_hits_every_method_and_a_bad_code_is_refused(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    await create_qr(tpu, "a")
    await create_qr(tpu, "b")
    emulator.inject_fault("*", "RESOURCE_EXHAUSTED", count=1, slice="b")
    assert await qr_state(tpu, "a") == "CREATING"
    with pytest.raises(gexc.ResourceExhausted):
        await qr_state(tpu, "b")
    emulator.inject_fault("*", "UNAVAILABLE", count=5)
    with pytest.raises(gexc.ServiceUnavailable):
        await tpu.list_nodes(parent=PARENT)
    emulator.clear_faults()
    assert await qr_state(tpu, "b") == "CREATING"
    with pytest.raises(ValueError, match="code"):
        emulator.inject_fault("GetNode", "NOT_A_CODE")


async def test_fault_after_the_call_hides_a_create_that_worked(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    # Like a create whose response was lost: the caller sees an error, the QR exists.
    emulator.inject_fault("CreateQueuedResource", "DEADLINE_EXCEEDED", when="after")
    with pytest.raises(gexc.DeadlineExceeded):
        await create_qr(tpu, "lost", request_id="r-1")
    assert await qr_state(tpu, "lost") == "CREATING"
    # The retry with the same request id is answered with the original operation.
    again = await create_qr(tpu, "lost", request_id="r-1")
    assert again.operation.name.startswith(f"{PARENT}/operations/")


async def test_an_operation_can_be_got_listed_cancelled_and_deleted_then_is_not_found(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    op = await create_qr(tpu, "ops")
    ops_client = tpu._client._transport.operations_client
    fetched = await ops_client.get_operation(op.operation.name)
    # Not whether it is done yet: the queued resource leaves CREATING 0.1 s after the create,
    # which a busy machine can let pass before this read.
    assert fetched.name == op.operation.name
    listed = [o.name async for o in await ops_client.list_operations(PARENT, "")]
    assert listed == [op.operation.name]
    await ops_client.cancel_operation(op.operation.name)
    await ops_client.delete_operation(op.operation.name)
    with pytest.raises(gexc.NotFound):
        await ops_client.get_operation(op.operation.name)
    assert emulator.state()["calls"]["GetOperation"] == 2
    assert isinstance(fetched, operations_pb2.Operation)


async def test_clock_moves_forward_only(emulator: TpuEmulator) -> None:
    before = emulator.now()
    after = emulator.advance(3600)
    assert after - before >= timedelta(seconds=3600)
    target = after + timedelta(days=1)
    assert emulator.set_now(target) >= target
    with pytest.raises(ValueError, match="backwards"):
        emulator.set_now(before)
    with pytest.raises(ValueError, match="backwards"):
        emulator.advance(-1)


async def test_reset_forgets_everything(emulator: TpuEmulator, tpu: TpuAsyncClient) -> None:
    emulator.set_scenario("r", Scenario(assign_after=0, active_after=0, ips_after=0))
    await create_qr(tpu, "r")
    emulator.inject_fault("GetNode", "UNAVAILABLE")
    emulator.reset()
    state = emulator.state()
    assert state["queued_resources"] == state["nodes"] == state["vms"] == []
    assert state["calls"] == {} and state["faults"] == []
    assert "r" not in state["scenarios"]["slices"]
    with pytest.raises(gexc.NotFound):
        await qr_state(tpu, "r")


async def test_the_control_api_drives_scenarios_faults_and_the_clock_and_names_bad_fields(
    emulator: TpuEmulator, tpu: TpuAsyncClient
) -> None:
    async with httpx.AsyncClient(base_url=emulator.control_url, timeout=5) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}

        bad = await http.put("/scenarios/s1", json={"assign_after": "soon"})
        assert bad.status_code == 400
        assert "assign_after" in bad.json()["error"] and bad.json()["fields"] == ["assign_after"]
        typo = await http.put("/scenarios/s1", json={"asign_after": 3})
        assert typo.status_code == 400 and "asign_after" in typo.json()["error"]
        nested = await http.put("/scenarios/s1", json={"terminal": {"state": "GONE"}})
        assert nested.status_code == 400 and nested.json()["fields"] == ["terminal.state"]
        not_json = await http.put("/scenarios/s1", content=b"{", headers={"content-type": "x"})
        assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]

        ok = await http.put("/scenarios/s1", json={"assign_after": 4200, "vm_count": 1})
        assert ok.status_code == 200
        assert emulator.scenarios.get("s1").assign_after == 4200
        default = await http.put("/scenarios/_default", json={"delete_duration": 0})
        assert default.status_code == 200 and emulator.scenarios.default.delete_duration == 0

        bad_fault = await http.post("/faults", json={"method": "GetNode", "code": "OOPS"})
        assert bad_fault.status_code == 400 and bad_fault.json()["fields"] == ["code"]
        fault = await http.post(
            "/faults", json={"method": "GetQueuedResource", "code": "UNAVAILABLE", "count": 1}
        )
        assert fault.status_code == 201
        await create_qr(tpu, "s1")
        with pytest.raises(gexc.ServiceUnavailable):
            await qr_state(tpu, "s1")
        await http.post("/faults", json={"method": "*", "code": "UNAVAILABLE", "count": 9})
        assert (await http.delete("/faults")).status_code == 200
        assert await qr_state(tpu, "s1") == "CREATING"

        bad_clock = await http.post("/clock/advance", json={"seconds": -5})
        assert bad_clock.status_code == 400 and bad_clock.json()["fields"] == ["seconds"]
        moved = await http.post("/clock/advance", json={"seconds": 1})
        assert moved.status_code == 200
        assert await qr_state(tpu, "s1") == "WAITING_FOR_RESOURCES"

        state = (await http.get("/state")).json()
        assert [qr["id"] for qr in state["queued_resources"]] == ["s1"]
        assert state["calls"]["GetQueuedResource"] == 3
        leaks = (await http.get("/leaks")).json()["leaks"]
        assert leaks == ["queued_resource/s1 (WAITING_FOR_RESOURCES)"]
        assert (await http.get("/leaks", params={"handed_over": "s1"})).json()["leaks"] == []

        manual = {"qr": "s1", "node": "s1", "vm_index": 0, "ip": "127.0.0.1"}
        assert (await http.post("/register", json=manual)).status_code == 200
        assert (await http.post("/register", json={"node": "x"})).status_code == 400

        assert (await http.post("/reset")).status_code == 200
        assert (await http.get("/state")).json()["queued_resources"] == []


async def test_scenario_file_sets_default_and_per_slice(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.yaml"
    path.write_text(
        "default:\n  assign_after: 50\nslices:\n  quick:\n    assign_after: 0\n"
        "    terminal: {state: SUSPENDING, after: 5}\n"
    )
    emu = TpuEmulator(make_config(scenario_file=str(path)))
    await emu.start()
    client, channel = client_for(emu)
    try:
        await create_qr(client, "quick")
        await create_qr(client, "slow")
        emu.advance(0.5)
        assert await qr_state(client, "quick") == "PROVISIONING"
        assert await qr_state(client, "slow") == "WAITING_FOR_RESOURCES"
        emu.advance(10)
        assert await qr_state(client, "quick") == "SUSPENDING"
    finally:
        await channel.close()
        await emu.stop()

    path.write_text("slices:\n  x:\n    assign_afer: 3\n")
    with pytest.raises(ValueError, match="assign_afer"):
        TpuEmulator(EmulatorConfig(scenario_file=str(path)))


async def test_command_line_entry_point_runs_until_sigterm(tmp_path: Path) -> None:
    grpc_port, control_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "emulators.tpu",
        "--grpc-port", str(grpc_port), "--control-port", str(control_port),
        "--ip-prefix", "127.27", "--vm-health-port", str(free_port()),
        cwd=REPO, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(timeout=1) as http:
            for _ in range(100):
                try:
                    if (await http.get(f"http://127.0.0.1:{control_port}/healthz")).is_success:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("emulator did not come up")
        client, channel = client_for(f"127.0.0.1:{grpc_port}")
        await create_qr(client, "cli")
        assert await qr_state(client, "cli") == "CREATING"
        await channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=10)
    assert proc.returncode == 0, stderr.decode()
    log = stderr.decode()
    assert "queued resource cli: created (CREATING)" in log
    assert "stopping" in log


def test_demo_scenario_file_loads_from_any_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    emu = TpuEmulator(EmulatorConfig(scenario_file=Path("emulators/scenarios/demo.yaml")))
    assert emu.scenarios.get("demo-late").assign_after == 4200
    assert emu.scenarios.get("anything-else").assign_after == 5
