"""Recordings of the runner family's workflows (RunnerDeletion, RunnerReconciler), replayed
by tests/common/test_replay.py like every other recording. On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> \\
        pytest tests/runners/test_runner_recordings.py

| label | the path it records |
|---|---|
| runner-deleted | registration, compute, tombstone |
| runner-escalated-forced | busy past busy_wait, escalated (alerted), an operator's force |
| runner-escalated-resolved | escalated, then the job ends: finished without a force |
| runner-leak | a provider that keeps failing, forced: the leak recorded |
| runner-recovered | a legacy write mid-delete: the tombstone through the audited recovery |
| runner-rejected-request | a malformed request refused (no trace), another one joining |
| runner-rolled-over.first/.last | escalated while requests keep coming: continued as new |
| runner-auth-attention | a refused token shown as needing attention, then fixed |
| runner-forced-busy-cleanup | a busy runner forced: the registration removed after the compute |
| runner-escalated-alert.first/.last | the escalation alert raised once, across a roll-over |
| reconciler-pass | a reconciler pass acting on a confirmed mismatch |
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError

from emulators.provider import state as provider_state
from keeper.domain.runners.models import REQUEST_UPDATE, DeletionPolicy, Requester
from keeper.domain.runners.reconcile import ReconcileRequest
from keeper.domain.runners.status import InstanceStatus
from keeper.workflows.runners.reconciler import RunnerReconciler
from tests.recording import on_demand, until_rolled_over, write_recording
from tests.runners.world import (
    FAST_POLICY,
    SCOPE,
    RunnerWorld,
    eventually,
    force_write,
    runner_worker,
    runner_world,
)

# Escalations re-check GitHub every second, so a job that ends is seen at once.
QUICK_RECHECK = FAST_POLICY.model_copy(update={"escalation_recheck": timedelta(seconds=1)})
# A history this short rolls over after a few dozen requests.
SHORT_HISTORY = QUICK_RECHECK.model_copy(update={"history_events_limit": 100})
POLICIES: dict[str, DeletionPolicy] = {
    "runner-escalated-resolved": QUICK_RECHECK,
    "runner-rolled-over": SHORT_HISTORY,
    "runner-escalated-alert": SHORT_HISTORY,
    "runner-forced-busy-cleanup": FAST_POLICY.model_copy(
        update={"registration_cleanup_attempts": 3}
    ),
}
DELETIONS = [
    "runner-deleted",
    "runner-escalated-forced",
    "runner-escalated-resolved",
    "runner-leak",
    "runner-recovered",
    "runner-rejected-request",
    "runner-rolled-over",
    "runner-auth-attention",
    "runner-forced-busy-cleanup",
    "runner-escalated-alert",
]
# Deletions whose history rolls over: both runs are recorded, as LABEL.first and LABEL.last.
ROLLED_OVER = {"runner-rolled-over", "runner-escalated-alert"}
# Every recording file stem this module writes.
LABELS: list[str] = [
    *(
        stem
        for label in DELETIONS
        for stem in ((f"{label}.first", f"{label}.last") if label in ROLLED_OVER else (label,))
    ),
    "reconciler-pass",
]


async def _until_view(handle: Any, what: str, seen: Any, within: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not seen((await handle.query("status")) or {}):
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id}: no {what}"
        await asyncio.sleep(0.1)


def _at(step: str) -> Any:
    return lambda view: view.get("step") == step


async def _roll_over(world: RunnerWorld, client: Any, name: str, handle: Any) -> Any:
    """Requests until the history rolls over; the first run recorded, the latest returned."""
    first_run = handle.result_run_id
    for i in range(40):
        await world.request(client, name, Requester.AGENT, reason=f"again {i}")
    latest = client.get_workflow_handle(handle.id)
    await until_rolled_over(latest, first_run)
    label = name.removeprefix("replay-")
    first = client.get_workflow_handle(handle.id, run_id=first_run)
    write_recording(f"{label}.first.json", (await first.fetch_history()).to_json())
    return latest


async def _drive(world: RunnerWorld, client: Any, label: str, name: str) -> Any:
    """Sets the runner up for `label`, asks for its deletion, and steers it to the end."""
    busy = label in (
        "runner-escalated-forced",
        "runner-escalated-resolved",
        "runner-rejected-request",
        "runner-rolled-over",
        "runner-forced-busy-cleanup",
        "runner-escalated-alert",
    )
    if label == "runner-leak":
        world.add_runner(name, mode="failing")
    elif label == "runner-recovered":
        world.add_runner(name, mode="slow", mode_seconds=1.0)
    else:
        world.add_runner(name, busy=busy)
    runner_id = world.store.require(name).github_runner_id
    if label == "runner-auth-attention":
        world.github.inject(401, runner_id=runner_id, times=100_000)
    handle = await world.request(client, name, force=label == "runner-forced-busy-cleanup")
    if label == "runner-escalated-forced":
        await _until_view(handle, "escalation", _at("escalated"))
        await world.request(client, name, force=True, reason="the VM died mid-job")
    elif label == "runner-escalated-resolved":
        await _until_view(handle, "escalation", _at("escalated"))
        world.github.set_busy(runner_id, False)  # the job ends
    elif label == "runner-rejected-request":
        await _until_view(handle, "busy wait", _at("busy_wait"))
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(REQUEST_UPDATE, {"force": "yes"})
        await world.request(client, name, Requester.SCALE_DOWN, reason="scale down")
        world.github.set_busy(runner_id, False)
    elif label == "runner-rolled-over":
        await _until_view(handle, "escalation", _at("escalated"))
        handle = await _roll_over(world, client, name, handle)
        world.github.set_busy(runner_id, False)
    elif label == "runner-escalated-alert":
        await _until_view(handle, "escalation", _at("escalated"))
        handle = await _roll_over(world, client, name, handle)
        await world.request(client, name, force=True)
    elif label == "runner-leak":
        await eventually(lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 2)
        await world.request(client, name, force=True)
    elif label == "runner-recovered":
        await eventually(lambda: provider_state.attempts(world.provider_config, f"i-{name}") >= 1)
        force_write(world.store, name, InstanceStatus.PENDING_DELETE)
    elif label == "runner-auth-attention":
        await _until_view(
            handle, "attention", lambda v: "cannot progress by itself" in (v.get("error") or "")
        )
        world.github.clear_faults()
    await asyncio.wait_for(handle.result(), 120)
    return handle


@on_demand
@pytest.mark.parametrize("label", DELETIONS)
async def test_record_runner_deletion(dev_env, tmp_path: Path, label: str) -> None:
    name = f"replay-{label}"
    policy = POLICIES.get(label, FAST_POLICY)
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world, policy):
        handle = await _drive(world, dev_env.client, label, name)
        history = await handle.fetch_history()
    suffix = ".last" if label in ROLLED_OVER else ""
    write_recording(f"{label}{suffix}.json", history.to_json())


@on_demand
async def test_record_reconciler_pass(dev_env, tmp_path: Path) -> None:
    """Two passes: the first sees a record whose instance is gone, the second confirms it
    and requests the runner's deletion. The second is recorded."""
    async with runner_world(tmp_path) as world, runner_worker(dev_env.client, world):
        world.add_runner("replay-vm-gone")
        provider_state.remove_instance(world.provider_config, "i-replay-vm-gone")
        request = ReconcileRequest(scopes=[SCOPE], managed_label="keeper-managed")
        for _ in range(2):
            handle = await dev_env.client.start_workflow(
                RunnerReconciler.run,
                request,
                id=f"replay-reconciler-{uuid.uuid4().hex[:6]}",
                task_queue=world.task_queue,
            )
            report = await handle.result()
        assert any("deletion requested" in line for line in report.acted), report
        await eventually(lambda: world.status("replay-vm-gone") is InstanceStatus.DELETED)
        history = await handle.fetch_history()
    write_recording("reconciler-pass.json", history.to_json())
