"""`keeper tpu` tells a slice's real life: an unknown name is an error, a failed or cancelled
phase reads as such with what compensation really did, a live slice is never bootstrapped
over, health failures name their VMs, and a log gets one line per change of state."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapFailure, BootstrapResult, BootstrapStatus
from keeper.domain.tpu.naming import (
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.tpu.phases import Phase
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.e2e_support import REPO, wait_for_phase, write_config
from tests.harness import (
    RestartableServer,
    assert_no_leaks,
    running_worker,
    slice_request,
)

pytestmark = pytest.mark.e2e
RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"

STOCKOUT = Scenario(
    assign_after=None,
    terminal={"state": "FAILED", "after": 0.5, "message": "no more capacity in zone"},
)


async def keeper(config: Path, *args: str, module: str = "keeper.cli.main") -> tuple[int, str, str]:
    """The CLI as a user runs it, with stdout and stderr captured (not a terminal); module
    "dev" runs the checkout's `keeper-dev`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, "--config", str(config), *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


def followed(err: str, slice_name: str) -> list[str]:
    """The lines a follow off a terminal wrote about the slice, without their stamps; every
    one of them is stamped with the time it was seen."""
    lines = []
    for line in err.splitlines():
        stamp, _, text = line.partition(" ")
        if text.startswith(f"{slice_name}: "):
            assert re.fullmatch(RFC3339, stamp), line
            lines.append(text)
    return lines


async def following(
    config: Path, marker: str, *args: str
) -> Coroutine[Any, Any, tuple[int, str, str]]:
    """Starts the CLI and returns once its stderr has a line with `marker` (a live view
    following a workflow); then await the result for (exit code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config), *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    seen: list[bytes] = []
    while not seen or marker.encode() not in seen[-1]:
        line = await asyncio.wait_for(process.stderr.readline(), 60)
        assert line, f"exited before {marker!r}: {b''.join(seen).decode()}"
        seen.append(line)

    async def rest() -> tuple[int, str, str]:
        out, err = await asyncio.wait_for(process.communicate(), 120)
        return process.returncode or 0, out.decode(), (b"".join(seen) + err).decode()

    return rest()


def _names() -> tuple[str, str]:
    return f"keeper-truth-{uuid.uuid4().hex[:6]}", f"tr-{uuid.uuid4().hex[:6]}"


async def test_delete_of_an_unknown_slice_is_refused_and_starts_nothing(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    code, out, err = await keeper(config, "tpu", "delete", name)
    assert code == 1, err
    assert f"no slice named {name}" in err
    assert "keeper tpu list" in err
    assert "already gone" not in err + out
    code, out, err = await keeper(config, "tpu", "delete", name, "--json")
    assert code == 1, err
    error = json.loads(out)["error"]
    assert error["slice"] == name and "keeper tpu list" in error["hint"]
    with pytest.raises(RPCError) as raised:
        await dev_env.client.get_workflow_handle(teardown_workflow_id(name)).describe()
    assert raised.value.status is RPCStatusCode.NOT_FOUND
    # The same for status and cancel: an unknown name is an error, not a usage problem.
    for command in ("status", "cancel"):
        code, _, err = await keeper(config, "tpu", command, name)
        assert code == 1 and f"no slice named {name}" in err, (command, err)


async def test_list_hides_the_slices_that_are_over_unless_all(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, running = _names()
    ended = f"{running}-ended"
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    # Bootstraps no worker runs: one still running, one terminated (over).
    started = {
        name: await dev_env.client.start_workflow(
            "TpuSliceBootstrap", "never read", id=bootstrap_workflow_id(name),
            task_queue=f"nobody-polls-{queue}",
        )
        for name in (running, ended)
    }  # fmt: skip
    await started[ended].terminate(reason="over")
    try:
        # Visibility catches up on its own time; the CLI reads it once it has.
        wanted = {started[running].id: "Running", started[ended].id: "Terminated"}
        query = f'WorkflowId="{started[running].id}" OR WorkflowId="{started[ended].id}"'
        for _ in range(200):
            listed = dev_env.client.list_workflows(query)
            seen = {wf.id: wf.status.name.title() async for wf in listed if wf.status}
            if seen == wanted:
                break
            await asyncio.sleep(0.1)
        assert seen == wanted
        (code, out, err), (all_code, all_out, all_err) = await asyncio.gather(
            keeper(config, "tpu", "list", "--json"),
            keeper(config, "tpu", "list", "--all", "--json"),
        )
        assert code == 0 and all_code == 0, err + all_err
        shown = {row["slice"]: row["slice_state"] for row in json.loads(out)["slices"]}
        assert running in shown and ended not in shown, shown
        every = {row["slice"]: row["slice_state"] for row in json.loads(all_out)["slices"]}
        assert every[ended] == "terminated" and running in every, every
    finally:
        await started[running].terminate(reason="test done")


async def test_a_failed_phase_reads_failed_with_what_compensation_deleted(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    emu.set_scenario(name, STOCKOUT)
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        code, out, err = await keeper(
            config, "tpu", "bootstrap", name, "-a", "v4-8", "-c", "reserved",
            "--reservation", "res-a", "--poll-interval", "1s", "--wait",
        )  # fmt: skip
        assert code == 1, err
        assert out == ""  # a failure is a diagnostic, not data
        assert "bootstrap failed: assign:" in err and "no more capacity in zone" in err
        assert f"Compensation: deleted {name}." in err
        assert err.lower().count("compensation: deleted") == 1, err  # said once
        assert "Nothing of this bootstrap is left running." in err

        code, out, err = await keeper(config, "tpu", "status", name)
        assert code == 0, err
        rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
        assert "failed" in rows["assign"] and "done" not in rows["assign"], out
        assert "done" in rows["submit"]
        assert f"tpu-bootstrap-{name}: failed (bootstrap FAILED)" in out
        assert "QR deleted" in out

        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        shown = json.loads(out)
        assert shown["slice_state"] == "failed"
        assert shown["progress"]["failed_phase"] == "assign"
        assert shown["progress"]["compensation"] == f"deleted {name}"
    assert_no_leaks(emu)


async def test_a_cancel_exits_0_and_says_who_deleted_what(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    emu.set_scenario(name, Scenario(assign_after=None))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        code, out, err = await keeper(
            config, "tpu", "bootstrap", name, "-a", "v4-8", "-c", "reserved",
            "--reservation", "res-a", "--poll-interval", "1s", "--json",
        )  # fmt: skip
        assert code == 0, err
        started = json.loads(out)
        assert started["workflow_id"] == bootstrap_workflow_id(name) and started["run_id"]
        handle = dev_env.client.get_workflow_handle(started["workflow_id"])
        await wait_for_phase(handle, Phase.ASSIGN)

        code, out, err = await keeper(config, "tpu", "cancel", name)
        assert code == 0, err
        # The phase child compensates when cancelled; its report survives the supervisor's
        # own confirmation, which finds everything already gone.
        assert f"{name}: cancelled; compensation: the phase workflow deleted {name}" in out

        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        shown = json.loads(out)
        assert shown["status"] == "CANCELED" and shown["slice_state"] == "cancelled"
        progress = shown["progress"]
        assert progress["phase"] == "cancelled" and progress["failed_phase"] == "assign"
        assert progress["qr_state"] == "deleted"
        assert "during compensate" not in progress["error"]
        assert progress["error"] == "bootstrap cancelled during assign"
        code, out, err = await keeper(config, "tpu", "status", name)
        assert "WAITING_FOR_RESOURCES" not in out
        rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
        assert "cancelled" in rows["assign"], out

        code, out, err = await keeper(config, "tpu", "cancel", name, "--json")
        assert code == 1
        assert json.loads(out)["error"]["status"] == "CANCELED"
    assert_no_leaks(emu)


async def test_a_cancelled_demo_names_the_slice_as_every_other_message_does(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    emu.set_scenario(name, Scenario(assign_after=None))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        demo = asyncio.create_task(
            keeper(config, "demo", "tpu", "--name", name, "--json", module="dev")
        )
        handle = dev_env.client.get_workflow_handle(bootstrap_workflow_id(name))
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        code, out, err = await demo
    assert code == 1, err
    error = json.loads(out)["error"]
    assert error["message"].startswith(f"the bootstrap of slice {name} was cancelled; "), error
    assert bootstrap_workflow_id(name) not in error["message"]
    assert error["slice"] == name and error["workflow_id"] == bootstrap_workflow_id(name)
    assert_no_leaks(emu)


async def test_a_second_bootstrap_never_touches_the_slice_a_completed_run_handed_over(
    dev_env: WorkflowEnvironment, emu: TpuEmulator
):
    queue, name = _names()
    emu.set_scenario(name, Scenario(assign_after=0.2, active_after=0.2, ips_after=0.1))
    request = slice_request(name, accelerator_type="v4-8", poll_interval="1s")
    async with running_worker(dev_env.client, emu, task_queue=queue):
        first = await dev_env.client.execute_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(name),
            task_queue=queue,
            result_type=BootstrapResult,
        )
        assert first.vms
        # Past the CLI's refusal (a second start by hand): the create finds the QR taken.
        second = await dev_env.client.start_workflow(
            TpuSliceBootstrap.run, request, id=bootstrap_workflow_id(name), task_queue=queue
        )
        with pytest.raises(WorkflowFailureError) as raised:
            await asyncio.wait_for(second.result(), 60)
        cause = raised.value.cause
        assert isinstance(cause, ApplicationError)
        failure = BootstrapFailure.model_validate(cause.details[0])
        assert failure.kind == "taken" and failure.phase is Phase.SUBMIT
        assert failure.compensation is None
        assert failure.cleanup is not None
        assert "nothing was created and nothing was deleted" in failure.cleanup
        assert "left alone" in cause.message
        history = await second.fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert "tpu.delete_slice" not in scheduled
        assert emu.leaks(set()) != []  # the first run's slice is still there, untouched
        assert emu.leaks({name}) == []
        await dev_env.client.execute_workflow(
            "TpuSliceTeardown",
            {"slice_name": name, "project": request.project, "zone": request.zone},
            id=teardown_workflow_id(name),
            task_queue=queue,
        )
    assert_no_leaks(emu)


async def test_health_failures_name_the_vms_and_why_everywhere(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    emu.set_scenario(name, Scenario(assign_after=0, active_after=0, ips_after=0, unhealthy_vms=[1]))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        code, out, err = await keeper(
            config, "tpu", "bootstrap", name, "-a", "v4-16", "-c", "reserved",
            "--reservation", "res-a", "--poll-interval", "1s", "--health-deadline", "3s",
            "--wait",
        )  # fmt: skip
        assert code == 1, err
        failing = f"{name}/1 "
        live = [line for line in followed(err, name) if line.startswith(f"{name}: health")]
        assert any("VMs failing health" in line and failing in line for line in live), err
        assert any("(HTTP 503)" in line for line in live), err
        failed = next(line for line in err.splitlines() if "bootstrap failed" in line)
        assert "1 of 2 VMs not healthy" in failed and failing in failed
        assert "(HTTP 503)" in failed
        code, out, err = await keeper(config, "tpu", "status", name)
        assert code == 0, err
        assert "1 VMs failing health" in out and "(HTTP 503)" in out
    assert_no_leaks(emu)


async def test_the_log_view_writes_a_line_per_change_not_per_second(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    # Eight seconds in assign: a countdown in the line would write one line each second.
    emu.set_scenario(name, Scenario(assign_after=8, active_after=0.2, ips_after=0.1))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        code, out, err = await keeper(
            config, "tpu", "bootstrap", name, "-a", "v4-8", "-c", "reserved",
            "--reservation", "res-a", "--poll-interval", "1s", "--follow",
        )  # fmt: skip
        assert code == 0, err
        code, _, _ = await keeper(config, "tpu", "delete", name)
        assert code == 0
    assert f"slice {name} is ready" in out
    lines = followed(err, name)
    assign = [line for line in lines if line.startswith(f"{name}: assign")]
    # One line per QR state seen while assigning (CREATING, ACCEPTED, WAITING_FOR_RESOURCES
    # at most), never one per second of the wait.
    assert 1 <= len(assign) <= 4, "\n".join(assign)
    assert len(lines) == len(set(lines)), "a line repeats although nothing changed"
    assert all("left)" not in line for line in lines)
    assert_no_leaks(emu)


async def _recorded(handle, qr_state: str, within: float = 30.0) -> None:
    """Until the bootstrap's status holds `qr_state` from a look at the cloud."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        with contextlib.suppress(Exception):  # the first workflow task may not have run yet
            if (await handle.query("status", result_type=BootstrapStatus)).qr_state == qr_state:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never recorded QR {qr_state}")


def _phase_rows(text: str) -> dict[str, str]:
    return {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}


def _assert_not_running(text: str, shown: dict) -> None:
    """Neither the text nor the JSON claims a phase runs or has a deadline ahead."""
    rows = _phase_rows(text)
    assert "terminated" in rows["assign"], text
    assert all("running" not in row and "left" not in row for row in rows.values()), text
    progress = shown["progress"]
    assert progress["phase"] == "terminated" and progress["failed_phase"] == "assign", progress
    assert progress["phase_deadline_at"] is None
    assert all(t["ended_at"] for t in progress["timings"]), progress["timings"]
    assert shown["status"] == "TERMINATED" and shown["slice_state"] == "terminated"
    assert shown["closed_at"] and f"closed {shown['closed_at']}" in text, text


async def test_a_bootstrap_terminated_with_its_phase_workflow_reads_cut_short(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    """Both workflows lost (as `orph-b` was): no phase runs any more, the QR state is the
    one last seen, and the sweeper is what deletes what they left."""
    queue, name = _names()
    emu.set_scenario(name, Scenario(assign_after=None))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    request = slice_request(name, accelerator_type="v4-8", poll_interval="1s")
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        handle = await dev_env.client.start_workflow(
            TpuSliceBootstrap.run, request, id=bootstrap_workflow_id(name),
            task_queue=f"{queue}-tpu",
        )  # fmt: skip
        await _recorded(handle, "WAITING_FOR_RESOURCES")
    # No worker runs: terminating both leaves the QR with nobody to delete it.
    await handle.terminate(reason="test: lost with its worker")
    await dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(name)).terminate()
    # A worker answers the status queries of the closed runs (it replays them).
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        (code, out, err), (json_code, json_out, json_err) = await asyncio.gather(
            keeper(config, "tpu", "status", name),
            keeper(config, "tpu", "status", name, "--json"),
        )
        assert code == 0 and json_code == 0, err + json_err
        shown = json.loads(json_out)
        _assert_not_running(out, shown)
        assert "QR WAITING_FOR_RESOURCES (last seen at " in out, out
        assert shown["progress"]["qr_state"] == "WAITING_FOR_RESOURCES"
        assert shown["qr_state_seen_at"] and shown["qr_state_seen_at"] <= shown["closed_at"]
        assert "none ran: the bootstrap was terminated" in shown["progress"]["compensation"]
        assert "`keeper tpu sweep`" in shown["next_step"]
        assert "next: the sweeper deletes what the bootstrap left" in out, out
        assert "keeper tpu sweep" in out
        await dev_env.client.execute_workflow(
            "TpuSliceTeardown",
            {"slice_name": name, "project": request.project, "zone": request.zone},
            id=teardown_workflow_id(name),
            task_queue=f"{queue}-tpu",
        )
    assert_no_leaks(emu)


async def test_a_terminated_bootstrap_reads_terminated_and_status_wait_json_says_so(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    """`handle.terminate()` in assign: the phase workflow, cancelled with it, deletes the QR;
    status shows the phase cut short and who deleted what, and `status --wait --json` ends
    with the document `status --json` prints."""
    queue, name = _names()
    emu.set_scenario(name, Scenario(assign_after=None))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    request = slice_request(name, accelerator_type="v4-8", poll_interval="1s")
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        handle = await dev_env.client.start_workflow(
            TpuSliceBootstrap.run, request, id=bootstrap_workflow_id(name),
            task_queue=f"{queue}-tpu",
        )  # fmt: skip
        await _recorded(handle, "WAITING_FOR_RESOURCES")
        # Terminated once the command follows it (its live view wrote a line).
        waiting = await following(config, f"{name}: assign", "tpu", "status", name, "--wait",
                                  "--json")  # fmt: skip
        await handle.terminate(reason="test: an operator terminated it")
        wait_code, wait_out, wait_err = await waiting
        child = dev_env.client.get_workflow_handle(bootstrap_run_workflow_id(name))
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(child.result(), 60)
        (code, out, err), (json_code, json_out, json_err) = await asyncio.gather(
            keeper(config, "tpu", "status", name),
            keeper(config, "tpu", "status", name, "--json"),
        )
    assert code == 0 and json_code == 0, err + json_err
    shown = json.loads(json_out)
    _assert_not_running(out, shown)
    deleted = f"the phase workflow deleted {name} when it was cancelled"
    assert shown["progress"]["compensation"] == deleted
    assert shown["progress"]["qr_state"] == "deleted" and "WAITING_FOR_RESOURCES" not in out
    assert shown["next_step"].startswith("nothing"), shown["next_step"]
    assert deleted in out and "next: nothing" in out, out

    assert wait_code == 1, wait_err
    waited = json.loads(wait_out)
    assert set(shown) <= set(waited), set(shown) - set(waited)
    assert waited["status"] == "TERMINATED" and waited["result"] is None
    assert waited["progress"]["phase"] == "terminated"
    assert waited["error"]["status"] == "TERMINATED" and waited["error"]["exit_code"] == 1
    assert "keeper tpu sweep" in waited["error"]["hint"]
    assert_no_leaks(emu)


async def test_status_wait_json_ends_with_the_status_document_and_the_result(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = _names()
    # Capacity arrives once the command follows the bootstrap.
    emu.set_scenario(name, Scenario(assign_after=None))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    request = slice_request(name, accelerator_type="v4-8", poll_interval="1s")
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        handle = await dev_env.client.start_workflow(
            TpuSliceBootstrap.run, request, id=bootstrap_workflow_id(name),
            task_queue=f"{queue}-tpu",
        )  # fmt: skip
        await wait_for_phase(handle, Phase.ASSIGN)
        waiting = await following(config, f"{name}: assign", "tpu", "status", name, "--wait",
                                  "--json")  # fmt: skip
        emu.set_scenario(name, Scenario(assign_after=0, active_after=0.2, ips_after=0.1))
        wait_code, wait_out, wait_err = await waiting
        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        assert (wait_code, code) == (0, 0), wait_err + err
        waited, shown = json.loads(wait_out), json.loads(out)
        assert {key: waited[key] for key in shown} == shown
        assert waited["slice_state"] == "ready" and waited["result"]["vms"]
        code, _, err = await keeper(config, "tpu", "delete", name)
        assert code == 0, err
    assert_no_leaks(emu)


async def test_bootstrap_wait_keeps_waiting_through_a_server_restart(
    emu: TpuEmulator, tmp_path: Path
):
    server = RestartableServer(tmp_path / "temporal.db")
    await server.start()
    try:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        queue, name = _names()
        emu.set_scenario(name, Scenario(assign_after=8, active_after=0.2, ips_after=0.1))
        config = tmp_path / "keeper.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "temporal": {"address": server.address, "namespace": "default",
                                 "task_queue": queue},
                    "tpu": {"endpoint": "emulator", "emulator_address": emu.grpc_target,
                            "project": "keeper-test", "zone": "us-central2-b"},
                }
            )
        )  # fmt: skip
        async with running_worker(client, emu, task_queue=f"{queue}-tpu"):
            cli_run = asyncio.create_task(
                keeper(
                    config, "tpu", "bootstrap", name, "-a", "v4-8", "-c", "reserved",
                    "--reservation", "res-a", "--poll-interval", "1s", "--wait",
                )
            )  # fmt: skip
            handle = client.get_workflow_handle(bootstrap_workflow_id(name))
            await wait_for_phase(handle, Phase.ASSIGN)
            await server.stop()
            # Down for longer than the SDK's own retries of a call (about 10 s), so the CLI's
            # wait fails and it must reconnect by itself.
            await asyncio.sleep(14)
            assert not cli_run.done()
            await server.start()
            code, out, err = await cli_run
            assert code == 0, err
            assert f"slice {name} is ready" in out
            # The SDK's own retry warnings while the server was down are diagnostics.
            assert "temporalio_client" not in out, out
            assert "reconnecting" in err, err
            assert "Traceback" not in err
            code, _, _ = await keeper(config, "tpu", "delete", name)
            assert code == 0
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop()
    assert_no_leaks(emu)
