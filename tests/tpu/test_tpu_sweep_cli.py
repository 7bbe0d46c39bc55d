"""`keeper tpu sweep` on the dev server, against the schedule a worker keeps: an orphan left
undeleted fails the command by name, and sweeps run one at a time, so a manual sweep while
the scheduled one runs reports that one instead of racing it to the same orphan."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from temporalio.client import Client, ScheduleHandle
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.naming import SWEEPER_SCHEDULE_ID
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.families import FAMILIES
from keeper.workers.main import build_worker, ensure_schedules
from tests import harness
from tests.e2e_support import REPO, own_namespace, write_config
from tests.harness import assert_no_leaks, slice_request
from tests.tpu.test_tpu_sweeper import dead_owner_qr

pytestmark = pytest.mark.e2e


@dataclass
class Stack:
    client: Client
    config: Path
    schedule: ScheduleHandle


async def _namespace(env: WorkflowEnvironment) -> Client:
    """A namespace of the test's own: the schedule id tpu-sweeper is one per namespace, and
    a sweep covers everything keeper labelled there."""
    return await own_namespace(env, "sweep", harness.register_search_attributes)


@contextlib.asynccontextmanager
async def sweep_stack(
    env: WorkflowEnvironment,
    emu: TpuEmulator,
    tmp_path: Path,
    delete_timeout: timedelta = timedelta(minutes=10),
    with_schedule: bool = True,
) -> AsyncIterator[Stack]:
    """A TPU worker and its schedule tpu-sweeper, as `keeper worker` sets them up, with
    the schedule paused: its sweeps start only when the test (or the command) triggers one."""
    client = await _namespace(env)
    stem = f"sweep-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp_path / "keeper.yaml", env, emu, stem)
    written = yaml.safe_load(config.read_text())
    written["temporal"]["namespace"] = client.namespace
    config.write_text(yaml.safe_dump(written))
    settings = harness.settings_for_tests()
    settings.temporal.task_queue = stem
    settings.sweeper.delete_timeout = delete_timeout
    # The location the schedule's sweeps name, as the config the command reads does.
    settings.tpu.project, settings.tpu.zone = written["tpu"]["project"], written["tpu"]["zone"]
    tpu = FAMILIES["tpu"]
    schedule = client.get_schedule_handle(SWEEPER_SCHEDULE_ID)
    if with_schedule:
        await ensure_schedules(client, settings, tpu)
        await schedule.pause(note="test: sweeps start only when triggered")
    worker = build_worker(
        client, settings, emulator_client(emu.grpc_target), tpu.task_queue(settings)
    )
    async with worker:
        yield Stack(client, config, schedule)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEPER_"))}


async def sweep_command(config: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config), "tpu", "sweep", *args,
        cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} within {within}s")
        await asyncio.sleep(0.1)


async def line_saying(stream: asyncio.StreamReader, text: str) -> str:
    while line := (await stream.readline()).decode():
        if text in line:
            return line
    raise AssertionError(f"the command ended without saying {text!r}")


def qr_name(slice_name: str) -> str:
    return f"projects/keeper-test/locations/us-central2-b/queuedResources/{slice_name}"


async def test_a_sweep_that_could_not_delete_an_orphan_exits_1_naming_it(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
) -> None:
    stuck, ordinary = slice_request(), slice_request()
    async with sweep_stack(dev_env, emu, tmp_path, delete_timeout=timedelta(seconds=2)) as s:
        for request in (stuck, ordinary):
            await dead_owner_qr(s.client, emu, request)
        emu.inject_fault(
            "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=stuck.slice_name
        )
        code, out, err = await sweep_command(s.config)
        assert code == 1, (out, err)
        assert f"deleted: {qr_name(ordinary.slice_name)} (owner " in out, out
        assert f"not deleted (the next sweep tries again): {qr_name(stuck.slice_name)}" in out
        assert f"1 orphan(s) could not be deleted: {qr_name(stuck.slice_name)}\n" in err, err

        code, out, err = await sweep_command(s.config, "--json")
        assert (code, out[:1]) == (1, "{"), (out, err)
        error = json.loads(out)["error"]
        assert error["exit_code"] == 1
        assert error["not_deleted"] == [qr_name(stuck.slice_name)]
        assert "PermissionDenied" in error["failed"][0]
        assert "then run `keeper tpu sweep` again" in error["hint"]
        assert error["workflow_id"].startswith(f"{SWEEPER_SCHEDULE_ID}-2"), error
        assert (error["started"], error["status"]) == (True, "COMPLETED")
        emu.clear_faults()
    assert_no_leaks(emu, frozenset({stuck.slice_name}))


async def test_without_the_schedule_a_sweep_is_refused_saying_what_creates_it(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
) -> None:
    async with sweep_stack(dev_env, emu, tmp_path, with_schedule=False) as s:
        code, out, err = await sweep_command(s.config, "--json")
    assert (code, out[:1]) == (1, "{"), (out, err)
    error = json.loads(out)["error"]
    assert error["message"].startswith(f"there is no schedule {SWEEPER_SCHEDULE_ID} in ")
    assert "`keeper worker`" in error["hint"]


async def test_a_manual_sweep_while_the_scheduled_one_runs_reports_that_one(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
) -> None:
    orphan = slice_request()
    async with sweep_stack(dev_env, emu, tmp_path) as s:
        await dead_owner_qr(s.client, emu, orphan)
        # The orphan stays DELETING until the test moves the emulator's clock.
        emu.set_scenario(orphan.slice_name, Scenario(assign_after=None, delete_duration=3600))
        await s.schedule.trigger()  # the scheduled sweep, as its interval would start it

        async def deleting() -> bool:
            qrs = emu.state()["queued_resources"]
            return any(q["id"] == orphan.slice_name and q["state"] == "DELETING" for q in qrs)

        await until(deleting, "the scheduled sweep's delete of the orphan")
        (scheduled,) = (await s.schedule.describe()).info.running_actions

        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keeper.cli.main", "--config", str(s.config),
            "tpu", "sweep", "--json",
            cwd=REPO, env=_env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stderr is not None and process.stdout is not None
        # The command says it found the running sweep before that sweep can end.
        note = await asyncio.wait_for(line_saying(process.stderr, "already running"), 60)
        assert note.startswith(f"a sweep is already running: {scheduled.workflow_id};"), note
        emu.advance(3601)
        out = await asyncio.wait_for(process.stdout.read(), 120)
        assert await process.wait() == 0, out
        shown = json.loads(out)
        assert (shown["workflow_id"], shown["run_id"]) == (
            scheduled.workflow_id,
            scheduled.first_execution_run_id,
        )
        assert shown["started"] is False
        assert [item.split(" (")[0] for item in shown["deleted"]] == [qr_name(orphan.slice_name)]
        # One sweep ran: the command started none of its own.
        sweeps = [w.id async for w in s.client.list_workflows('WorkflowType = "TpuSweeper"')]
        assert sweeps == [scheduled.workflow_id]
        assert (await s.schedule.describe()).info.num_actions == 1
    assert_no_leaks(emu)
