"""Worker versioning: a rollout from one build to the next never breaks a workflow in flight.

On the Temporal dev server, two builds of the same code poll one task queue as two versions of
one Worker Deployment (each test has a deployment and a task queue of its own). AUTO_UPGRADE
runs move to the build made current; PINNED runs finish on the build they started on; runs an
unversioned worker started move to the first version made current. Which build completed each
workflow task is read from the run's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import tpu_v2
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.workflow import _Definition

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.cloud import build_queued_resource
from keeper.domain.runners.models import DeletionOutcome, DeletionStep, deletion_workflow_id
from keeper.domain.tpu.models import SweepReport, SweepRequest
from keeper.domain.tpu.naming import bootstrap_workflow_id, owner_labels, parent
from keeper.runtime.settings import SettingsError, load_settings, package_build_id
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import build_worker
from keeper.workers.registry import WORKFLOWS
from keeper.workers.versioning import current_build_id, make_current, worker_version
from keeper.workflows.runners.deletion import RunnerDeletion
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.sweeper import TpuSweeper
from tests import harness
from tests.common.test_cli_conventions import clean_env, keeper_async
from tests.common.test_dev_stack import NEEDS_EMULATOR, Keeper, keeper  # noqa: F401 (the fixture)
from tests.diagnostics import where_it_is
from tests.harness import assert_no_leaks, slice_request
from tests.runners.world import RunnerWorld, world_settings

REPO = Path(__file__).resolve().parents[2]

# The decision, with its reasons, is the table in docs/operations.md#rollouts.
BEHAVIOURS = {
    "TpuSliceBootstrap": VersioningBehavior.AUTO_UPGRADE,
    "TpuSliceBootstrapRun": VersioningBehavior.AUTO_UPGRADE,
    "TpuSliceTeardown": VersioningBehavior.AUTO_UPGRADE,
    "TpuSweeper": VersioningBehavior.PINNED,
    "RunnerDeletion": VersioningBehavior.AUTO_UPGRADE,
    "RunnerReconciler": VersioningBehavior.PINNED,
    "JobReclaim": VersioningBehavior.AUTO_UPGRADE,
    "JobWatch": VersioningBehavior.AUTO_UPGRADE,
}
UNVERSIONED = ""  # the build id a history records for a task an unversioned worker completed


# -- declarations and settings -------------------------------------------------------------


def test_every_workflow_type_declares_the_behaviour_the_rollout_table_gives_it() -> None:
    declared = {
        defn.name: defn.versioning_behavior for defn in map(_Definition.must_from_class, WORKFLOWS)
    }
    assert declared == BEHAVIOURS


def test_the_rollout_docs_give_every_workflow_type_its_behaviour() -> None:
    docs = (REPO / "docs" / "operations.md").read_text()
    for name, behaviour in BEHAVIOURS.items():
        assert f"| `{name}` | {behaviour.name} |" in docs, name


@pytest.mark.parametrize(
    ("file", "env", "expected"),
    [
        ({}, {}, WorkerDeploymentVersion("keeper", package_build_id())),
        (
            {},
            {"KEEPER_BUILD_ID": "img-2026.12.01"},
            WorkerDeploymentVersion("keeper", "img-2026.12.01"),
        ),
        (
            {"worker": {"deployment_name": "ml-infra", "build_id": "from-file"}},
            {"KEEPER_BUILD_ID": "from-env"},
            WorkerDeploymentVersion("ml-infra", "from-env"),
        ),
        ({"worker": {"versioned": False}}, {}, None),
        ({}, {"KEEPER_WORKER_VERSIONED": "false"}, None),
    ],
    ids=["defaults", "env-build-id", "env-beats-file", "file-unversioned", "env-unversioned"],
)
def test_the_worker_version_comes_from_the_settings(
    tmp_path: Path,
    file: dict[str, Any],
    env: dict[str, str],
    expected: WorkerDeploymentVersion | None,
) -> None:
    config = tmp_path / "keeper.yaml"
    config.write_text(json.dumps(file))
    assert worker_version(load_settings(config, env=env).worker) == expected


def test_a_deployment_name_with_a_dot_is_refused_with_what_to_do(tmp_path: Path) -> None:
    config = tmp_path / "keeper.yaml"
    config.write_text(json.dumps({"worker": {"deployment_name": "keeper.prod"}}))
    with pytest.raises(SettingsError, match=r"worker\.deployment_name.*choose a name without dots"):
        load_settings(config, env={})


# -- helpers for the dev-server tests ------------------------------------------------------


def new_deployment() -> str:
    return f"keeper-test-{uuid.uuid4().hex[:8]}"


def runner_build(
    client: Client, world: RunnerWorld, version: WorkerDeploymentVersion | None
) -> Worker:
    # Runner workflows never call the TPU client; its channel connects lazily. The world's
    # policy, as its own workers run it (tests/runners/world.py).
    return build_worker(
        client,
        world_settings(world),
        emulator_client("127.0.0.1:9"),
        world.task_queue,
        world.deps,
        version=version,
    )


async def until(
    check: Callable[[], Awaitable[bool]],
    what: str,
    within: float = 90.0,
    explain: Callable[[], Awaitable[str]] | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        if loop.time() > deadline:
            detail = f"; {await explain()}" if explain else ""
            raise AssertionError(f"timed out after {within}s waiting for {what}{detail}")
        await asyncio.sleep(0.1)


async def make_current_once_polled(client: Client, version: WorkerDeploymentVersion) -> None:
    """The server knows a version only after one of its workers has polled."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        try:
            await make_current(client, version, "keeper tests")
            return
        except RPCError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def task_builds(handle: WorkflowHandle[Any, Any]) -> list[tuple[str, str]]:
    """Each workflow task completion and each request taken (an update accepted), in history
    order: ("task", build id) or ("request", update name)."""
    seen: list[tuple[str, str]] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            attrs = event.workflow_task_completed_event_attributes
            seen.append(("task", attrs.deployment_version.build_id))
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = event.workflow_execution_update_accepted_event_attributes
            seen.append(("request", accepted.accepted_request.input.name))
    return seen


def builds_of(seen: list[tuple[str, str]]) -> list[str]:
    return [build for kind, build in seen if kind == "task"]


def builds_after_last_request(seen: list[tuple[str, str]]) -> list[str]:
    """The builds of the tasks from the one that took the last request on."""
    last = max(i for i, (kind, _) in enumerate(seen) if kind == "request")
    return builds_of(seen[last - 1 :])


async def versioning_of(handle: WorkflowHandle[Any, Any]) -> tuple[str, str]:
    """The behaviour and the build the server holds for the run."""
    info = (await handle.describe()).raw_description.workflow_execution_info.versioning_info
    return VersioningBehavior(info.behavior).name, info.deployment_version.build_id


async def escalated(client: Client, name: str) -> bool:
    handle = client.get_workflow_handle_for(RunnerDeletion.run, deletion_workflow_id(name))
    try:
        view = await handle.query(RunnerDeletion.status)
    except (RPCError, WorkflowQueryFailedError):
        return False  # no worker has run its first task yet
    return view is not None and view.step is DeletionStep.ESCALATED


# -- rollouts on the dev server ------------------------------------------------------------


@pytest.mark.e2e
async def test_an_unversioned_worker_serves_workflows_that_declare_a_behaviour(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """The server refuses a task completed with a behaviour by a worker without deployment
    options; the suite's in-process workers and `worker.versioned: false` rely on this."""
    world.add_runner("plain")
    async with runner_build(dev_env.client, world, None):
        handle = await world.request(dev_env.client, "plain")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome is DeletionOutcome.DELETED
    assert set(builds_of(await task_builds(handle))) == {UNVERSIONED}
    assert await versioning_of(handle) == ("UNSPECIFIED", UNVERSIONED)


@pytest.mark.e2e
async def test_an_auto_upgrade_deletion_moves_to_build_2_and_finishes_after_build_1_stops(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    client = dev_env.client
    deployment = new_deployment()
    build_1 = WorkerDeploymentVersion(deployment, "build-1")
    build_2 = WorkerDeploymentVersion(deployment, "build-2")
    world.add_runner("long", busy=True)  # busy for ever: the deletion waits, escalated
    async with contextlib.AsyncExitStack() as workers:
        worker_1 = await workers.enter_async_context(runner_build(client, world, build_1))
        await make_current_once_polled(client, build_1)
        handle = await world.request(client, "long")
        await until(
            lambda: escalated(client, "long"),
            "the deletion to escalate on build 1",
            explain=lambda: where_it_is(handle),
        )

        await workers.enter_async_context(runner_build(client, world, build_2))
        await make_current_once_polled(client, build_2)
        assert await current_build_id(client, deployment) == "build-2"
        await worker_1.shutdown()

        # The operator's answer is the next workflow task: only build 2 is there to take it.
        await world.request(client, "long", force=True)
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.outcome is DeletionOutcome.DELETED and result.forced
    assert not world.instance_exists("long")
    seen = await task_builds(handle)
    builds = builds_of(seen)
    switch = builds.index("build-2")
    assert builds[:switch] and set(builds[:switch]) == {"build-1"}, builds
    assert set(builds[switch:]) == {"build-2"}, builds
    assert set(builds_after_last_request(seen)) == {"build-2"}, seen
    assert await versioning_of(handle) == ("AUTO_UPGRADE", "build-2")


@pytest.mark.e2e
async def test_a_pinned_sweep_started_on_build_1_finishes_there_while_build_2_is_current(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, world: RunnerWorld
) -> None:
    client = dev_env.client
    deployment = new_deployment()
    build_1 = WorkerDeploymentVersion(deployment, "build-1")
    build_2 = WorkerDeploymentVersion(deployment, "build-2")
    orphan = await _orphaned_queued_resource(dev_env, emu)
    # The orphan stays DELETING until the test moves the emulator's clock: the sweep is in
    # flight on build 1 for as long as the test needs.
    emu.set_scenario(orphan, Scenario(assign_after=None, delete_duration=3600))

    def tpu_build(version: WorkerDeploymentVersion) -> Worker:
        tpu = emulator_client(emu.grpc_target)
        return build_worker(
            client, harness.settings_for_tests(), tpu, world.task_queue, world.deps, version=version
        )

    async with tpu_build(build_1):
        await make_current_once_polled(client, build_1)
        handle = await client.start_workflow(
            TpuSweeper.run,
            SweepRequest(project="keeper-test", zone="us-central2-b"),
            id=f"tpu-sweeper-test-{uuid.uuid4().hex[:6]}",
            task_queue=world.task_queue,
            result_type=SweepReport,
        )

        async def deleting() -> bool:
            qrs = emu.state()["queued_resources"]
            return any(qr["id"] == orphan and qr["state"] == "DELETING" for qr in qrs)

        await until(deleting, "the sweep's delete of the orphan")
        async with tpu_build(build_2):
            await make_current_once_polled(client, build_2)
            emu.advance(3601)
            report = await asyncio.wait_for(handle.result(), 60)
            assert await current_build_id(client, deployment) == "build-2"

    qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{orphan}"
    assert report.deleted == [f"{qr} (owner {bootstrap_workflow_id(orphan)}: TERMINATED)"]
    assert set(builds_of(await task_builds(handle))) == {"build-1"}
    assert await versioning_of(handle) == ("PINNED", "build-1")
    assert_no_leaks(emu)


async def _orphaned_queued_resource(dev_env: WorkflowEnvironment, emu: TpuEmulator) -> str:
    """A keeper-labelled QR whose owning bootstrap was terminated: the sweeper deletes it."""
    request = slice_request(poll_interval=timedelta(seconds=1))
    dead = await dev_env.client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=f"nobody-polls-{uuid.uuid4().hex[:6]}",
    )
    await dead.terminate(reason="test: lost before it could compensate")
    await emulator_client(emu.grpc_target).create_queued_resource(
        request=tpu_v2.CreateQueuedResourceRequest(
            parent=parent(request.project, request.zone),
            queued_resource_id=request.slice_name,
            queued_resource=build_queued_resource(
                request, owner_labels(dead.id, dead.result_run_id or ""), timedelta(hours=4)
            ),
        )
    )
    return request.slice_name


@pytest.mark.e2e
async def test_runs_an_unversioned_worker_started_move_to_the_first_current_version(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """The first versioned release: start it beside the unversioned workers, make it current,
    then stop them. Their runs continue on the new build, which must replay their histories,
    as for any compatible change."""
    client = dev_env.client
    build_1 = WorkerDeploymentVersion(new_deployment(), "build-1")
    world.add_runner("legacy", busy=True)
    async with contextlib.AsyncExitStack() as workers:
        unversioned = await workers.enter_async_context(runner_build(client, world, None))
        handle = await world.request(client, "legacy")
        await until(
            lambda: escalated(client, "legacy"),
            "the deletion to escalate unversioned",
            explain=lambda: where_it_is(handle),
        )

        await workers.enter_async_context(runner_build(client, world, build_1))
        await make_current_once_polled(client, build_1)
        await unversioned.shutdown()

        await world.request(client, "legacy", force=True)
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.outcome is DeletionOutcome.DELETED and result.forced
    seen = await task_builds(handle)
    builds = builds_of(seen)
    assert builds[0] == UNVERSIONED and builds[-1] == "build-1", builds
    assert set(builds_after_last_request(seen)) == {"build-1"}, seen
    assert await versioning_of(handle) == ("AUTO_UPGRADE", "build-1")


# -- the local stack -----------------------------------------------------------------------


@pytest.mark.e2e
@NEEDS_EMULATOR
def test_dev_up_makes_the_worker_build_current_so_workflows_reach_it(keeper: Keeper) -> None:  # noqa: F811
    keeper.env["KEEPER_BUILD_ID"] = "dev-stack-test"
    up = keeper.dev_ok("up", "--timeout", "90")
    assert "build dev-stack-test (made current)" in up.stdout, up.stdout

    # A workflow on the stack's task queue runs: the sweeper, once, to the end.
    sweep = keeper.ok("tpu", "sweep", "--dry-run", "--json", timeout=60)
    assert json.loads(sweep.stdout)["examined"] == 0, sweep.stdout

    code, report = keeper.status()
    assert code == 0, report
    assert "build dev-stack-test (current)" in report["components"]["worker"]["detail"]
    again = keeper.dev_ok("up")
    assert "build dev-stack-test (current)" in again.stdout, again.stdout


@pytest.mark.e2e
async def test_admin_set_current_version_refuses_a_build_nobody_polls_then_makes_it_current(
    dev_env: WorkflowEnvironment, world: RunnerWorld, tmp_path: Path
) -> None:
    """The first deploy's last step as deploy/k8s's Job runs it: the build from
    KEEPER_BUILD_ID, the deployment from the settings."""
    client = dev_env.client
    version = WorkerDeploymentVersion(new_deployment(), "img-1")
    config = tmp_path / "keeper.yaml"
    config.write_text(json.dumps({"worker": {"deployment_name": version.deployment_name}}))
    env = clean_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        TEMPORAL_NAMESPACE=client.namespace,
        KEEPER_BUILD_ID=version.build_id,
    )
    command = ["--config", str(config), "admin", "set-current-version"]

    refused = await keeper_async(*command, "--json", env=env)
    assert refused.returncode == 1, refused
    error = json.loads(refused.stdout)["error"]
    assert (error["deployment_name"], error["build_id"]) == (version.deployment_name, "img-1")
    assert "no worker of it has polled yet" in error["message"], error
    assert "KEEPER_BUILD_ID=img-1" in error["hint"], error

    async def known() -> bool:
        try:
            response = await client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=client.namespace, deployment_name=version.deployment_name
                )
            )
        except RPCError:
            return False  # the deployment exists once a worker of it has polled
        summaries = response.worker_deployment_info.version_summaries
        return any(s.deployment_version.build_id == version.build_id for s in summaries)

    async with runner_build(client, world, version):
        await until(known, "the server to know the build once its worker polls")
        made = await keeper_async(*command, "--json", env=env)
        assert made.returncode == 0, made
        assert json.loads(made.stdout) == {
            "deployment_name": version.deployment_name,
            "build_id": "img-1",
            "previous_build_id": None,
        }
        assert await current_build_id(client, version.deployment_name) == "img-1"
        # Again, naming the build: nothing changes, and the text says what is current.
        again = await keeper_async(*command, "--build-id", "img-1", env=env)
        assert again.returncode == 0, again
        assert again.stdout == (
            f"worker deployment {version.deployment_name}: build img-1 is current "
            "(was build img-1)\n"
        )
