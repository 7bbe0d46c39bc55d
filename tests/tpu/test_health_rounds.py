"""A health round's time does not grow with the VMs that never answer, a round cut short
still tells what it saw, and the health deadline takes its last round in every case.

The workflow tests run on the Temporal dev server in real time: a probe's timeout is real
time on the worker, so the server's schedule-to-close must be real time too.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    RetryState,
    TimeoutError,
    TimeoutType,
)
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.health import HealthActivities, HealthProber
from keeper.domain.tpu.failures import SeenRound
from keeper.domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    BootstrapStatus,
    HealthCheckInput,
    HealthReport,
    VmFailure,
)
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.tpu.observation import VmEndpoint
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.bootstrap_run import LAST_LOOK_PAST_DEADLINE
from keeper.workflows.tpu.errors import last_health_report
from tests.harness import assert_no_leaks, running_worker, settings_for_tests, slice_request

pytestmark = pytest.mark.e2e


def many_vms(vms: int, **overrides: Any) -> SliceRequest:
    return slice_request(
        accelerator_type="v4-8",
        vms_per_node=vms,
        poll_interval=timedelta(seconds=1),
        **overrides,
    )


def at_once(vms: int, **overrides: Any) -> Scenario:
    return Scenario(
        assign_after=0, active_after=0, ips_after=0, phone_home=False, vm_count=vms, **overrides
    )


async def failed(env: WorkflowEnvironment, queue: str, request: SliceRequest) -> BootstrapFailure:
    handle: WorkflowHandle[Any, BootstrapResult] = await env.client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )
    with pytest.raises(WorkflowFailureError) as caught:
        await asyncio.wait_for(handle.result(), 120)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "SliceBootstrapFailed", cause
    return BootstrapFailure.model_validate(cause.details[0])


async def phase_child_events(env: WorkflowEnvironment, request: SliceRequest) -> list[Any]:
    child = env.client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
    return list((await child.fetch_history()).events)


def health_rounds_scheduled(events: list[Any]) -> list[str]:
    return [
        json.loads(e.user_metadata.summary.data)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tpu.check_health"
    ]


async def test_a_round_over_more_unreachable_vms_than_the_old_bound_reports_the_healthy_ones(
    dev_env: WorkflowEnvironment, emu: TpuEmulator
):
    # 512 VMs, 448 of which accept and never answer: 7 waves of 64 probes, 7 probe timeouts,
    # had a round been bounded by 64 probes in flight; every VM at once, one. The health
    # deadline lies between the two, so a round must finish within it. The probe timeout is
    # keeper's default: the emulated VMs answer from this test's own event loop, which the
    # round's 512 connections keep busy.
    settings = settings_for_tests()
    settings.health.timeout = timedelta(seconds=2)
    vms, unreachable = 512, list(range(64, 512))
    deadline = settings.health.timeout * 3
    assert len(unreachable) // 64 * settings.health.timeout > deadline
    request = many_vms(vms, deadlines={"health": deadline})
    emu.set_scenario(request.slice_name, at_once(vms, unreachable_vms=unreachable))
    async with running_worker(dev_env.client, emu, settings=settings) as worker:
        failure = await failed(dev_env, worker.task_queue, request)
        status = await dev_env.client.get_workflow_handle(
            bootstrap_workflow_id(request.slice_name)
        ).query("status", result_type=BootstrapStatus)
    assert (failure.phase.value, failure.kind) == ("health", "deadline")
    assert f"448 of {vms} VMs not healthy" in failure.message, failure.message
    assert sorted(vm.index for vm in failure.failing_vms) == unreachable
    assert {vm.reason for vm in failure.failing_vms} == {"no answer within 2s"}
    # The live view counted the healthy VMs, not 0 of 512.
    assert status.vms_healthy == 64
    assert_no_leaks(emu)


async def test_the_deadline_with_a_round_in_flight_still_takes_the_last_round(
    dev_env: WorkflowEnvironment, emu: TpuEmulator
):
    # The first round needs a whole probe timeout for VM 0, which never answers; the
    # health deadline is half of that (and past the 1 s a round is always given), so the
    # server times the round out at the deadline, with no round finished.
    settings = settings_for_tests()
    settings.health.timeout = timedelta(seconds=3)
    request = slice_request(
        accelerator_type="v4-32", poll_interval=timedelta(seconds=1),
        deadlines={"health": settings.health.timeout / 2},
    )  # fmt: skip
    emu.set_scenario(request.slice_name, at_once(4, unreachable_vms=[0]))
    async with running_worker(dev_env.client, emu, settings=settings) as worker:
        failure = await failed(dev_env, worker.task_queue, request)
        events = await phase_child_events(dev_env, request)
    assert [vm.index for vm in failure.failing_vms] == [0]
    assert "1 of 4 VMs not healthy" in failure.message, failure.message
    assert f"{request.slice_name}/0 " in failure.message
    assert "no answer within 3s" in failure.message
    rounds = health_rounds_scheduled(events)
    assert len(rounds) == 2 and rounds[-1] == "health: last round at the deadline", rounds
    patches = [
        payload.data
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        for payloads in e.marker_recorded_event_attributes.details.values()
        for payload in payloads.payloads
    ]
    assert any(LAST_LOOK_PAST_DEADLINE.encode() in data for data in patches), patches
    assert_no_leaks(emu)


# -- a round's heartbeat, and what the workflow reads back from it ----------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose connections the kernel accepts and nobody ever answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


async def test_a_round_heartbeats_what_it_has_seen_so_far(silent_port: int):
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.info = replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))
    env.on_heartbeat = lambda *details: beats.append(details[0])
    activities = HealthActivities(HealthProber(concurrency=8, timeout=timedelta(seconds=1)))
    report = await env.run(
        activities.check_health,
        HealthCheckInput(
            targets=[VmEndpoint(node="n", index=0, ip="127.0.0.1")], port=silent_port, path="/h"
        ),
    )
    assert [f.reason for f in report.failing] == ["no answer within 1s"]
    assert beats, "no heartbeat during a round of a whole probe timeout"
    first = beats[0]
    assert isinstance(first, HealthReport)
    assert (first.total, first.healthy, first.failing) == (1, 0, [])
    assert 0 < first.round_seconds < 1


def _activity_error(cause: BaseException) -> ActivityError:
    err = ActivityError(
        "activity timed out",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="tpu.check_health",
        activity_id="1",
        retry_state=RetryState.TIMEOUT,
    )
    err.__cause__ = cause
    return err


def test_a_round_cut_short_reports_its_last_heartbeat():
    partial = HealthReport(
        total=4096,
        healthy=2000,
        failing=[VmFailure(node="n", index=7, ip="10.0.0.7", reason="HTTP 503")],
        round_seconds=1.2,
    )
    cut = TimeoutError(
        "activity timeout",
        type=TimeoutType.SCHEDULE_TO_CLOSE,
        last_heartbeat_details=[partial.model_dump(mode="json")],
    )
    assert last_health_report(_activity_error(cut)) == SeenRound(partial, "cut short")
    # No heartbeat, and the attempt before failed with its report: that round.
    earlier = HealthReport(total=4, healthy=3)
    before = ApplicationError("1 more VM", earlier.model_dump(mode="json"), type="Waiting")
    silent = TimeoutError(
        "activity timeout", type=TimeoutType.SCHEDULE_TO_CLOSE, last_heartbeat_details=[]
    )
    silent.__cause__ = before
    assert last_health_report(_activity_error(silent)) == SeenRound(earlier, "finished")
    bare = TimeoutError("t", type=TimeoutType.SCHEDULE_TO_CLOSE, last_heartbeat_details=[])
    assert last_health_report(_activity_error(bare)) is None
