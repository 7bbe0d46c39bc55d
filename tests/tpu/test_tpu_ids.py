"""Workflow ids: no two roles can share one, slice workflows refuse any other id, and the
`keeper tpu` commands act only on the workflow type an id belongs to. Activity names: one
`tpu.<verb>` each."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.runners.models import (
    DELETE_PREFIX,
    RECONCILER_SCHEDULE_ID,
    RECONCILER_WORKFLOW_ID,
    RUNNER_NAME_PATTERN,
    deletion_workflow_id,
)
from keeper.domain.tpu import naming
from keeper.domain.tpu.models import BootstrapRunInput, Owner, TeardownRequest
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SLICE_NAME_PATTERN
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.e2e_support import REPO, temporal_cli, wait_for_phase, write_config
from tests.harness import running_worker, slice_request

# -- every role's ids, and one reading of an id back into (role, name) --------------------


def scheduled(action_id: str) -> Callable[[datetime], str]:
    """A schedule starts its action's workflow id suffixed with the nominal start time."""
    return lambda at: f"{action_id}-{at:%Y-%m-%dT%H:%M:%SZ}"


def manual(at: datetime) -> str:
    return naming.manual_sweep_workflow_id(f"{at:%Y%m%dT%H%M%S}")


SLICE_ROLES: dict[str, Callable[[str], str]] = {
    "bootstrap": naming.bootstrap_workflow_id,
    "phases": naming.bootstrap_run_workflow_id,
    "teardown": naming.teardown_workflow_id,
}
TIMED_ROLES: dict[str, Callable[[datetime], str]] = {
    "scheduled sweep": scheduled(naming.SWEEPER_WORKFLOW_ID),
    "manual sweep": manual,
    "scheduled reconcile": scheduled(RECONCILER_WORKFLOW_ID),
}
RUNNER_ROLES: dict[str, Callable[[str], str]] = {"runner deletion": deletion_workflow_id}
SCHEDULE_IDS = {"sweeper": naming.SWEEPER_SCHEDULE_ID, "reconciler": RECONCILER_SCHEDULE_ID}


def role_of(workflow_id: str) -> tuple[str, str]:
    """Which role made `workflow_id`, and from what. Unambiguous only because no slice name
    holds a '.', and the fixed prefixes differ before any name begins."""
    if workflow_id.startswith(naming.BOOTSTRAP_PREFIX):
        rest = workflow_id.removeprefix(naming.BOOTSTRAP_PREFIX)
        if rest.endswith(naming.RUN_SUFFIX):
            return "phases", rest.removesuffix(naming.RUN_SUFFIX)
        return "bootstrap", rest
    if workflow_id.startswith(naming.TEARDOWN_PREFIX):
        return "teardown", workflow_id.removeprefix(naming.TEARDOWN_PREFIX)
    if workflow_id.startswith(naming.MANUAL_SWEEP_PREFIX):
        return "manual sweep", workflow_id.removeprefix(naming.MANUAL_SWEEP_PREFIX)
    if workflow_id.startswith(f"{naming.SWEEPER_WORKFLOW_ID}-"):
        return "scheduled sweep", workflow_id.removeprefix(f"{naming.SWEEPER_WORKFLOW_ID}-")
    if workflow_id.startswith(f"{RECONCILER_WORKFLOW_ID}-"):
        return "scheduled reconcile", workflow_id.removeprefix(f"{RECONCILER_WORKFLOW_ID}-")
    if workflow_id.startswith(DELETE_PREFIX):
        return "runner deletion", workflow_id.removeprefix(DELETE_PREFIX)
    return "none", workflow_id


def valid(pattern: str) -> Callable[[str], bool]:
    import re

    compiled = re.compile(pattern)
    return lambda name: compiled.fullmatch(name) is not None


plain_slices = st.from_regex(SLICE_NAME_PATTERN, fullmatch=True)
# Names built to look like another role's suffix: the collisions a random name rarely hits.
tricky_slices = st.builds(
    lambda base, tail: f"{base}{tail}",
    plain_slices,
    st.sampled_from(["-run", "-run-run", "-manual-2026", "-teardown", "-bootstrap", "-0"]),
).filter(valid(SLICE_NAME_PATTERN))
slice_names = st.one_of(plain_slices, tricky_slices)
runner_names = st.one_of(
    st.from_regex(RUNNER_NAME_PATTERN, fullmatch=True),
    st.sampled_from(["x.run", "tpu-bootstrap-a", "reconciler-1", "delete-me", "a-run"]),
)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2999, 1, 1), timezones=st.just(UTC)
)


def produced(role: str, workflow_id: str) -> tuple[str, str]:
    return role, role_of(workflow_id)[1]


@given(name=slice_names)
@example(name="c8-run")
@example(name="c8")
def test_slice_workflow_ids_read_back_to_their_role_and_slice(name: str):
    for role, make in SLICE_ROLES.items():
        assert role_of(make(name)) == (role, name)


@given(name=runner_names)
def test_runner_deletion_ids_read_back_to_their_runner(name: str):
    for role, make in RUNNER_ROLES.items():
        assert role_of(make(name)) == (role, name)


@given(at=times)
def test_scheduled_and_manual_run_ids_read_back_to_their_role(at: datetime):
    for role, make in TIMED_ROLES.items():
        assert role_of(make(at))[0] == role


@given(first=slice_names, second=slice_names, runner=runner_names, at=times)
@example(first="c8", second="c8-run", runner="r", at=datetime(2026, 1, 1, tzinfo=UTC))
def test_no_two_roles_produce_the_same_id(first: str, second: str, runner: str, at: datetime):
    made = [(f"{role}({name})", make(name)) for role, make in SLICE_ROLES.items()
            for name in (first, second)]  # fmt: skip
    made += [(f"{role}({runner})", make(runner)) for role, make in RUNNER_ROLES.items()]
    made += [(f"{role}({at})", make(at)) for role, make in TIMED_ROLES.items()]
    by_id: dict[str, set[str]] = {}
    for who, workflow_id in made:
        by_id.setdefault(workflow_id, set()).add(who)
    assert {wid: whos for wid, whos in by_id.items() if len(whos) > 1} == {}


async def test_every_tpu_activity_is_named_tpu_verb():
    # The gRPC channel behind the client wants a running loop, whatever ran before.
    from temporalio import activity

    from keeper.runtime.tpu.client import emulator_client
    from keeper.workers.families.tpu import TpuDeps, tpu_activities
    from tests.harness import settings_for_tests

    deps = TpuDeps(emulator_client("127.0.0.1:9"))  # never dialled here
    served = tpu_activities(settings_for_tests(), None, deps)  # type: ignore[arg-type]
    names = {activity._Definition.must_from_callable(a).name for a in served}
    assert names == {
        "tpu.create_slice",
        "tpu.observe_slice",
        "tpu.check_health",
        "tpu.delete_slice",
        "tpu.survey_owned_resources",
        "tpu.policy",
        "common.alert",
    }


def test_schedule_ids_are_distinct_and_no_workflow_role_makes_them():
    assert len(set(SCHEDULE_IDS.values())) == len(SCHEDULE_IDS)
    for schedule_id in SCHEDULE_IDS.values():
        assert role_of(schedule_id)[0] == "none"


def test_the_child_id_is_never_another_slices_supervisor():
    """A "-run" suffix would have made slice c8's child the supervisor of slice c8-run."""
    assert naming.bootstrap_run_workflow_id("c8") == "tpu-bootstrap-c8.run"
    for name in ("c8-run", "c8"):
        assert naming.bootstrap_run_workflow_id("c8") != naming.bootstrap_workflow_id(name)
    assert naming.slice_name_problem("c8.run") is not None


# -- one slice name rule for every command -------------------------------------------------


def test_every_tpu_command_refuses_a_bad_slice_name_alike_before_connecting(tmp_path: Path):
    from tests.common.test_cli_conventions import KEEPER, KEEPER_DEV, explain, keepers_each

    config = tmp_path / "keeper.yaml"
    config.write_text("temporal: {address: '127.0.0.1:1'}\n")  # nothing is reached
    # Each name was accepted by `status` and `cancel` and refused by `delete`.
    by_name = [
        (KEEPER, ["tpu", "status", "x.run"], "SLICE_NAME"),
        (KEEPER, ["tpu", "cancel", "a" * 41], "SLICE_NAME"),
        (KEEPER, ["tpu", "delete", "Bad_Name"], "SLICE_NAME"),
        (KEEPER_DEV, ["demo", "tpu", "--name", "trailing-"], "--name"),  # keeper-dev's
    ]
    bootstrap = ["tpu", "bootstrap", "Bad_Name", "-a", "v4-8", "-c", "spot"]
    *results, requested = keepers_each(
        [(module, ["--config", str(config), "--json", *args]) for module, args, _ in by_name]
        + [(KEEPER, ["--config", str(config), "--json", *bootstrap])]
    )
    for (_, args, param), result in zip(by_name, results, strict=True):
        assert result.returncode == 2, explain(result)
        error = json.loads(result.stdout)["error"]
        assert error["param"] == param, error
        problem = naming.slice_name_problem(args[-1])
        assert problem is not None and error["message"].endswith(problem), error
        assert naming.SLICE_NAME_RULE in problem
    # A request lists every problem it has, the name's in the same words.
    assert requested.returncode == 2, explain(requested)
    message = json.loads(requested.stdout)["error"]["message"]
    assert f"SLICE_NAME: {naming.SLICE_NAME_RULE}" in message, message


# -- slice workflows refuse ids keeper could not find them by -------------------------------


async def failure_within(handle, seconds: float = 20) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), seconds)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), cause
    return cause


@pytest.mark.e2e
async def test_a_bootstrap_started_under_its_own_id_fails_at_once_creating_nothing(
    dev_env, emu: TpuEmulator
):
    request = slice_request()
    workflow_id = f"my-own-id-{uuid.uuid4().hex[:6]}"
    async with running_worker(dev_env.client, emu) as worker:
        started = await temporal_cli(
            dev_env,
            "workflow", "start",
            "--type", "TpuSliceBootstrap",
            "--task-queue", worker.task_queue,
            "--workflow-id", workflow_id,
            "--input", request.model_dump_json(),
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        cause = await failure_within(dev_env.client.get_workflow_handle(workflow_id))
    assert cause.type == "NotCanonicalWorkflowId"
    assert cause.non_retryable
    assert f"must be 'tpu-bootstrap-{request.slice_name}'" in cause.message
    assert "tpu-bootstrap-<slice>" in cause.message  # the rule itself
    assert emu.state()["queued_resources"] == [] and emu.state()["nodes"] == []


@pytest.mark.e2e
async def test_a_teardown_started_under_another_id_fails_at_once(dev_env, emu: TpuEmulator):
    request = TeardownRequest(slice_name="t-a", project="keeper-test", zone="us-central2-b")
    workflow_id = f"release-t-a-{uuid.uuid4().hex[:6]}"
    async with running_worker(dev_env.client, emu) as worker:
        started = await temporal_cli(
            dev_env,
            "workflow", "start",
            "--type", "TpuSliceTeardown",
            "--task-queue", worker.task_queue,
            "--workflow-id", workflow_id,
            "--input", request.model_dump_json(),
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        cause = await failure_within(dev_env.client.get_workflow_handle(workflow_id))
    assert (cause.type, cause.non_retryable) == ("NotCanonicalWorkflowId", True)
    assert "must be 'tpu-teardown-t-a'" in cause.message
    assert emu.calls.get("DeleteQueuedResource", 0) == 0


@pytest.mark.e2e
async def test_the_phase_workflow_refuses_to_run_without_its_supervisor(dev_env, emu: TpuEmulator):
    request = slice_request()
    supervisor = naming.bootstrap_workflow_id(request.slice_name)
    async with running_worker(dev_env.client, emu) as worker:
        handle = await dev_env.client.start_workflow(
            "TpuSliceBootstrapRun",
            BootstrapRunInput(
                request=request,
                owner=Owner(workflow_id=supervisor, run_id="not-a-real-run"),
                request_id=str(uuid.uuid4()),
                parent_workflow_id=supervisor,
            ),
            id=naming.bootstrap_run_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
        )
        cause = await failure_within(handle)
    assert (cause.type, cause.non_retryable) == ("NotStartedByTpuSliceBootstrap", True)
    assert f"only as the child of TpuSliceBootstrap {supervisor}" in cause.message
    assert "started by no parent workflow" in cause.message
    assert emu.state()["queued_resources"] == []


# -- the CLI acts only on the workflow type it means ----------------------------------------


async def keeper(config: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config), *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode()


@pytest.mark.e2e
async def test_tpu_commands_refuse_an_id_that_holds_another_workflow_type(
    dev_env, emu: TpuEmulator, tmp_path: Path
):
    queue = f"keeper-ids-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    slice_c8 = f"c8-{uuid.uuid4().hex[:6]}"
    emu.set_scenario(slice_c8, Scenario(assign_after=None, delete_duration=0.2))
    async with running_worker(dev_env.client, emu, task_queue=queue):
        real = await dev_env.client.start_workflow(
            TpuSliceBootstrap.run,
            slice_request(slice_c8, poll_interval="1s"),
            id=naming.bootstrap_workflow_id(slice_c8),
            task_queue=queue,
        )
        await wait_for_phase(real, Phase.ASSIGN)
        # A phase workflow started by hand at the supervisor id of slice "<c8>-run".
        stray_child = await dev_env.client.start_workflow(
            "TpuSliceBootstrapRun",
            "never read",
            id=naming.bootstrap_workflow_id(f"{slice_c8}-run"),
            task_queue=f"nobody-polls-{uuid.uuid4().hex[:6]}",
        )
        for command in ("status", "cancel", "delete"):
            code, out = await keeper(config, "tpu", command, f"{slice_c8}-run")
            assert code == 1, (command, out)
            assert f"workflow {stray_child.id} is a TpuSliceBootstrapRun, not a " in out, out
            assert "nothing was done" in out
        assert (await stray_child.describe()).status is WorkflowExecutionStatus.RUNNING
        still = await wait_for_phase(real, Phase.ASSIGN)
        assert still.compensation is None
        teardown = dev_env.client.get_workflow_handle(
            naming.teardown_workflow_id(f"{slice_c8}-run")
        )
        with pytest.raises(RPCError):
            await teardown.describe()

        # An id of the teardown's that holds another type is refused as well.
        squatter = await dev_env.client.start_workflow(
            "TpuSweeper",
            "never read",
            id=naming.teardown_workflow_id(slice_c8),
            task_queue=f"nobody-polls-{uuid.uuid4().hex[:6]}",
        )
        await real.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(real.result(), 60)
        code, out = await keeper(config, "tpu", "delete", slice_c8)
        assert code == 1, out
        assert f"workflow {squatter.id} is a TpuSweeper, not a TpuSliceTeardown" in out
        for stray in (stray_child, squatter):
            await stray.terminate(reason="test done")
    assert emu.leaks(set()) == []


@pytest.mark.e2e
async def test_a_wrong_type_refusal_says_what_to_do_and_names_the_workflow_in_json(
    dev_env, emu: TpuEmulator, tmp_path: Path
):
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, f"ids-{uuid.uuid4().hex[:6]}")
    name = f"squat-{uuid.uuid4().hex[:6]}"
    squatter = await dev_env.client.start_workflow(
        "RunnerDeletion",
        "never read",
        id=naming.bootstrap_workflow_id(name),
        task_queue=f"nobody-polls-{uuid.uuid4().hex[:6]}",
    )
    try:
        for command in ("status", "cancel", "delete"):
            code, out = await keeper(config, "--json", "tpu", command, name)
            assert code == 1, (command, out)
            # stdout and stderr share the pipe here: the document, and its text after it.
            document, _ = json.JSONDecoder().raw_decode(out[out.index("{") :])
            error = document["error"]
            assert error["workflow_id"] == squatter.id, (command, error)
            assert error["workflow_type"] == "RunnerDeletion" and error["status"] == "RUNNING"
            assert "is a RunnerDeletion, not a TpuSliceBootstrap" in error["message"]
            assert f"Check the slice name '{name}'" in error["hint"], (command, error)
            assert f"temporal workflow describe --workflow-id {squatter.id}" in error["hint"]
        assert (await squatter.describe()).status is WorkflowExecutionStatus.RUNNING
    finally:
        await squatter.terminate(reason="test done")
