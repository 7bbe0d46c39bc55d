"""What an operator meets: the notifications on the webhook, `keeper job` against the real
workflow, and the secrets (iris token, webhook URL) that appear in no history."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf.json_format import MessageToJson
from temporalio.testing import WorkflowEnvironment

from emulators.iris import IrisEmulatorConfig
from keeper.cli.watch.launch import launch_request
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.models import ProposalKind, WatchOutcome
from keeper.wire.iris.codec import to_wire
from tests.e2e_support import REPO, dev_address
from tests.reclaim.test_reclaim_cli import keeper
from tests.reclaim.test_reclaim_secrets import assert_absent
from tests.reclaim.world import until
from tests.runners.test_runner_waits import details as current_details
from tests.watch.world import SPEED, WatchWorld, watch_world
from tests.webhook_receiver import webhook_receiver

pytestmark = pytest.mark.e2e
IRIS_TOKEN = "iris.eyJzdWIiOiJrZWVwZXIifQ.Tk7Qm2Lw9Rz4Vb8Nc3Kd5Hs1Jf0"
HOOK_SECRET = "T0KEEPER/B0WATCH/x9Zq3Lm7Rt2Vb5Nc8Kd1Hs4J"
# A credential in the job's own environment: iris shows it [REDACTED], keeper never has it.
HF_SECRET = "hf_Zq3Lm7Rt2Vb5Nc8Kd1Hs4Jx9Wp6Yt0Qa2Sd4Fg"


@pytest.fixture
async def webhook() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A chat webhook on a real port: the URL (its path is the secret) and what it got."""
    async with webhook_receiver(HOOK_SECRET) as hook:
        yield hook.url, hook.posts


def cli_config(tmp_path: Path, env: WorkflowEnvironment, w: WatchWorld) -> Path:
    path = tmp_path / "keeper.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "temporal": {
                    "address": dev_address(env),
                    "namespace": "default",
                    "task_queue": w.settings.temporal.task_queue,
                },
                "watch": {
                    "controller_url": w.settings.watch.controller_url,
                    "store_url": w.settings.watch.store_url,
                },
            }
        )
    )
    return path


async def test_a_zombie_is_notified_then_restarted_with_the_operators_command_and_no_secret_shown(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    webhook: tuple[str, list[dict[str, Any]]],
) -> None:
    url, received = webhook
    hook_file = tmp_path / "webhook-url"
    hook_file.write_text(url + "\n")
    token_file = tmp_path / "iris-token"
    token_file.write_text(IRIS_TOKEN)
    emulator = IrisEmulatorConfig(speed=SPEED, tokens={IRIS_TOKEN: "alice"})
    async with watch_world(
        dev_env.client, emulator, webhook_url_file=hook_file, token_file=token_file
    ) as w:
        # Launched by someone else, with a credential: keeper holds no request of its own.
        name = "zombie-outside"
        request = launch_request(name, ["python", "-m", "pipeline"], None, None, {
            "HF_TOKEN": HF_SECRET, "STAGE": "tokenize",
        })  # fmt: skip
        body = to_wire(request)
        job = w.emu.create_job(name, "alice", "zombie-coordinator", 7, None, body).job_id
        config = cli_config(tmp_path, dev_env, w)
        started = await keeper(config, "job", "watch", job, "--by", "oncall", "--json")
        assert started.code == 0, started
        assert started.json()["workflow_id"] == f"job-watch-{job[1:]}"

        # The proposal reaches the webhook with the command that answers it.
        await until(
            lambda: any("keeper job approve" in m["text"] for m in received),
            within=60,
            what="the proposal's notification",
        )
        proposal = next(m["text"] for m in received if "keeper job approve" in m["text"])
        assert "zombie" in proposal, proposal
        # Why this step: the zombie's pipeline has exited, so only a relaunch finishes it.
        assert "why: the pipeline has exited" in proposal, proposal
        assert w.actions() == []

        status = await keeper(config, "job", "status", job, "--json")
        assert status.code == 0, status
        doc = status.json()["view"]
        assert doc["verdict"] in ("running", "stalled", "unknown")
        pending = [p for p in doc["proposals"] if p["state"] == "pending"]
        assert [p["kind"] for p in pending] == [ProposalKind.RESTART.value], doc["proposals"]
        assert pending[0]["why"].startswith("the pipeline has exited"), pending[0]
        text = await keeper(config, "job", "status", job)
        assert f"    why: {pending[0]['why']}" in text.out, text.out
        handle = dev_env.client.get_workflow_handle(f"job-watch-{job[1:]}")
        details = await current_details(handle)
        assert f"why: {pending[0]['why']}" in details, details

        # The proposal says a restart needs the command, and why.
        assert "nothing until an operator gives the command" in pending[0]["relaunch"]
        assert f"approve: keeper job approve {job} restart-1 --by NAME -- COMMAND..." in text.out
        # Approved without one: refused, and nothing is stopped or launched.
        refused = await keeper(config, "job", "approve", job, "restart", "--by", "oncall")
        assert refused.code == 1, refused
        assert "keeper holds no launch request for" in refused.err, refused
        assert "[REDACTED]" in refused.err and "approve with the command" in refused.err
        assert w.actions() == []
        # A command that looks like it carries a secret never reaches the watch (exit 2).
        leaky = await keeper(
            config, "job", "approve", job, "restart", "--by", "oncall", "--",
            "python", "-m", "pipeline", f"--token={HF_SECRET}",
        )  # fmt: skip
        assert leaky.code == 2 and "argument 4 looks like a secret" in leaky.err, leaky
        assert w.actions() == []

        approved = await keeper(
            config, "job", "approve", job, "restart", "--by", "oncall", "--",
            "python", "-m", "pipeline", "--resume",
        )  # fmt: skip
        assert approved.code == 0, approved
        assert "not sent (iris had them redacted): HF_TOKEN" in approved.out, approved
        result = await w.result(
            dev_env.client.get_workflow_handle(f"job-watch-{job[1:]}", result_type=JobWatchResult)
        )
        assert result.outcome is WatchOutcome.RESTARTED
        assert [a["method"] for a in w.actions()] == ["TerminateJob", "LaunchJob"]
        assert {a["user"] for a in w.actions()} == {"alice"}  # the token's user acted
        # The relaunch ran the operator's command with the job's environment, less what iris
        # had redacted: never a "[REDACTED]" value.
        sent = w.emu.controller.jobs[result.new_job_id or ""].request
        assert sent["entrypoint"]["runCommand"]["argv"] == ["python", "-m", "pipeline", "--resume"]
        assert sent["environment"]["envVars"] == {"STAGE": "tokenize"}

        # Neither secret is in any history, description or result of the watches.
        async for wf in dev_env.client.list_workflows('WorkflowType="JobWatch"'):
            if job not in wf.id and (result.new_job_id or "") not in wf.id:
                continue
            handle = dev_env.client.get_workflow_handle(wf.id, run_id=wf.run_id)
            text = (await handle.fetch_history()).to_json()
            text += MessageToJson((await handle.describe()).raw_description)
            for secret in (IRIS_TOKEN, HOOK_SECRET, HF_SECRET):
                assert_absent(secret, text, f"the history of {wf.id}")
        for message in received:
            assert HOOK_SECRET not in json.dumps(message)
        new_watch = dev_env.client.get_workflow_handle(result.new_watch_id or "")
        await new_watch.cancel()


async def keeper_process(config: Path, *args: str) -> tuple[int, str, str]:
    """`keeper --config CONFIG ARGS` as a process of its own: several run truly at once."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config), *args,
        cwd=REPO, env={**clean_env(), "PYTHONPATH": str(REPO), "USER": "oncall"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), 120)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "TEMPORAL_"))}


async def test_two_approvals_of_one_proposal_at_once_carry_it_out_once_and_both_get_a_plain_answer(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("zombie-coordinator")
        config = cli_config(tmp_path, dev_env, w)
        started = await keeper(config, "job", "watch", job, "--by", "oncall")
        assert started.code == 0, started
        handle = dev_env.client.get_workflow_handle(f"job-watch-{job[1:]}")
        view = await w.until_view(
            handle,
            lambda v: any(p.kind is ProposalKind.RESTART for p in v.pending()),
            what="a restart proposal",
        )
        (restart,) = [p.id for p in view.pending() if p.kind is ProposalKind.RESTART]

        # Watched, not launched, by keeper: each approval gives the command to run.
        command = ("--", "python", "-m", "pipeline")
        first, second = await asyncio.gather(
            keeper_process(config, "job", "approve", job, restart, "--by", "alice", *command),
            keeper_process(config, "job", "approve", job, restart, "--by", "bob", *command),
        )
        # The step ran once.
        assert [a["method"] for a in w.actions()] == ["TerminateJob", "LaunchJob"], w.actions()
        for code, out, err in (first, second):
            assert "internal error" not in err and "Traceback" not in err, (code, out, err)
            assert "This is a bug" not in err, (code, out, err)
            # Either way the answer is the proposal as carried out, and exit 0: the restart
            # that was asked for was done.
            assert code == 0, (code, out, err)
            assert re.match(rf"{restart} \(restart\): done by (alice|bob) at ", out), out
            assert f"relaunched as {job}-r1" in out, out
        already = [err for _, _, err in (first, second) if "was already carried out" in err]
        assert len(already) == 1, (first, second)
        result = await w.result(
            dev_env.client.get_workflow_handle(f"job-watch-{job[1:]}", result_type=JobWatchResult)
        )
        assert result.outcome is WatchOutcome.RESTARTED
        await dev_env.client.get_workflow_handle(result.new_watch_id or "").cancel()

        # The closed watch shows the job keeper killed, and nothing left to approve.
        status = await keeper(config, "job", "status", job)
        assert status.code == 0, status
        assert "phase: finished  job: killed" in status.out, status.out
        assert f"verdict: finished (restarted as {job}-r1 (job killed))" in status.out
        assert "pending proposals" not in status.out and "approve:" not in status.out
        listed = await until(
            lambda: listed_row(config, job, "killed"), within=30, what="the closed watch listed"
        )
        assert (listed["job_state"], listed["verdict"], listed["status"]) == (
            "killed", "finished", "COMPLETED",
        )  # fmt: skip


async def listed_row(config: Path, job: str, state: str) -> dict[str, Any] | None:
    """The job's row of `keeper job list --all`, once its job state reads `state`
    (visibility is eventually consistent)."""
    done = await keeper(config, "job", "list", "--all", "--json")
    assert done.code == 0, done
    rows = [r for r in done.json()["watches"] if r["job_id"] == job]
    return rows[0] if rows and rows[0]["job_state"] == state else None


async def test_a_job_that_succeeds_ends_its_watch_finished_with_the_job_succeeded(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("finish-while-down")
        config = cli_config(tmp_path, dev_env, w)
        followed = await keeper(config, "job", "watch", job, "--follow")
        assert followed.code == 0, followed
        assert followed.out.splitlines()[-1].startswith(f"{job}: watch COMPLETED; succeeded")

        status = await keeper(config, "job", "status", job)
        assert status.code == 0, status
        assert "phase: finished  job: succeeded" in status.out, status.out
        assert "verdict: finished (the job succeeded)" in status.out, status.out
        assert "verdict: unknown" not in status.out
        body = (await keeper(config, "job", "status", job, "--json")).json()
        assert (body["view"]["verdict"], body["view"]["job_state"]) == ("finished", "succeeded")
        # The progress line's time is when it was written, as iris stamps it: within the
        # watch's life, not the emulator's scenario clock (60x: minutes ahead by now).
        at = datetime.fromisoformat(body["view"]["progress"]["at"])
        started_at = datetime.fromisoformat(body["started_at"])
        assert started_at - timedelta(seconds=5) <= at <= datetime.now(UTC), (started_at, at)
        assert f"(at {body['view']['progress']['at']})" in status.out
        row = await until(
            lambda: listed_row(config, job, "succeeded"), within=30, what="the watch listed"
        )
        assert row["verdict"] == "finished", row
        finished = await keeper(config, "job", "list", "--all", "--verdict", "finished", "--json")
        assert job in [r["job_id"] for r in finished.json()["watches"]], finished
