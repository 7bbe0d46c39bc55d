"""Replays every recorded workflow history against the current workflow code.

A recorded history stands for a workflow that may be running on a cluster right now, so a
change that would break it (a new command, a reordered activity, a changed child id) must
fail here. Recordings are never edited or deleted: each recording run writes a new folder,

    KEEPER_RECORD_HISTORIES=1 pytest tests/test_replay.py -k record

goes to tests/histories/<today>/ (KEEPER_HISTORY_DIR names another folder), refuses to
overwrite a file, and `test_recorded_histories_are_never_edited_or_removed` fails CI when a
committed recording changes. A recording stops replaying only when the patch it depends on
is retired, and then it is listed in tests/histories/RETIRED.md (docs/operations.md, Rollouts).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.reclaim.models import Holding
from keeper.domain.runners.models import deletion_workflow_id
from keeper.domain.tpu.naming import (
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import Capacity
from keeper.domain.watch.models import watch_id
from keeper.workers.registry import (
    WORKFLOW_FAILURE_EXCEPTION_TYPES,
    WORKFLOW_INTERCEPTORS,
    WORKFLOWS,
)
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.e2e_support import wait_for_phase
from tests.harness import env_flag, running_worker, slice_request

HISTORIES = Path(__file__).parent / "histories"
RETIRED = HISTORIES / "RETIRED.md"
REPO = Path(__file__).resolve().parent.parent
# The last commit that rewrote recordings in place. From here on they only ever get added.
FROZEN_SINCE = "a81f37ac1110f7fd0171d29fd9955b51f71a05b6"


def recording_dir() -> Path:
    folder = HISTORIES / os.environ.get("KEEPER_HISTORY_DIR", date.today().isoformat())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_recording(name: str, text: str) -> None:
    target = recording_dir() / name
    if target.exists():
        raise FileExistsError(
            f"{target.relative_to(REPO)} is already recorded and is never overwritten; "
            "record into a new folder with KEEPER_HISTORY_DIR"
        )
    target.write_text(text)


STOCKOUT = Scenario(
    assign_after=None,
    terminal={"state": "FAILED", "after": 8, "message": "no more capacity in zone"},
)
SCENARIOS = {
    "reserved-ready": (slice_request("replay-ready"), Scenario(assign_after=600)),
    "assign-deadline": (slice_request("replay-assign"), Scenario(assign_after=None)),
    "health-deadline": (
        slice_request("replay-health", deadlines={"health": "1m"}),
        Scenario(assign_after=0, active_after=0, unhealthy_vms=[1]),
    ),
    "on-demand-ready": (
        slice_request("replay-node", capacity=Capacity.ON_DEMAND),
        Scenario(active_after=30),
    ),
    # Since `phase-deadline-last-look`: ready only at the last look, at the deadline.
    "ready-last-look": (
        slice_request("replay-last-look", poll_interval=timedelta(minutes=10)),
        Scenario(assign_after=0, active_after=0, ips_after=60),
    ),
    # Since `compensation-bounded-windows`: a QR that fails while queued is compensated, and
    # one whose deletes are refused for 20 minutes turns stuck, then finishes.
    "stockout": (slice_request("replay-stockout"), STOCKOUT),
    "compensation-stuck": (slice_request("replay-stuck"), STOCKOUT),
}
# Scenario -> emulator faults before the bootstrap starts: (method, code, count).
SCENARIO_FAULTS = {"compensation-stuck": ("DeleteQueuedResource", "PERMISSION_DENIED", 30)}


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
@pytest.mark.parametrize("label", list(SCENARIOS))
async def test_record(time_env, clocked_emu: TpuEmulator, label: str):
    request, scenario = SCENARIOS[label]
    clocked_emu.set_scenario(request.slice_name, scenario)
    if label in SCENARIO_FAULTS:
        method, code, count = SCENARIO_FAULTS[label]
        clocked_emu.inject_fault(method, code, count=count, slice=request.slice_name)
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await time_env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=f"{bootstrap_workflow_id(request.slice_name)}",
            task_queue=worker.task_queue,
        )
        # Failed bootstraps are histories worth keeping too.
        with contextlib.suppress(Exception):
            await handle.result()
    await _record_bootstrap(time_env.client, label, request.slice_name)


async def _record_bootstrap(client: Any, label: str, slice_name: str) -> None:
    """A bootstrap's two histories, supervisor and phase child, as LABEL.{supervisor,child}."""
    for suffix, workflow_id in (
        ("supervisor", bootstrap_workflow_id(slice_name)),
        ("child", bootstrap_run_workflow_id(slice_name)),
    ):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        write_recording(f"{label}.{suffix}.json", history.to_json())


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
async def test_record_cancel_compensation_stuck(time_env, clocked_emu: TpuEmulator):
    """Since `child-compensation-progress`: a bootstrap cancelled in assign, whose phase
    child's compensation is refused for 20 minutes, turns stuck (the child tells its
    supervisor each window), then finishes."""
    request = slice_request("replay-cancel-stuck")
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=30, slice=request.slice_name
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await time_env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
        )
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        with contextlib.suppress(Exception):
            await handle.result()
    await _record_bootstrap(time_env.client, "cancel-compensation-stuck", request.slice_name)


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
async def test_record_cancel_compensation_continued(emu: TpuEmulator):
    """Since `child-compensation-continued-status`: a bootstrap cancelled in assign whose
    phase child's compensation is refused until the child continued as new (its supervisor
    waits, alive), then finishes. Both runs of the child are recorded.

    On a dev server of its own that suggests continue-as-new past 40 events: a replay
    reads the suggestion from the history, so it must be the server's (the time-skipping
    server cannot continue a child workflow as new)."""
    from temporalio.testing import WorkflowEnvironment

    from keeper.runtime import search_attributes as sa
    from keeper.runtime.tpu.client import emulator_client
    from keeper.workers.main import build_worker
    from tests import harness

    settings = harness.test_settings()
    # The first window is then a minute (the server ends it at about 30 s), not five.
    settings.bootstrap.compensation_stuck_after = timedelta(seconds=1)
    request = slice_request("replay-cancel-continued", poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    queue = f"keeper-replay-{request.slice_name}"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=harness.tool_path("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.ALL),
        ui=False,
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value",
            "limit.historyCount.suggestContinueAsNew=40",
        ],
    )
    tpu = emulator_client(emu.grpc_target)
    async with env, build_worker(env.client, settings, tpu, queue):
        handle = await env.client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=queue,
        )
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        child = env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        first_run = (await child.describe()).run_id
        await _until_rolled_over(child, first_run, within=150)
        # The continued run has started compensating before the deletes go through.
        await wait_for_phase(child, Phase.COMPENSATE)
        emu.clear_faults()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 120)
        runs = (
            ("supervisor", handle),
            ("child.first", env.client.get_workflow_handle(child.id, run_id=first_run)),
            ("child.last", child),
        )
        for suffix, run in runs:
            history = await run.fetch_history()
            write_recording(f"cancel-compensation-continued.{suffix}.json", history.to_json())


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
async def test_record_teardown_cancelled_mid_delete(dev_env, emu: TpuEmulator):
    """Since `teardown-shielded-delete`: a cancel waits for the delete it interrupted."""
    from tests.test_tpu_teardown import handed_over, start_teardown, until_delete_attempt

    async with running_worker(dev_env.client, emu) as worker:
        request = await handed_over(dev_env.client, worker.task_queue, emu)
        emu.inject_fault("DeleteQueuedResource", "UNAVAILABLE", count=2, slice=request.slice_name)
        handle = await start_teardown(dev_env.client, worker.task_queue, request)
        await until_delete_attempt(handle, 2)
        await handle.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    write_recording("teardown-cancelled.json", history.to_json())


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
async def test_record_sweep_with_an_undeletable_orphan(dev_env, emu: TpuEmulator):
    """Since `sweeper-survey-bounded-deletes`: one orphan is deleted, one is reported."""
    from keeper.domain.tpu.models import SweepRequest
    from keeper.workflows.tpu.sweeper import TpuSweeper
    from tests.test_tpu_sweeper import dead_owner_qr, sweeping_worker, until_listed

    stuck, ordinary = slice_request(), slice_request()
    for request in (stuck, ordinary):
        await dead_owner_qr(dev_env.client, emu, request)
    emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=stuck.slice_name
    )
    ids = " OR ".join(
        f'WorkflowId = "{bootstrap_workflow_id(r.slice_name)}"' for r in (stuck, ordinary)
    )
    await until_listed(dev_env.client, f'({ids}) AND ExecutionStatus = "Terminated"', 2)
    async with sweeping_worker(dev_env.client, emu, delete_timeout=timedelta(seconds=3)) as w:
        handle = await dev_env.client.start_workflow(
            TpuSweeper.run,
            SweepRequest(project="keeper-test", zone="us-central2-b"),
            id=f"tpu-sweeper-manual-replay-{stuck.slice_name}",
            task_queue=w.task_queue,
        )
        await asyncio.wait_for(handle.result(), 90)
        history = await handle.fetch_history()
    write_recording("sweep-undeletable-orphan.json", history.to_json())


def recorded() -> list[Path]:
    return sorted(HISTORIES.rglob("*.json"))


def retired() -> dict[str, str]:
    """Recordings whose patch was retired: `| path | release | reason |` rows of RETIRED.md."""
    if not RETIRED.exists():
        return {}
    rows: dict[str, str] = {}
    for line in RETIRED.read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].endswith(".json"):
            rows[cells[0]] = f"retired in {cells[1]}: {cells[2]}"
    return rows


def test_histories_are_recorded():
    labels = {path.name.split(".")[0] for path in recorded()}
    assert labels >= set(SCENARIOS) | set(RUNNER_SCENARIOS), (
        "re-record with KEEPER_RECORD_HISTORIES=1"
    )


def test_every_retired_recording_exists():
    missing = [name for name in retired() if not (HISTORIES / name).exists()]
    assert missing == [], f"RETIRED.md lists recordings that are not there: {missing}"


# Workflow type -> its canonical id from its input: the workflows refuse to run under any
# other id, and a history file does not hold the id it ran under.
CANONICAL_IDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "TpuSliceBootstrap": lambda inp: bootstrap_workflow_id(inp["slice_name"]),
    "TpuSliceBootstrapRun": lambda inp: bootstrap_run_workflow_id(inp["request"]["slice_name"]),
    "TpuSliceTeardown": lambda inp: teardown_workflow_id(inp["slice_name"]),
    "RunnerDeletion": lambda inp: deletion_workflow_id(inp["runner"]),
    "JobReclaim": lambda inp: Holding.model_validate(inp["holding"]).workflow_id,
    "JobWatch": lambda inp: watch_id(inp["job_id"]),
}


def workflow_id_of(path: Path, text: str) -> str:
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    canonical = CANONICAL_IDS.get(started["workflowType"]["name"])
    payloads = started.get("input", {}).get("payloads", [])
    if canonical is None or not payloads:
        return path.stem
    return canonical(json.loads(base64.b64decode(payloads[0]["data"])))


@pytest.mark.parametrize("path", recorded(), ids=lambda p: str(p.relative_to(HISTORIES)))
async def test_replay(path: Path):
    why = retired().get(str(path.relative_to(HISTORIES)))
    if why:
        pytest.skip(why)
    text = await asyncio.to_thread(path.read_text)
    history = WorkflowHistory.from_json(workflow_id_of(path, text), text)
    # The worker's own interceptors and failure types: a replay runs what a worker would.
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    assert git, "git is needed to check that recorded histories are never edited"
    return subprocess.run([git, *args], cwd=REPO, capture_output=True, text=True, check=False)


def test_recorded_histories_are_never_edited_or_removed():
    if _git("cat-file", "-e", f"{FROZEN_SINCE}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        if shallow:
            pytest.skip("a shallow clone has no history to compare; CI uses a full clone")
        pytest.fail(f"commit {FROZEN_SINCE[:7]} is not in this repository's history")
    committed = _git(
        "log",
        "--format=%h",
        "--name-status",
        "--diff-filter=MDR",
        f"{FROZEN_SINCE}..HEAD",
        "--",
        "tests/histories/*.json",
        "tests/histories/**/*.json",
    )
    assert committed.returncode == 0, committed.stderr
    uncommitted = _git("status", "--porcelain", "--", "tests/histories")
    assert uncommitted.returncode == 0, uncommitted.stderr
    changed = [
        line
        for line in uncommitted.stdout.splitlines()
        if re.match(r"^( ?[MDR]|[MDR].)", line) and line.endswith(".json")
    ]
    assert committed.stdout.strip() == "" and changed == [], (
        "recorded histories were edited, moved or removed; restore them and add new recordings "
        "in a new folder instead (use workflow.patched for the change):\n"
        + committed.stdout
        + "\n".join(changed)
    )


# ---- runner deletions -----------------------------------------------------------------

RUNNER_SCENARIOS = ["runner-deleted", "runner-escalated-forced", "runner-leak", "runner-recovered"]
# Paths that exist since `deletion-v2`: a busy runner that finishes its job while escalated,
# a rejected request, and a deletion whose history rolls over (both runs are recorded).
RUNNER_V2_SCENARIOS = ["runner-escalated-resolved", "runner-rejected-request", "runner-rolled-over"]


async def _until_step(handle: Any, step: str, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        view = await handle.query("status")
        if view and view["step"] == step:
            return
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id} never reached {step}"
        await asyncio.sleep(0.1)


async def _until_rolled_over(handle: Any, first_run: str | None, within: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while (await handle.describe()).run_id == first_run:
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id} never rolled over"
        await asyncio.sleep(0.1)


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
@pytest.mark.parametrize("label", RUNNER_SCENARIOS + RUNNER_V2_SCENARIOS)
async def test_record_runner(dev_env, tmp_path: Path, label: str):
    from emulators.provider import state as provider_state
    from keeper.domain.runners.status import InstanceStatus
    from tests.runner_world import FAST_POLICY, eventually, force_write, runner_worker, runner_world

    name = f"replay-{label}"
    policy = FAST_POLICY
    if label == "runner-rolled-over":
        policy = FAST_POLICY.model_copy(update={"history_events_limit": 100})
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world):
        busy = label in (
            "runner-escalated-forced",
            "runner-escalated-resolved",
            "runner-rolled-over",
        )
        if label == "runner-leak":
            world.add_runner(name, mode="failing")
        elif label == "runner-recovered":
            world.add_runner(name, mode="slow", mode_seconds=1.0)
        else:
            world.add_runner(name, busy=busy or label == "runner-rejected-request")
        handle = await world.request(dev_env.client, name, policy=policy)
        runner_id = world.store.require(name).github_runner_id
        if label == "runner-escalated-forced":
            await _until_step(handle, "escalated")
            await world.request(dev_env.client, name, force=True, policy=policy)
        elif label == "runner-escalated-resolved":
            await _until_step(handle, "escalated")
            world.github.set_busy(runner_id, False)
        elif label == "runner-rejected-request":
            await _until_step(handle, "busy_wait")
            await handle.signal("request", {"force": "yes"})
            world.github.set_busy(runner_id, False)
        elif label == "runner-rolled-over":
            await _until_step(handle, "escalated")
            for i in range(40):
                await world.request(dev_env.client, name, reason=f"again {i}", policy=policy)
            first_run = handle.result_run_id
            latest = dev_env.client.get_workflow_handle(handle.id)
            await _until_rolled_over(latest, first_run)
            first = dev_env.client.get_workflow_handle(handle.id, run_id=first_run)
            write_recording(f"{label}.first.json", (await first.fetch_history()).to_json())
            world.github.set_busy(runner_id, False)
            handle = latest
        elif label == "runner-leak":
            await eventually(
                lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 2
            )
            await world.request(dev_env.client, name, force=True, policy=policy)
        elif label == "runner-recovered":
            await eventually(
                lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 1
            )
            force_write(world.store, name, InstanceStatus.PENDING_DELETE)
        await handle.result()
        history = await handle.fetch_history()
    suffix = ".last" if label == "runner-rolled-over" else ""
    write_recording(f"{label}{suffix}.json", history.to_json())
