"""`keeper runner` and `temporal workflow start` against the dev server, and a worker
SIGKILLed mid-delete."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.domain.runners.models import DeletionOutcome, deletion_workflow_id
from keeper.domain.runners.status import InstanceStatus
from keeper.workflows.runners.deletion import RunnerDeletion
from tests.e2e_support import (
    REPO,
    dev_address,
    process_gone,
    start_worker_process,
    temporal_cli,
)
from tests.runners.world import RunnerWorld, eventually, runner_worker

S = InstanceStatus
pytestmark = pytest.mark.e2e


def runner_config(tmp_path: Path, env: WorkflowEnvironment, world: RunnerWorld) -> Path:
    token_file = tmp_path / "github-token"
    token_file.write_text("ghp_keeper_test_token\n")
    config = {
        "temporal": {
            "address": dev_address(env),
            "namespace": "default",
            # The CLI asks on the runner family's queue, `<task_queue>-runners`.
            "task_queue": world.task_queue.removesuffix("-runners"),
        },
        "worker": {"log_dir": str(tmp_path), "graceful_shutdown": "1s", "versioned": False},
        "sweeper": {"interval": "1h"},
        "runners": {
            "store_url": str(world.store.engine.url),
            "github": {"api_url": world.github.url, "token_file": str(token_file)},
            "provider": {"config_file": str(world.provider_config)},
            # The world's policy, so a worker started from this file runs deletions as the
            # in-process one does, but for the provider: a call may take 4 s (the SIGKILL
            # test's runner takes 3), and a killed worker's attempt is noticed in 2 s.
            "deletion": {
                **world.policy.model_dump(mode="json"),
                "provider_timeout": "4s",
                "provider_heartbeat": "2s",
            },
            "reconcile_interval": "1h",
        },
    }
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def keeper(
    config: Path, *args: str, module: str = "keeper.cli.main"
) -> subprocess.CompletedProcess[str]:
    """`keeper --config CONFIG ARGS` in a subprocess (module "dev": `keeper-dev`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEPER_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--config",
        str(config),
        *args,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    return subprocess.CompletedProcess(
        list(args), process.returncode or 0, out.decode(), err.decode()
    )


async def no_deletion_started(env: WorkflowEnvironment, name: str) -> bool:
    try:
        await env.client.get_workflow_handle(deletion_workflow_id(name)).describe()
    except Exception:
        return True
    return False


async def test_bad_input_gets_a_clear_error_and_changes_nothing(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    world.add_runner("keep-me")
    before = world.store.require("keep-me")
    for args, expected, code in (
        (("runner", "delete", "ghost"), "no runner named 'ghost'", 1),
        (("runner", "delete", "ghost", "--force"), "no runner named 'ghost'", 1),
        (("runner", "delete", "bad name!"), "NAME: 'bad name!' is invalid", 2),
        (("runner", "status", "ghost"), "no runner named 'ghost'", 1),
    ):
        done = await keeper(config, *args)
        assert done.returncode == code, done
        assert (expected in done.stderr and "Nothing was started" in done.stderr) or (
            expected in done.stderr and "nothing was started" in done.stderr
        ), done.stderr
    assert await no_deletion_started(dev_env, "ghost")
    assert world.store.require("keep-me") == before
    assert provider_state.invocations(world.provider_config) == []


async def start_with_temporal_cli(
    env: WorkflowEnvironment, world: RunnerWorld, workflow_id: str, payload: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return await temporal_cli(
        env,
        "workflow", "start", "--type", "RunnerDeletion",
        "--task-queue", world.task_queue,
        "--workflow-id", workflow_id,
        "--input", json.dumps(payload),
    )  # fmt: skip


async def test_temporal_workflow_start_with_bad_input_names_the_field(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    async with runner_worker(dev_env.client, world):
        for payload, field in (({"runner": "bad name!"}, "runner"), ({"runnr": "x"}, "runnr")):
            workflow_id = f"bad-input-{field}"
            done = await start_with_temporal_cli(dev_env, world, workflow_id, payload)
            assert done.returncode == 0, done.stderr
            handle = dev_env.client.get_workflow_handle(workflow_id)
            with pytest.raises(WorkflowFailureError) as info:
                await handle.result()
            assert field in str(info.value.cause)
        # A well-formed start by the plain temporal CLI works like keeper's own.
        world.add_runner("via-cli")
        done = await start_with_temporal_cli(
            dev_env, world, deletion_workflow_id("via-cli"), {"runner": "via-cli"}
        )
        assert done.returncode == 0, done.stderr
        result = await dev_env.client.get_workflow_handle_for(
            RunnerDeletion.run, deletion_workflow_id("via-cli")
        ).result()
    assert result.outcome is DeletionOutcome.DELETED
    assert world.store.list(include_deleted=False) == []


async def test_keeper_runner_delete_list_status_report(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    world.add_runner("cli-1")
    world.add_runner("cli-2", mode="hanging")
    world.add_runner("cli-3")
    async with runner_worker(dev_env.client, world):
        done = await keeper(config, "runner", "delete", "cli-1", "--wait", "--json")
        assert done.returncode == 0, done.stderr
        waited = json.loads(done.stdout)
        assert waited["result"]["outcome"] == "deleted" and waited["status"] == "COMPLETED"
        assert waited["workflow_id"] == deletion_workflow_id("cli-1") and waited["ui_url"]

        started = await keeper(config, "runner", "delete", "cli-2", "--reason", "scale down")
        assert started.returncode == 0 and "started" in started.stdout, started
        await eventually(lambda: world.status("cli-2") is S.DELETING, what="cli-2 deleting")
        listing = json.loads((await keeper(config, "runner", "list", "--json")).stdout)
        assert listing["scale_sets"]["set-a"]["live"] == 1  # cli-3 only
        assert listing["scale_sets"]["set-a"]["deletion_lane"] == 1  # cli-2
        human = await keeper(config, "runner", "list")
        assert "set-a: live 1, deletion lane 1" in human.stdout, human.stdout

        forced = await keeper(config, "runner", "delete", "cli-2", "--force", "--wait", "--json")
        assert forced.returncode == 0, forced.stderr
        result = json.loads(forced.stdout)["result"]
        assert result["forced"] and result["leaked_provider_id"] == "i-cli-2"
        assert "joined the deletion" not in forced.stdout  # JSON output carries no prose
        assert json.loads(forced.stdout)["joined"] is True

        shown = await keeper(config, "runner", "status", "cli-2", "--json")
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["record"]["instance_status"] == "deleted"
        assert [a["to_status"] for a in status["audit"]][-1] == "deleted"
        assert status["leaks"][0]["provider_id"] == "i-cli-2"
        assert status["deletion"]["status"] == "COMPLETED"

        reported = await keeper(config, "runner", "report", "cli-3", "terminated")
        assert reported.returncode == 0 and "deletion requested" in reported.stdout, reported
        await eventually(lambda: world.status("cli-3") is S.DELETED, what="cli-3 deleted")

        again = await keeper(config, "runner", "delete", "cli-1")
        assert again.returncode == 0 and "already deleted" in again.stdout


async def test_worker_sigkilled_mid_delete_resumes_on_restart(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    world.add_runner("crash", mode="slow", mode_seconds=3)
    log = tmp_path / "worker.log"
    worker = start_worker_process(config, log)
    try:
        requested = await keeper(config, "runner", "delete", "crash")
        assert requested.returncode == 0, requested
        await eventually(
            lambda: provider_state.attempts(world.provider_config, "i-crash") >= 1,
            within=30,
            what="the provider delete to start",
        )
        assert world.status("crash") is S.DELETING
        (started,) = provider_state.invocations(
            world.provider_config, command="DeleteInstance", instance_id="i-crash"
        )
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        # The provider is in a session of its own; it dies with the worker, mid-delete.
        await eventually(lambda: process_gone(started["pid"]), what="the provider to die")
        assert world.status("crash") is S.DELETING  # no one finished it for the dead worker
        assert world.instance_exists("crash")
        worker = start_worker_process(config, log)
        handle = dev_env.client.get_workflow_handle_for(
            RunnerDeletion.run, deletion_workflow_id("crash")
        )
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(15)
    assert result.outcome is DeletionOutcome.DELETED
    assert world.status("crash") is S.DELETED and not world.instance_exists("crash")
    # The worker created the reconciler's schedule at start.
    schedule = await dev_env.client.get_schedule_handle("runner-reconciler").describe()
    assert schedule.schedule.action.workflow == "RunnerReconciler"
    assert provider_state.attempts(world.provider_config, "i-crash") >= 2
