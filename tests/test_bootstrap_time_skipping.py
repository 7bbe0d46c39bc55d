"""TpuSliceBootstrap on the time-skipping server: deadlines, terminal states, the incident.

The emulated cloud is real gRPC driven by the real google-cloud-tpu client; only time is
skipped. Every test ends by checking the emulator for anything left behind.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from domain.bootstrap_models import BootstrapFailure, BootstrapResult
from domain.naming import bootstrap_workflow_id
from domain.slice_request import Capacity, SliceRequest
from emulators.tpu import Scenario, TpuEmulator
from tests.harness import assert_no_leaks, running_worker, slice_request
from workflows.tpu_bootstrap import TpuSliceBootstrap


async def bootstrap(env: WorkflowEnvironment, queue: str, request: SliceRequest):
    return await env.client.execute_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


async def failed_bootstrap(
    env: WorkflowEnvironment, queue: str, request: SliceRequest
) -> BootstrapFailure:
    with pytest.raises(WorkflowFailureError) as caught:
        await bootstrap(env, queue, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == "SliceBootstrapFailed"
    return BootstrapFailure.model_validate(cause.details[0])


async def test_reserved_slice_goes_through_every_phase(time_env, clocked_emu: TpuEmulator):
    request = slice_request()
    async with running_worker(time_env.client, clocked_emu) as worker:
        result = await bootstrap(time_env, worker.task_queue, request)
    assert len(result.vms) == request.expected_vms == 4
    assert [p for p in result.phase_seconds] == ["submit", "assign", "provision", "ready", "health"]
    assert_no_leaks(clocked_emu, frozenset({request.slice_name}))
