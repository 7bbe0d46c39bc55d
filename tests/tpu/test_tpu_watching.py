"""What a `keeper tpu` command shows while it waits on a workflow, and what a Ctrl-C leaves:
`keeper tpu cancel` follows the compensation as it goes (a stuck one with its last error),
and an interrupted wait says that the workflow goes on and how to follow or cancel it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.naming import bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from tests import harness
from tests.e2e_support import REPO, interruptible_module, wait_for_phase, write_config
from tests.harness import assert_no_leaks, running_worker, slice_request
from tests.tpu.test_tpu_compensation import start, wait_for_status
from tests.tpu.test_tpu_truth import followed

pytestmark = pytest.mark.e2e


class Keeper:
    """`keeper` (module "dev": `keeper-dev`) in a process of its own (not on a terminal), its
    stderr read as it comes."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.err: list[str] = []

    @classmethod
    async def start(cls, config: Path, *args: str, module: str = "keeper.cli.main") -> Keeper:
        process = await asyncio.create_subprocess_exec(
            *interruptible_module(module, "--config", str(config), *args),
            cwd=REPO, env={**os.environ, "COLUMNS": "400"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(process)

    async def line_with(self, *words: str, within: float = 60) -> str:
        """The first stderr line holding every word, waiting for it."""
        assert self.process.stderr is not None
        async with asyncio.timeout(within):
            while True:
                raw = await self.process.stderr.readline()
                assert raw, f"keeper exited first; stderr:\n{''.join(self.err)}"
                line = raw.decode()
                self.err.append(line)
                if all(word in line for word in words):
                    return line

    async def interrupt(self) -> tuple[int, str, str]:
        """Ctrl-C: the exit code, stdout and the whole of stderr."""
        self.process.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(self.process.communicate(), 60)
        return self.process.returncode or 0, out.decode(), "".join(self.err) + err.decode()

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


async def test_cancel_follows_the_compensation_and_a_ctrl_c_says_it_goes_on(
    time_env: WorkflowEnvironment, clocked_emu: TpuEmulator, tmp_path: Path
):
    request = slice_request(poll_interval=timedelta(seconds=1))
    name = request.slice_name
    clocked_emu.set_scenario(name, Scenario(assign_after=None))
    # Stuck within seconds of the wall clock: while the command queries the workflow for its
    # live view, the test server may skip time only between queries, which on a loaded
    # machine can be never.
    settings = harness.settings_for_tests()
    settings.bootstrap.compensation_stuck_after = timedelta(seconds=2)
    async with running_worker(time_env.client, clocked_emu, settings=settings) as worker:
        handle = await start(time_env, worker.task_queue, request)
        await wait_for_phase(handle, Phase.ASSIGN)
        # Every delete of the QR is refused until the test clears the fault.
        clocked_emu.inject_fault(
            "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=name
        )
        config = write_config(tmp_path / "keeper.yaml", time_env, clocked_emu, worker.task_queue)
        cancel = await Keeper.start(config, "tpu", "cancel", name)
        try:
            # The cancel took effect before time runs: no deadline of assign can fire first.
            await cancel.line_with(f"{name}: compensate")
            # Awaiting the result lets the test server skip the delete's backoff too.
            waiting = asyncio.create_task(handle.result())
            await wait_for_status(handle, lambda s: s.compensation_stuck)
            waiting.cancel()  # time stands still while the command reads it
            with contextlib.suppress(asyncio.CancelledError, WorkflowFailureError):
                await waiting
            stuck = await cancel.line_with(f"{name}: compensate", "stuck for")
            code, out, err = await cancel.interrupt()
        finally:
            cancel.kill()
        # One line per change of state, the stuck compensation's last error and what to do.
        assert "PermissionDenied" in stuck and "grant roles/tpu.admin" in stuck, stuck
        lines = followed(err, name)
        assert len(lines) == len(set(lines)), "a line repeats although nothing changed"
        # Interrupted: the compensation goes on in the workflow, and the command says so.
        assert code == 130, err
        assert out == ""
        assert f"the bootstrap {handle.id} keeps compensating" in err, err
        assert f"keeper tpu status {name} --follow" in err, err
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING

        clocked_emu.clear_faults()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 120)
    assert_no_leaks(clocked_emu)


async def test_an_interrupted_demo_says_the_bootstrap_goes_on_and_how_to_reach_it(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
):
    queue, name = f"keeper-watch-{uuid.uuid4().hex[:6]}", f"demo-int-{uuid.uuid4().hex[:6]}"
    emu.set_scenario(name, Scenario(assign_after=None))
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    handle = dev_env.client.get_workflow_handle(bootstrap_workflow_id(name))
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        demo = await Keeper.start(config, "demo", "tpu", "--name", name, "--json", module="dev")
        try:
            await demo.line_with(f"{name}: assign")  # it follows the bootstrap live
            code, out, err = await demo.interrupt()
        finally:
            demo.kill()
        still = (await handle.describe()).status
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    assert code == 130, err
    assert still is WorkflowExecutionStatus.RUNNING
    # --json: one document on stdout even so, naming the workflow and what to run next.
    error = json.loads(out)["error"]
    assert error["exit_code"] == 130 and error["status"] == "RUNNING", error
    assert error["workflow_id"] == handle.id and error["run_id"], error
    assert f"the bootstrap {handle.id} keeps running" in error["message"]
    assert f"`keeper tpu status {name} --follow`" in error["hint"]
    assert f"`keeper tpu cancel {name}`" in error["hint"]
    # The same on stderr for the person at the terminal.
    assert "keeps running" in err and f"keeper tpu cancel {name}" in err, err
    assert_no_leaks(emu)
