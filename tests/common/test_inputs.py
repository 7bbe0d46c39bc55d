"""Bad input never wedges a workflow: missing, extra or malformed inputs fail at once, and
inputs from outside are strict (no "yes" for true, no "2" for 2)."""

from __future__ import annotations

import asyncio
import json
import typing
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from emulators.provider import state as provider_state
from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.reclaim.state import JobReclaimInput
from keeper.domain.runners.deletion_state import DeletionState, RunnerDeletionInput
from keeper.domain.runners.models import (
    DeletionOutcome,
    DeletionPolicy,
    DeletionRequest,
    deletion_workflow_id,
)
from keeper.domain.runners.reconcile import ReconcileRequest
from keeper.domain.runners.status import InstanceStatus
from keeper.domain.tpu.models import SweepRequest, TeardownRequest
from keeper.domain.tpu.naming import bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.runtime.settings import SettingsError, load_settings
from keeper.workers.input_guard import INVALID_INPUT
from keeper.workers.registry import INPUT_HELP, WORKFLOWS
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.e2e_support import temporal_cli, wait_for_phase
from tests.harness import assert_no_leaks, running_worker, slice_request
from tests.runners.world import RunnerWorld, runner_worker

SLICE = {
    "slice_name": "strict-a",
    "project": "keeper-test",
    "zone": "us-central2-b",
    "accelerator_type": "v4-32",
    "runtime_version": "tpu-ubuntu2204-base",
    "capacity": "on-demand",
}


def _reclaim(path: tuple[str, ...], value: object) -> dict[str, Any]:
    """The documented JobReclaim example with the field at `path` set to `value`."""
    data = json.loads(json.dumps(INPUT_HELP["JobReclaim"].example))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return dict(data)


def _name(cls: type) -> str:
    return cls.__temporal_workflow_definition.name  # type: ignore[attr-defined]


def _input_type(cls: type) -> type[BaseModel]:
    hints = typing.get_type_hints(cls.run)  # type: ignore[attr-defined]
    return next(v for k, v in hints.items() if k != "return")


def decode(model: type[Any], data: object) -> Any:
    """What a worker does with a payload: the pydantic converter's validate_json."""
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(data).encode())
    return pydantic_data_converter.payload_converter.from_payloads([payload], [model])[0]


def _locations(err: ValidationError) -> set[str]:
    return {".".join(str(p) for p in e["loc"]) for e in err.errors()}


# ---- strict inputs, as the worker decodes them ------------------------------------------


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (RunnerDeletionInput, {"runner": "r", "request": {"force": "yes"}}, "request.force"),
        (RunnerDeletionInput, {"runner": "r", "request": {"force": 1}}, "request.force"),
        # The policy comes from the worker's settings (runners.policy), never the input.
        (RunnerDeletionInput, {"runner": "r", "policy": {"busy_wait": "30s"}}, "policy"),
        (DeletionPolicy, {"force_provider_attempts": "2"}, "force_provider_attempts"),
        (DeletionPolicy, {"registration_cleanup_attempts": 2.0}, "registration_cleanup_attempts"),
        (DeletionPolicy, {"busy_wait": "30"}, "busy_wait"),
        (DeletionPolicy, {"busy_poll": True}, "busy_poll"),
        (DeletionRequest, {"force": "true"}, "force"),
        (SliceRequest, {**SLICE, "node_count": "2"}, "node_count"),
        (SliceRequest, {**SLICE, "health_port": "8080"}, "health_port"),
        (SliceRequest, {**SLICE, "vms_per_node": "4"}, "vms_per_node"),
        (SliceRequest, {**SLICE, "poll_interval": "30"}, "poll_interval"),
        (SliceRequest, {**SLICE, "deadlines": {"ready": "0:10:00"}}, "deadlines.ready"),
        (SliceRequest, {**SLICE, "deadlines": {"assign": True}}, "deadlines.assign"),
        (SliceRequest, {**SLICE, "deadlines": {"assign": "P99999D"}}, "deadlines.assign"),
        (TeardownRequest, {**SLICE, "node_count": "2"}, "node_count"),
        (
            SweepRequest,
            {"project": "keeper-test", "zone": "us-central2-b", "dry_run": "no"},
            "dry_run",
        ),
        (ReconcileRequest, {"max_actions": "5"}, "max_actions"),
        (ReconcileRequest, {"provider_timeout_s": "60"}, "provider_timeout_s"),
        (JobReclaimInput, _reclaim(("holding", "node"), "GPU Node 07"), "holding.node"),
        (JobReclaimInput, _reclaim(("holding", "job_id"), 2**32), "holding.job_id"),
        (JobReclaimInput, _reclaim(("holding", "epoch"), 0), "holding.epoch"),
        (JobReclaimInput, _reclaim(("first", "verdict"), "kill"), "first.verdict"),
        # The policy comes from the worker's settings (reclaim.policy), never the input.
        (JobReclaimInput, _reclaim(("policy",), {"graceful_tries": 3}), "policy"),
        (JobReclaimInput, _reclaim(("mode",), "act"), "mode"),
        (JobReclaimInput, _reclaim(("holding", "job_id"), "1234"), "holding.job_id"),
    ],
)  # fmt: skip
def test_outside_input_is_strict(model: type[Any], data: dict[str, Any], field: str) -> None:
    # TeardownRequest takes fewer fields than a slice request.
    if model is TeardownRequest:
        data = {k: data[k] for k in ("slice_name", "project", "zone", "node_count")}
    with pytest.raises(ValidationError) as caught:
        decode(model, data)
    assert _locations(caught.value) == {field}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("PT15M", 900),
     ("P1DT2H", 93600), (30, 30), (2.5, 2.5)],
)  # fmt: skip
def test_durations_take_every_documented_form(value: object, seconds: float) -> None:
    request = decode(SliceRequest, {**SLICE, "deadlines": {"ready": value}})
    policy = decode(DeletionPolicy, {"busy_wait": value})
    assert request.deadlines.ready.total_seconds() == seconds
    assert policy.busy_wait.total_seconds() == seconds


def test_what_keeper_writes_decodes_again() -> None:
    # Recorded histories hold SecondsDuration as floats and HumanDuration as ISO-8601.
    policy = DeletionPolicy()
    assert decode(DeletionPolicy, json.loads(policy.model_dump_json())) == policy
    request = slice_request(deadlines={"assign": "4h"}, node_count=2)
    assert decode(SliceRequest, json.loads(request.model_dump_json())) == request
    busy_since = datetime(2026, 12, 1, tzinfo=UTC)
    carry = DeletionState(runner="r-1", run=2, force=True, busy_since=busy_since)
    inp = RunnerDeletionInput(runner="r-1", request=DeletionRequest(force=True), carry=carry)
    assert decode(RunnerDeletionInput, json.loads(inp.model_dump_json())) == inp


def test_a_quoted_count_in_the_settings_file_names_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "keeper.yaml"
    config.write_text("runners:\n  deletion:\n    force_provider_attempts: '2'\n")
    with pytest.raises(SettingsError, match=r"runners\.deletion\.force_provider_attempts"):
        load_settings(config, env={})
    config.write_text("runners:\n  deletion:\n    busy_wait: 10m\n    force_provider_attempts: 2\n")
    assert load_settings(config, env={}).runners.deletion.force_provider_attempts == 2


# ---- every workflow's help -------------------------------------------------------------


@pytest.mark.parametrize("cls", WORKFLOWS, ids=_name)
def test_every_workflow_has_input_help_with_a_valid_example(cls: type) -> None:
    help = INPUT_HELP[_name(cls)]
    assert help.text(), f"{_name(cls)} needs an example or a note"
    if help.example is not None:
        decode(_input_type(cls), help.example)


# ---- on the dev server -------------------------------------------------------------------


@pytest.fixture(scope="module")
async def guarded(
    dev_env: WorkflowEnvironment, shared_emulator: TpuEmulator
) -> AsyncIterator[Worker]:
    async with running_worker(dev_env.client, shared_emulator) as worker:
        yield worker


async def _failure(handle: WorkflowHandle[Any, Any]) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), 30)
    assert isinstance(caught.value.cause, ApplicationError), caught.value.cause
    return caught.value.cause


async def _event_types(handle: WorkflowHandle[Any, Any]) -> list[EventType.ValueType]:
    return [event.event_type for event in (await handle.fetch_history()).events]


async def _failed_at_once(handle: WorkflowHandle[Any, Any]) -> None:
    """FAILED on its first workflow task: no task failure was ever retried."""
    assert (await handle.describe()).status is WorkflowExecutionStatus.FAILED
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in await _event_types(handle)


@pytest.mark.parametrize("inputs", [[], [{}, {}]], ids=["no input", "two inputs"])
@pytest.mark.parametrize("cls", WORKFLOWS, ids=_name)
async def test_a_workflow_with_the_wrong_number_of_inputs_fails_at_once(
    dev_env: WorkflowEnvironment, guarded: Worker, cls: type, inputs: list[object]
) -> None:
    name = _name(cls)
    handle = await dev_env.client.start_workflow(
        name, args=inputs, id=f"inputs-{uuid.uuid4().hex[:8]}", task_queue=guarded.task_queue
    )
    failure = await _failure(handle)
    assert failure.type == INVALID_INPUT and failure.non_retryable
    got = "no input" if not inputs else "2 inputs"
    assert failure.message.startswith(f"{name} takes one {_input_type(cls).__name__}")
    assert f"got {got}" in failure.message
    assert INPUT_HELP[name].text() in failure.message
    await _failed_at_once(handle)


async def test_a_malformed_input_fails_at_once_naming_every_field(
    dev_env: WorkflowEnvironment, guarded: Worker, emu: TpuEmulator
) -> None:
    workflow_id = f"tpu-bootstrap-strict-{uuid.uuid4().hex[:6]}"
    bad = {**SLICE, "node_count": "2", "health_port": "8080", "poll_interval": "30",
           "deadlines": {"assign": True}}  # fmt: skip
    started = await temporal_cli(
        dev_env,
        "workflow", "start", "--type", "TpuSliceBootstrap",
        "--task-queue", guarded.task_queue, "--workflow-id", workflow_id,
        "--input", json.dumps(bad),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    handle = dev_env.client.get_workflow_handle(workflow_id)
    failure = await _failure(handle)
    for field in ("node_count", "health_port", "poll_interval", "deadlines.assign"):
        assert field in failure.message
    await _failed_at_once(handle)
    assert emu.state()["queued_resources"] == []
    assert emu.state()["nodes"] == []


async def test_a_malformed_job_reclaim_input_fails_at_once_naming_every_field(
    dev_env: WorkflowEnvironment, guarded: Worker
) -> None:
    workflow_id = f"reclaim-strict-{uuid.uuid4().hex[:6]}"
    bad = _reclaim(("holding", "epoch"), 0)
    bad["first"]["verdict"] = "kill"
    del bad["holding"]["node"]
    started = await temporal_cli(
        dev_env,
        "workflow", "start", "--type", "JobReclaim",
        "--task-queue", guarded.task_queue, "--workflow-id", workflow_id,
        "--input", json.dumps(bad),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    handle = dev_env.client.get_workflow_handle(workflow_id)
    failure = await _failure(handle)
    for field in ("holding.node", "holding.epoch", "first.verdict"):
        assert field in failure.message, failure.message
    await _failed_at_once(handle)


async def test_a_signal_with_the_wrong_number_of_inputs_is_dropped(
    dev_env: WorkflowEnvironment, guarded: Worker, emu: TpuEmulator
) -> None:
    request = slice_request(poll_interval=1)
    emu.set_scenario(request.slice_name, Scenario(assign_after=None, delete_duration=0.3))
    handle = await dev_env.client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=guarded.task_queue,
    )
    await wait_for_phase(handle, Phase.ASSIGN)
    for args in ([], [{}, {}]):
        signalled = (await _event_types(handle)).count(
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        )
        await handle.signal("progress", args=args)
        assert await _task_after_signal(handle, signalled + 1) == (
            EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        )
    assert (await wait_for_phase(handle, Phase.ASSIGN)).slice_name == request.slice_name
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), 60)
    assert isinstance(caught.value.cause, CancelledError)
    assert_no_leaks(emu)


async def _task_after_signal(
    handle: WorkflowHandle[Any, Any], signals: int, within: float = 30.0
) -> EventType.ValueType:
    """How the first workflow task after the `signals`-th signal ended."""
    ends = (EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        types = await _event_types(handle)
        seen = [
            i for i, t in enumerate(types) if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        ]
        if len(seen) >= signals:
            after = [t for t in types[seen[signals - 1] :] if t in ends]
            if after:
                return after[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no workflow task ended after signal {signals} of {handle.id}")


async def _start_deletion_by_hand(
    env: WorkflowEnvironment, world: RunnerWorld, runner: str, *inputs: object
) -> WorkflowHandle[Any, Any]:
    flags = [arg for data in inputs for arg in ("--input", json.dumps(data))]
    started = await temporal_cli(
        env,
        "workflow", "start", "--type", "RunnerDeletion",
        "--task-queue", world.task_queue, "--workflow-id", deletion_workflow_id(runner),
        *flags,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    return env.client.get_workflow_handle(deletion_workflow_id(runner))


@pytest.mark.parametrize(
    "inputs", [(), ({"runner": "x"}, {"runner": "x"})], ids=["no input", "two inputs"]
)
async def test_a_deletion_started_without_its_input_fails_and_the_next_request_deletes(
    dev_env: WorkflowEnvironment, world: RunnerWorld, inputs: tuple[object, ...]
) -> None:
    runner = f"bare-{uuid.uuid4().hex[:6]}"
    world.add_runner(runner)
    async with runner_worker(dev_env.client, world):
        handle = await _start_deletion_by_hand(dev_env, world, runner, *inputs)
        failure = await _failure(handle)
        assert "RunnerDeletion takes one RunnerDeletionInput (required: runner)" in failure.message
        assert """Example: --input '{"runner": "r-1"}'""" in failure.message
        await _failed_at_once(handle)
        # What used to join the wedged run and hang now starts a deletion of its own.
        result = await asyncio.wait_for((await world.request(dev_env.client, runner)).result(), 60)
    assert result.outcome is DeletionOutcome.DELETED
    assert world.status(runner) is InstanceStatus.DELETED


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"request": {"force": "yes"}}, "request.force"),
        ({"policy": {"busy_wait": "30s"}}, "policy"),
    ],
)
async def test_a_deletion_input_that_is_not_strictly_typed_fails_before_touching_the_runner(
    dev_env: WorkflowEnvironment, world: RunnerWorld, extra: dict[str, Any], field: str
) -> None:
    runner = f"strict-{uuid.uuid4().hex[:6]}"
    world.add_runner(runner)
    before = world.store.require(runner)
    async with runner_worker(dev_env.client, world):
        handle = await _start_deletion_by_hand(dev_env, world, runner, {"runner": runner, **extra})
        failure = await _failure(handle)
        await _failed_at_once(handle)
    assert field in failure.message
    assert world.store.require(runner) == before
    assert provider_state.invocations(world.provider_config) == []
