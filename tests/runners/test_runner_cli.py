"""`keeper runner` speaks as every keeper command does (cli/output.py): data on stdout,
diagnostics on stderr, one JSON document with --json or -o json (errors included), exit 0,
1 (failed, a failed deletion that was waited for included) or 2 (bad argument)."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

import pytest
import yaml
from sqlalchemy import update
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from keeper.domain.runners.models import deletion_workflow_id
from keeper.domain.runners.status import InstanceStatus
from keeper.runtime.runners.deps import github_token_source
from keeper.runtime.settings.runners import RunnerSettings
from keeper.store.runners.schema import runners
from tests.runners.test_runner_e2e import keeper, runner_config
from tests.runners.world import RunnerWorld, runner_worker

pytestmark = pytest.mark.e2e
S = InstanceStatus
RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def offline_config(tmp_path: Path) -> Path:
    """Settings whose Temporal and store nobody reaches: a usage error must come first."""
    path = tmp_path / "offline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "temporal": {"address": "127.0.0.1:1"},
                "runners": {"store_url": f"sqlite:///{tmp_path / 'none.db'}"},
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("module", "args", "flag"),
    [
        ("keeper.cli.main", ("runner", "delete", "r-1", "--reason", "x" * 501), "--reason"),
        ("dev", ("demo", "runner", "--count", "0"), "--count"),  # keeper-dev, the checkout's
        ("keeper.cli.main", ("runner", "delete", "bad name!"), "NAME"),
    ],
    ids=["reason-too-long", "demo-count-0", "bad-name"],
)
async def test_bad_arguments_are_usage_errors_naming_the_flag(
    tmp_path: Path, module: str, args: tuple[str, ...], flag: str
) -> None:
    config = offline_config(tmp_path)
    done = await keeper(config, *args, module=module)
    assert done.returncode == 2, done
    assert f"Error: {flag}: " in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""
    as_json = await keeper(config, *args, "-o", "json", module=module)
    assert as_json.returncode == 2
    error = json.loads(as_json.stdout)["error"]
    assert error["usage"] and error["message"].startswith(f"{flag}: ")


async def test_an_unknown_runner_fails_with_a_json_error_under_json(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    for command in ("delete", "status", "report"):
        extra = ("idle",) if command == "report" else ()
        done = await keeper(config, "runner", command, "ghost", *extra, "--json")
        assert done.returncode == 1, done
        error = json.loads(done.stdout)["error"]
        assert "no runner named 'ghost'" in error["message"] and error["runner"] == "ghost"
        assert "no runner named 'ghost'" in done.stderr


async def test_status_refuses_another_workflow_type_at_the_deletion_id_with_a_hint(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    name = f"r-squat-{uuid.uuid4().hex[:6]}"
    world.add_runner(name)
    squatter = await dev_env.client.start_workflow(
        "TpuSweeper",
        "never read",
        id=deletion_workflow_id(name),
        task_queue=f"nobody-polls-{uuid.uuid4().hex[:6]}",
    )
    try:
        done = await keeper(config, "runner", "status", name, "--json")
        assert done.returncode == 1, done
        error = json.loads(done.stdout)["error"]
        assert "is a TpuSweeper, not a RunnerDeletion; nothing was done" in error["message"]
        assert error["workflow_id"] == squatter.id and error["workflow_type"] == "TpuSweeper"
        assert f"Check the runner name '{name}'" in error["hint"]
    finally:
        await squatter.terminate(reason="test done")


async def test_a_failed_deletion_that_was_waited_for_exits_1(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    world.add_runner("r-fails", registered=False)
    with world.store.engine.begin() as conn:  # no compare-and-set can match this row
        conn.execute(update(runners).where(runners.c.name == "r-fails").values(version="v-two"))
    async with runner_worker(dev_env.client, world):
        done = await keeper(config, "runner", "delete", "r-fails", "--wait", "--json")
    assert done.returncode == 1, done
    error = json.loads(done.stdout)["error"]
    assert error["workflow_id"] == deletion_workflow_id("r-fails") and error["status"] == "FAILED"
    assert "Fix the row by hand" in error["message"]


async def test_status_shows_when_the_next_try_is_due_and_why(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    record = world.add_runner("r-next")
    world.github.inject(503, runner_id=record.github_runner_id, times=100_000)
    async with runner_worker(dev_env.client, world):
        requested = await keeper(config, "runner", "delete", "r-next", "--json")
        assert requested.returncode == 0, requested
        started = json.loads(requested.stdout)
        assert started["workflow_id"] == deletion_workflow_id("r-next") and started["run_id"]
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            shown = await keeper(config, "runner", "status", "r-next")
            assert shown.returncode == 0, shown
            found = re.search(rf"next try at ({RFC3339}) \(backoff\)", shown.stdout)
            if found:
                break
            assert asyncio.get_running_loop().time() < deadline, shown.stdout
        while True:
            # The call may be mid-attempt; the next wait shows its due time again.
            as_json = json.loads(
                (await keeper(config, "runner", "status", "r-next", "-o", "json")).stdout
            )
            (call,) = as_json["deletion"]["retrying"]
            if call["next_try_at"]:
                break
            assert asyncio.get_running_loop().time() < deadline, as_json
        assert call["why"] == "backoff" and re.fullmatch(RFC3339, call["next_try_at"])
        assert as_json["deletion"]["ui_url"] and as_json["deletion"]["run_id"]
        assert re.fullmatch(RFC3339, as_json["record"]["updated_at"])
        world.github.clear_faults()
        await dev_env.client.get_workflow_handle(deletion_workflow_id("r-next")).result()


async def test_wait_returns_once_the_record_is_tombstoned_while_the_cleanup_runs_on(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    world.policy = world.policy.model_copy(update={"registration_cleanup_attempts": 1000})
    config = runner_config(tmp_path, dev_env, world)
    record = world.add_runner("r-bg", busy=True)
    world.github.inject(500, runner_id=record.github_runner_id, times=100_000)
    async with runner_worker(dev_env.client, world):
        done = await keeper(config, "runner", "delete", "r-bg", "--force", "--wait", "--json")
        assert done.returncode == 0, done
        payload = json.loads(done.stdout)
        assert payload["status"] == "RUNNING" and payload["result"]["outcome"] == "deleted"
        shown = await keeper(config, "runner", "status", "r-bg", "--wait")
        assert shown.returncode == 0, shown
        assert "r-bg (set-a): deleted [tombstone]" in shown.stdout
        assert "in the background: removing GitHub registration" in shown.stdout
        handle = dev_env.client.get_workflow_handle(deletion_workflow_id("r-bg"))
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        world.github.clear_faults()
        await asyncio.wait_for(handle.result(), 30)


async def test_a_new_runner_under_a_finished_deletions_name_is_refused_then_deleted_anew(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    """The first runner is tombstoned while its registration cleanup runs on; a new runner
    takes the name. Joining the finishing deletion would delete nothing: the request is
    refused, saying why (exit 1), and once that deletion has closed, asked again, deletes it.
    """
    world.policy = world.policy.model_copy(update={"registration_cleanup_attempts": 1000})
    config = runner_config(tmp_path, dev_env, world)
    record = world.add_runner("r-name", busy=True)
    world.github.inject(500, runner_id=record.github_runner_id, times=100_000)
    async with runner_worker(dev_env.client, world):
        first = await keeper(config, "runner", "delete", "r-name", "--force", "--wait", "--json")
        assert first.returncode == 0 and json.loads(first.stdout)["status"] == "RUNNING", first
        world.add_runner("r-name", registered=False)  # a new runner, under the same name
        refused = await keeper(config, "runner", "delete", "r-name", "--json")
        assert refused.returncode == 1, refused
        error = json.loads(refused.stdout)["error"]
        assert error["status"] == "REFUSED", error
        assert "has finished" in error["message"] and "ask again once" in error["message"]
        assert not error["message"].count("ValueError"), error
        world.github.clear_faults()
        handle = dev_env.client.get_workflow_handle(deletion_workflow_id("r-name"))
        await asyncio.wait_for(handle.result(), 30)
        # --follow, the flag's name; --wait (above) is its earlier one.
        again = await keeper(config, "runner", "delete", "r-name", "--follow", "--json")
        assert again.returncode == 0, again
        deleted = json.loads(again.stdout)
    assert deleted["result"]["outcome"] == "deleted" and deleted["joined"] is False
    assert world.status("r-name") is S.DELETED and not world.instance_exists("r-name")


async def test_status_says_a_refused_token_needs_attention_naming_the_token_file(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    config = runner_config(tmp_path, dev_env, world)
    token_file = tmp_path / "github-token"  # the file runner_config names
    world.deps.github_token_source = github_token_source(
        RunnerSettings.model_validate({"github": {"token_file": str(token_file)}}), {}
    )
    record = world.add_runner("r-401")
    world.github.inject(401, runner_id=record.github_runner_id, times=100_000)
    async with runner_worker(dev_env.client, world):
        await keeper(config, "runner", "delete", "r-401")
        deadline = asyncio.get_running_loop().time() + 60
        while (
            "needs attention"
            not in (shown := await keeper(config, "runner", "status", "r-401")).stdout
        ):
            assert asyncio.get_running_loop().time() < deadline, shown.stdout
        assert "cannot progress by itself" in shown.stdout
        assert f"runners.github.token_file ({token_file})" in shown.stdout
        world.github.clear_faults()
        await dev_env.client.get_workflow_handle(deletion_workflow_id("r-401")).result()
