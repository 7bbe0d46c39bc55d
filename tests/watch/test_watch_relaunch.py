"""An approved restart relaunches only what keeper holds, or the operator's command: never the
request iris returns, which has its secrets [REDACTED] and its workdir files removed.

The rules (domain/watch/relaunch.py) table by table, keeper's launch store on both back ends,
and the real workflow against the iris emulator, which redacts as the real controller does.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import httpx
import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from keeper.cli.watch.launch import launch_request
from keeper.domain.watch.calls import JobWatchInput
from keeper.domain.watch.models import (
    APPROVE_UPDATE,
    Decision,
    Proposal,
    ProposalKind,
    ProposalState,
    WatchOutcome,
    WatchView,
)
from keeper.domain.watch.redaction import REDACTED
from keeper.domain.watch.relaunch import (
    HeldLaunch,
    IncompleteRequest,
    compose,
    hold,
    relaunch_problem,
    secret_args,
)
from keeper.store.watch import open_launch_store
from keeper.wire.iris.codec import to_wire
from keeper.wire.iris.messages import LaunchJobRequest
from tests.reclaim.test_reclaim_secrets import assert_absent
from tests.watch.world import WatchWorld, watch_world

SECRET = "hf_Zq3Lm7Rt2Vb5Nc8Kd1Hs4Jx9Wp6Yt0Qa2Sd4Fg"
ARGV = ["python", "-m", "pipeline", "--stage", "tokenize"]


def request(env: dict[str, str] | None = None, argv: list[str] | None = None) -> dict[str, Any]:
    """`keeper job run`'s request, in iris's JSON mapping (as a watch holds it)."""
    return to_wire(launch_request("tokenize", argv or ARGV, 5 * 2**30, "us-central1", env))


# ---- the rules ------------------------------------------------------------------------------


def test_a_request_with_no_secret_is_held_as_it_is_and_needs_no_store() -> None:
    plain = request({"STAGE": "tokenize", "TOKENIZERS_PARALLELISM": "false"})
    held = hold(plain, "run/k1")
    assert held == HeldLaunch(request=plain)
    assert held.complete and held.stored is None and held.secrets == []


@pytest.mark.parametrize(
    ("env", "argv", "secrets"),
    [
        ({"HF_TOKEN": "x"}, None, ["environment.envVars.HF_TOKEN"]),
        ({"WANDB_API_KEY": "abc", "STAGE": "a"}, None, ["environment.envVars.WANDB_API_KEY"]),
        (None, [*ARGV, f"--token={SECRET}"], ["entrypoint.runCommand.argv", "submitArgv"]),
    ],
)
def test_a_request_with_a_secret_is_held_redacted_with_the_stores_key(
    env: dict[str, str] | None, argv: list[str] | None, secrets: list[str]
) -> None:
    full = request(env, argv)
    held = hold(full, "run/k2")
    assert held.stored == "run/k2" and held.complete
    assert held.request != full
    assert all(any(m.startswith(s) for m in held.secrets) for s in secrets), held.secrets
    shown = json.dumps(held.request)
    assert REDACTED in shown and SECRET not in shown
    # Only the secret values changed.
    assert held.request["resources"] == full["resources"]
    assert held.request["constraints"] == full["constraints"]


@pytest.mark.parametrize(
    ("held", "command", "problem"),
    [
        (None, None, "keeper holds no launch request for /alice/tokenize"),
        (
            HeldLaunch(request=request(), secrets=["environment.envVars.HF_TOKEN"]),
            None,
            "the launch request keeper holds for /alice/tokenize is redacted",
        ),
        (None, ["python", "-m", "pipeline", f"--token={SECRET}"], "argument 4 of the command"),
        (HeldLaunch(request=request()), ["python", SECRET], "argument 2 of the command"),
        (HeldLaunch(request=request()), None, None),
        (HeldLaunch(request=request(), stored="k", secrets=["environment.envVars.X"]), None, None),
        (None, ["python", "-m", "pipeline", "--resume"], None),
    ],
)
def test_a_restart_needs_a_held_request_it_can_send_whole_or_a_command_with_no_secret(
    held: HeldLaunch | None, command: list[str] | None, problem: str | None
) -> None:
    found = relaunch_problem("/alice/tokenize", "restart-1", held, command)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found
        if command is None:
            # It says how to go on: approve with the command.
            assert "keeper job approve /alice/tokenize restart-1 --by NAME -- COMMAND" in found


def test_a_relaunch_from_iris_shape_drops_what_iris_redacted_and_names_it() -> None:
    shape = {
        "name": "/alice/tokenize",
        "entrypoint": {"runCommand": {"argv": ["python", "old.py"]}},
        "environment": {"envVars": {"HF_TOKEN": REDACTED, "STAGE": "tokenize"}},
        "resources": {"cpuMillicores": 500, "memoryBytes": "1073741824"},
        "replicas": 1,
    }
    made = compose(shape, "/alice/tokenize-r1", ["python", "new.py"], from_iris=True)
    assert made.dropped_env == ["HF_TOKEN"]
    sent = made.request
    assert sent["name"] == "/alice/tokenize-r1"
    assert sent["entrypoint"]["runCommand"]["argv"] == ["python", "new.py"]
    assert sent["submitArgv"] == ["python", "new.py"]
    assert sent["environment"]["envVars"] == {"STAGE": "tokenize"}
    assert sent["resources"] == {"cpuMillicores": 500, "memoryBytes": "1073741824"}
    assert REDACTED not in str(sent)


def test_a_request_that_still_holds_a_redacted_value_is_never_composed() -> None:
    shape = {"name": "/alice/t", "entrypoint": {"runCommand": {"argv": ["run", REDACTED]}}}
    with pytest.raises(IncompleteRequest, match="redacted values"):
        compose(shape, "/alice/t-r1", None, from_iris=True)


def test_secret_args_finds_the_arguments_iris_would_redact() -> None:
    assert secret_args(["python", "-m", "pipeline", "--lr", "3e-4"]) == []
    assert secret_args(["python", f"--token={SECRET}", "x", SECRET]) == [2, 4]


# ---- the launch store ---------------------------------------------------------------------


def test_the_launch_store_keeps_a_request_once_per_key_on_both_back_ends(store_url: str) -> None:
    url = store_url.replace("runners.db", "watch.db")
    store = open_launch_store(url)
    try:
        full = LaunchJobRequest.model_validate(request({"HF_TOKEN": SECRET}))
        store.put("run/a", "tokenize", full)
        other = LaunchJobRequest.model_validate(request({"HF_TOKEN": "other"}))
        store.put("run/a", "tokenize", other)  # a retry: the first write stands
        assert store.get("run/a") == full
        assert store.get("run/missing") is None
    finally:
        store.close()
    again = open_launch_store(url)  # a second process (the worker) reads what the CLI kept
    try:
        assert again.get("run/a") == full
    finally:
        again.close()


# ---- the workflow, against the iris emulator -----------------------------------------------


def pending_restart(view: WatchView) -> Proposal | None:
    return next((p for p in view.pending() if p.kind is ProposalKind.RESTART), None)


async def restart_proposed(w: WatchWorld, handle: Any) -> Proposal:
    view = await w.until_view(
        handle, lambda v: pending_restart(v) is not None, what="a restart proposal"
    )
    found = pending_restart(view)
    assert found is not None
    return found


@pytest.mark.e2e
async def test_a_restart_of_a_job_keeper_launched_with_a_secret_resends_keepers_own_request(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job, held = w.launch_held("zombie-coordinator", env={"HF_TOKEN": SECRET, "STAGE": "t"})
        assert held.stored is not None and held.secrets == ["environment.envVars.HF_TOKEN"]
        handle = await w.watch(job, held)
        restart = await restart_proposed(w, handle)
        assert restart.relaunch.startswith("the request `keeper job run` launched the job with")
        # What iris returns for the job is redacted: resending it would launch "[REDACTED]".
        async with httpx.AsyncClient() as http:
            status = await http.post(
                f"{w.emu.url}/iris.cluster.ControllerService/GetJobStatus", json={"jobId": job}
            )
        assert status.json()["request"]["environment"]["envVars"]["HF_TOKEN"] == REDACTED
        answer = await handle.execute_update(
            APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
        )
        assert answer.state is ProposalState.DONE, answer
        assert "with the request keeper launched it with" in (answer.outcome or "")
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.RESTARTED and result.new_job_id == f"{job}-r1"
        launched = [a for a in w.actions() if a["method"] == "LaunchJob"]
        assert len(launched) == 1
        sent = w.emu.controller.jobs[f"{job}-r1"].request
        # The secret itself, and the original command: keeper's own request, renamed.
        assert sent["environment"]["envVars"] == {"HF_TOKEN": SECRET, "STAGE": "t"}
        assert sent["entrypoint"]["runCommand"]["argv"] == ["python", "-m", "pipeline"]
        # The new watch holds the same request for the next restart.
        child = dev_env.client.get_workflow_handle(result.new_watch_id or "")
        start = await anext(e async for e in child.fetch_history_events())
        text = str(start)
        assert "run/" in text and SECRET not in text
        # No history holds the secret, in any form (payloads decoded), though both hold the
        # request keeper launched with, redacted.
        for handle_ in (handle, child):
            text = (await handle_.fetch_history()).to_json()
            assert_absent(SECRET, text, f"the history of {handle_.id}")
            assert any(
                "[REDACTED]" in base64.b64decode(blob).decode("utf-8", "replace")
                for blob in re.findall(r'"data": "([A-Za-z0-9+/=]{8,})"', text)
            )
        await child.cancel()


@pytest.mark.e2e
async def test_an_approved_restart_of_a_job_keeper_did_not_launch_is_refused_and_stops_nothing(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        body = request({"HF_TOKEN": SECRET})
        job = w.emu.create_job("outside", "alice", "zombie-coordinator", 7, None, body).job_id
        handle = await w.watch(job)
        restart = await restart_proposed(w, handle)
        assert "nothing until an operator gives the command" in restart.relaunch
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
            )
        assert "keeper holds no launch request" in str(refused.value.cause)
        view = await w.view(handle)
        assert view is not None and pending_restart(view) is not None  # still pending
        assert w.actions() == []  # nothing stopped, nothing launched


@pytest.mark.e2e
async def test_a_held_request_missing_from_the_store_fails_the_restart_before_any_stop(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job, held = w.launch_held("zombie-coordinator", env={"HF_TOKEN": SECRET})
        lost = held.model_copy(update={"stored": "run/never-kept"})
        handle = await w.watch(job, lost)
        restart = await restart_proposed(w, handle)
        answer = await handle.execute_update(
            APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
        )
        assert answer.state is ProposalState.FAILED, answer
        assert "has no request under 'run/never-kept'" in (answer.outcome or ""), answer
        assert w.actions() == []  # the job was not stopped: it runs on, watched
        view = await w.view(handle)
        assert view is not None and view.phase.value != "finished"
        await handle.cancel()


def test_a_watch_input_holds_a_launch_in_its_stable_json_shape() -> None:
    held = hold(request({"HF_TOKEN": SECRET}), "run/k")
    doc = JobWatchInput(job_id="/alice/tokenize", launch=held).model_dump(mode="json")
    assert doc["launch"]["stored"] == "run/k"
    assert doc["launch"]["secrets"] == ["environment.envVars.HF_TOKEN"]
    assert SECRET not in str(doc)
    assert JobWatchInput.model_validate(doc).launch == held


@pytest.mark.e2e
async def test_a_command_given_for_a_job_keeper_launched_runs_with_its_secret_and_is_held_again(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job, held = w.launch_held("zombie-coordinator", env={"HF_TOKEN": SECRET, "STAGE": "t"})
        handle = await w.watch(job, held)
        restart = await restart_proposed(w, handle)
        command = ["python", "-m", "pipeline", "--resume"]
        answer = await handle.execute_update(
            APPROVE_UPDATE,
            Decision(proposal=restart.id, by="oncall", command=command),
            result_type=Proposal,
        )
        assert answer.state is ProposalState.DONE, answer
        assert answer.command == command
        assert "with the command given at approval and keeper's own request" in (
            answer.outcome or ""
        )
        result = await w.result(handle)
        sent = w.emu.controller.jobs[result.new_job_id or ""].request
        assert sent["entrypoint"]["runCommand"]["argv"] == command
        assert sent["environment"]["envVars"] == {"HF_TOKEN": SECRET, "STAGE": "t"}
        # The new watch holds what was launched, its secret kept in the store under a key of
        # its own: a second restart resends the command, secret and all.
        child = dev_env.client.get_workflow_handle(result.new_watch_id or "")
        first = await anext(e async for e in child.fetch_history_events())
        (payload,) = first.workflow_execution_started_event_attributes.input.payloads
        again = HeldLaunch.model_validate(json.loads(payload.data)["launch"])
        assert again.stored == f"{held.stored}/r1"
        assert again.request["entrypoint"]["runCommand"]["argv"] == command
        assert again.request["environment"]["envVars"]["HF_TOKEN"] == REDACTED
        store = open_launch_store(w.settings.watch.store_url)
        try:
            kept = store.get(again.stored)
        finally:
            store.close()
        assert kept is not None and kept.environment is not None
        assert kept.environment.env_vars["HF_TOKEN"] == SECRET
        await child.cancel()
