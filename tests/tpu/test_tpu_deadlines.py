"""Phase deadlines end at the deadline, not at the last poll that fits before it.

When the next retry of a poll would land past the phase budget, the server fails the poll
at once. These tests pin that a phase then waits for its deadline, looks once more, and
passes if the slice made it in time, or fails no earlier than its budget.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapFailure, BootstrapResult, BootstrapStatus
from keeper.domain.tpu.naming import bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.harness import assert_no_leaks, running_worker, slice_request

TEN_MINUTES = timedelta(minutes=10)


async def run(env: WorkflowEnvironment, queue: str, request: SliceRequest) -> BootstrapResult:
    return await env.client.execute_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


async def fail(
    env: WorkflowEnvironment, queue: str, request: SliceRequest
) -> tuple[BootstrapFailure, BootstrapStatus]:
    with pytest.raises(WorkflowFailureError) as caught:
        await run(env, queue, request)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), cause
    handle = env.client.get_workflow_handle(bootstrap_workflow_id(request.slice_name))
    status = await handle.query("status", result_type=BootstrapStatus)
    return BootstrapFailure.model_validate(cause.details[0]), status


def phase_took(status: BootstrapStatus, phase: Phase) -> timedelta:
    (timing,) = [t for t in status.timings if t.phase is phase]
    assert timing.ended_at is not None, timing
    return timing.ended_at - timing.started_at


async def test_ready_phase_with_a_long_poll_interval_passes_when_ready_by_its_deadline(
    time_env, clocked_emu: TpuEmulator
):
    # Fulfilled at once, IPs a minute later: the first ready poll sees none, and the next one
    # (10 minutes on) would land past the 10-minute budget.
    request = slice_request(poll_interval=TEN_MINUTES)
    clocked_emu.set_scenario(
        request.slice_name, Scenario(assign_after=0, active_after=0, ips_after=60)
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        result = await run(time_env, worker.task_queue, request)
    assert len(result.vms) == request.expected_vms
    # The last look happened at the deadline, not before it.
    assert 600 <= result.phase_seconds["ready"] <= 605, result.phase_seconds
    assert_no_leaks(clocked_emu, frozenset({request.slice_name}))


async def test_ready_phase_that_never_gets_its_ips_fails_at_its_deadline_not_before(
    time_env, clocked_emu: TpuEmulator
):
    request = slice_request(poll_interval=TEN_MINUTES)
    clocked_emu.set_scenario(
        request.slice_name,
        Scenario(assign_after=0, active_after=0, ips_after=0, vms_without_ip=[1]),
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        failure, status = await fail(time_env, worker.task_queue, request)
    assert (failure.phase, failure.kind) == (Phase.READY, "deadline")
    assert "3/4 VMs with IP" in failure.message
    assert TEN_MINUTES <= phase_took(status, Phase.READY) <= TEN_MINUTES + timedelta(seconds=5)
    assert_no_leaks(clocked_emu)


async def test_health_phase_fails_at_its_deadline_not_at_its_last_round(
    time_env, clocked_emu: TpuEmulator
):
    # Rounds every 10 s: the last that fits in 95 s is at 90 s.
    request = slice_request(deadlines={"health": "95s"})
    clocked_emu.set_scenario(
        request.slice_name,
        Scenario(assign_after=0, active_after=0, ips_after=0, unhealthy_vms=[2]),
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        failure, status = await fail(time_env, worker.task_queue, request)
    assert (failure.phase, failure.kind) == (Phase.HEALTH, "deadline")
    assert [vm.index for vm in failure.failing_vms] == [2]
    budget = timedelta(seconds=95)
    assert budget <= phase_took(status, Phase.HEALTH) <= budget + timedelta(seconds=5)
    assert_no_leaks(clocked_emu)


@pytest.mark.e2e
async def test_health_phase_passes_when_the_vms_answer_between_the_last_round_and_the_deadline(
    dev_env, emu: TpuEmulator
):
    # In real time: under time skipping the jump to the deadline can reach the emulated VMs
    # after the last round does. Rounds every 10 s, so the last that fits in 15 s is at 10 s;
    # whether the server then fails the round at once or retries it at the deadline, the
    # phase must pass.
    request = slice_request(poll_interval=timedelta(seconds=10), deadlines={"health": "15s"})
    # Every VM starts answering 12.5 s after its IP: after the 10 s round, before 15 s.
    emu.set_scenario(
        request.slice_name,
        Scenario(assign_after=0, active_after=0, ips_after=0, health_after=12.5),
    )
    async with running_worker(dev_env.client, emu) as worker:
        result = await asyncio.wait_for(run(dev_env, worker.task_queue, request), 60)
    assert len(result.vms) == request.expected_vms
    assert 15 <= result.phase_seconds["health"] <= 20, result.phase_seconds
    assert_no_leaks(emu, frozenset({request.slice_name}))
