"""Recordings of the TPU family's workflows (bootstrap, its phase child, teardown, sweeper),
replayed by tests/common/test_replay.py like every other recording: every path a bootstrap takes
(ready on queued and on-demand capacity, ready only at the last look, each deadline, a
stockout, a compensation that turns stuck and alerts, a cancel in assign, a name another run
holds, a cancel whose compensation turns stuck or continues as new, a supervisor whose
compensation continues as new), a teardown (plain, cancelled mid-delete, continued as new)
and a sweep (plain, with an orphan it cannot delete). On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> pytest tests/tpu/test_tpu_recordings.py
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.policy import PolicyActivities
from keeper.domain.tpu.models import CompensationPolicy, SweepRequest, TeardownRequest, TpuPolicy
from keeper.domain.tpu.naming import (
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import Capacity, SliceRequest
from keeper.runtime.alerts import ALERT_WEBHOOK_ENV
from keeper.runtime.settings import Settings
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.sweeper import TpuSweeper
from keeper.workflows.tpu.teardown import TpuSliceTeardown
from tests import harness
from tests.e2e_support import wait_for_phase
from tests.harness import running_worker, slice_request
from tests.recording import on_demand, until_rolled_over, write_recording
from tests.webhook_receiver import webhook_receiver

STOCKOUT = Scenario(
    assign_after=None,
    terminal={"state": "FAILED", "after": 8, "message": "no more capacity in zone"},
)
SCENARIOS = {
    "reserved-ready": (slice_request("replay-ready"), Scenario(assign_after=600)),
    "assign-deadline": (slice_request("replay-assign"), Scenario(assign_after=None)),
    "health-deadline": (
        slice_request("replay-health", deadlines={"health": "1m"}),
        Scenario(assign_after=0, active_after=0, unhealthy_vms=[1]),
    ),
    "on-demand-ready": (
        slice_request("replay-node", capacity=Capacity.ON_DEMAND),
        Scenario(active_after=30),
    ),
    # Ready only at the last look, at the deadline (the server gave the poll up early).
    "ready-last-look": (
        slice_request("replay-last-look", poll_interval=timedelta(minutes=10)),
        Scenario(assign_after=0, active_after=0, ips_after=60),
    ),
    # A QR that fails while queued is compensated; one whose deletes are refused for 20
    # minutes turns stuck, then finishes.
    "stockout": (slice_request("replay-stockout"), STOCKOUT),
    "compensation-stuck": (slice_request("replay-stuck"), STOCKOUT),
}
# Scenario -> emulator faults before the bootstrap starts: (method, code, count).
SCENARIO_FAULTS = {"compensation-stuck": ("DeleteQueuedResource", "PERMISSION_DENIED", 30)}
# Each bootstrap is recorded as its two histories, the supervisor's and its phase child's.
BOOTSTRAPS = [
    *SCENARIOS,
    "cancel-during-assign",
    "name-taken",
    "cancel-compensation-stuck",
]
ALERTED = "tpu-stuck-alert.supervisor"
CHILD_CONTINUED = (
    "cancel-compensation-continued.supervisor",
    "cancel-compensation-continued.child.first",
    "cancel-compensation-continued.child.last",
)
SUPERVISOR_CONTINUED = ("compensation-continued.first", "compensation-continued.last")
TEARDOWNS = ("teardown", "teardown-cancelled")
TEARDOWN_CONTINUED = ("teardown-continued.first", "teardown-continued.last")
SWEEPS = ("sweep", "sweep-undeletable-orphan")
LABELS: list[str] = [
    *(f"{label}.{run}" for label in BOOTSTRAPS for run in ("supervisor", "child")),
    ALERTED,
    *CHILD_CONTINUED,
    *SUPERVISOR_CONTINUED,
    *TEARDOWNS,
    *TEARDOWN_CONTINUED,
    *SWEEPS,
]


async def _record_bootstrap(client: Client, label: str, slice_name: str) -> None:
    """A bootstrap's two histories, supervisor and phase child, as LABEL.{supervisor,child}."""
    for run, workflow_id in (
        ("supervisor", bootstrap_workflow_id(slice_name)),
        ("child", bootstrap_run_workflow_id(slice_name)),
    ):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        write_recording(f"{label}.{run}.json", history.to_json())


async def _start(client: Client, queue: str, request: SliceRequest) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
    )


async def _closed(handle: WorkflowHandle[Any, Any], within: float = 120) -> None:
    """Failed and cancelled runs are histories worth keeping too."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(handle.result(), within)


@on_demand
@pytest.mark.parametrize("label", list(SCENARIOS))
async def test_record(time_env, clocked_emu: TpuEmulator, label: str):
    request, scenario = SCENARIOS[label]
    clocked_emu.set_scenario(request.slice_name, scenario)
    if label in SCENARIO_FAULTS:
        method, code, count = SCENARIO_FAULTS[label]
        clocked_emu.inject_fault(method, code, count=count, slice=request.slice_name)
    async with running_worker(time_env.client, clocked_emu) as worker:
        await _closed(await _start(time_env.client, worker.task_queue, request))
    await _record_bootstrap(time_env.client, label, request.slice_name)


@on_demand
async def test_record_cancel_compensation_stuck(time_env, clocked_emu: TpuEmulator):
    """A bootstrap cancelled in assign, whose phase child's compensation is refused for 20
    minutes, turns stuck (the child tells its supervisor each window), then finishes."""
    request = slice_request("replay-cancel-stuck")
    clocked_emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=30, slice=request.slice_name
    )
    async with running_worker(time_env.client, clocked_emu) as worker:
        handle = await _start(time_env.client, worker.task_queue, request)
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        await _closed(handle)
    await _record_bootstrap(time_env.client, "cancel-compensation-stuck", request.slice_name)


@on_demand
async def test_record_a_cancel_and_a_taken_name_then_their_teardown(
    dev_env: WorkflowEnvironment, emu: TpuEmulator
):
    """A bootstrap cancelled in assign; a second bootstrap of a name a completed one holds
    (it creates and deletes nothing); then the teardown that releases that slice."""
    cancelled = slice_request("replay-cancel", poll_interval="1s")
    taken = slice_request("replay-taken", poll_interval="1s")
    emu.set_scenario(cancelled.slice_name, Scenario(assign_after=None))
    emu.set_scenario(taken.slice_name, Scenario(assign_after=0.2, active_after=0.2))
    async with running_worker(dev_env.client, emu) as worker:
        handle = await _start(dev_env.client, worker.task_queue, cancelled)
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        await _closed(handle, 60)
        for _ in ("handed over", "taken"):
            await _closed(await _start(dev_env.client, worker.task_queue, taken), 60)
        await _record_bootstrap(dev_env.client, "cancel-during-assign", cancelled.slice_name)
        await _record_bootstrap(dev_env.client, "name-taken", taken.slice_name)
        teardown = await dev_env.client.start_workflow(
            TpuSliceTeardown.run,
            TeardownRequest(slice_name=taken.slice_name, project=taken.project, zone=taken.zone),
            id=teardown_workflow_id(taken.slice_name),
            task_queue=worker.task_queue,
        )
        await asyncio.wait_for(teardown.result(), 60)
        write_recording("teardown.json", (await teardown.fetch_history()).to_json())
    harness.assert_no_leaks(emu)


@on_demand
async def test_record_a_stuck_compensation_that_alerts(time_env, clocked_emu: TpuEmulator):
    """A stockout whose deletes are refused for two hours: stuck, alerted once, finished."""
    from tests.tpu.test_tpu_compensation import wait_for_status

    request = slice_request("replay-stuck-alert")
    clocked_emu.set_scenario(request.slice_name, STOCKOUT)
    clocked_emu.inject_fault(
        "DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=request.slice_name
    )
    async with webhook_receiver("T0KEEPER/B0REPLAY/recording") as receiver:
        with pytest.MonkeyPatch.context() as env:
            env.setenv(ALERT_WEBHOOK_ENV, receiver.url)
            async with running_worker(time_env.client, clocked_emu) as worker:
                handle = await _start(time_env.client, worker.task_queue, request)
                result = asyncio.create_task(_closed(handle))
                stuck = await wait_for_status(handle, lambda s: s.compensation_stuck)
                assert stuck.compensation_started_at is not None
                two_hours_on = stuck.compensation_started_at + timedelta(hours=2)
                while await time_env.get_current_time() < two_hours_on:
                    assert not result.done(), "compensation gave up while deletes were refused"
                    await asyncio.sleep(0.05)
                clocked_emu.clear_faults()
                await result
        assert len(receiver.posts) == 1, receiver.posts
    history = await handle.fetch_history()
    write_recording(f"{ALERTED}.json", history.to_json())


@contextlib.asynccontextmanager
async def _rolling_server(
    emu: TpuEmulator, queue: str, suggest_after: int
) -> AsyncIterator[Client]:
    """A dev server of its own that suggests continue-as-new past `suggest_after` events,
    and a worker on it whose compensation turns stuck after a second: a replay reads the
    suggestion from the history, so it must be the server's (and the time-skipping server
    cannot continue a child workflow as new)."""
    from keeper.runtime import search_attributes as sa
    from keeper.runtime.tpu.client import emulator_client
    from keeper.workers.main import build_worker

    settings: Settings = harness.settings_for_tests()
    # The first window is then a minute (the server ends it at about 30 s), not five.
    settings.bootstrap.compensation_stuck_after = timedelta(seconds=1)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=harness.tool_path("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.ALL),
        ui=False,
        dev_server_log_level="error",
        dev_server_extra_args=[
            "--dynamic-config-value",
            f"limit.historyCount.suggestContinueAsNew={suggest_after}",
        ],
    )
    async with env, build_worker(env.client, settings, emulator_client(emu.grpc_target), queue):
        yield env.client


def _refuse_deletes(emu: TpuEmulator, slice_name: str) -> None:
    emu.inject_fault("DeleteQueuedResource", "PERMISSION_DENIED", count=1_000_000, slice=slice_name)


def _refused_stockout(emu: TpuEmulator, name: str) -> tuple[SliceRequest, str]:
    """A slice whose queued resource fails as a stockout and whose deletes are refused until
    the faults are cleared, and the queue its recording runs on."""
    request = slice_request(name, poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, STOCKOUT)
    _refuse_deletes(emu, request.slice_name)
    return request, f"keeper-replay-{request.slice_name}"


async def _write_runs(
    client: Client, workflow_id: str, first_run: str, first: str, last: str
) -> None:
    for label, run_id in ((first, first_run), (last, None)):
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        write_recording(f"{label}.json", history.to_json())


@on_demand
async def test_record_cancel_compensation_continued(emu: TpuEmulator):
    """A bootstrap cancelled in assign whose phase child's compensation is refused until the
    child continued as new (its supervisor waits, alive), then finishes. Both runs of the
    child are recorded."""
    request = slice_request("replay-cancel-continued", poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, Scenario(assign_after=None))
    _refuse_deletes(emu, request.slice_name)
    queue = f"keeper-replay-{request.slice_name}"
    async with _rolling_server(emu, queue, suggest_after=40) as client:
        handle = await _start(client, queue, request)
        await wait_for_phase(handle, Phase.ASSIGN)
        await handle.cancel()
        child = client.get_workflow_handle(bootstrap_run_workflow_id(request.slice_name))
        first_run = (await child.describe()).run_id
        await until_rolled_over(child, first_run, within=150)
        # The continued run has started compensating before the deletes go through.
        await wait_for_phase(child, Phase.COMPENSATE)
        emu.clear_faults()
        await _closed(handle)
        supervisor, child_first, child_last = CHILD_CONTINUED
        write_recording(f"{supervisor}.json", (await handle.fetch_history()).to_json())
        await _write_runs(client, child.id, first_run, child_first, child_last)


@on_demand
async def test_record_supervisor_compensation_continued(emu: TpuEmulator):
    """A stockout whose compensation is refused until the supervisor continued as new, then
    finishes: both runs of the supervisor."""
    request, queue = _refused_stockout(emu, "replay-continued")
    # Past twenty events the supervisor is well before its compensation starts.
    async with _rolling_server(emu, queue, suggest_after=20) as client:
        handle = await _start(client, queue, request)
        first_run = (await handle.describe()).run_id
        await until_rolled_over(handle, first_run, within=150)
        await wait_for_phase(handle, Phase.COMPENSATE)
        emu.clear_faults()
        await _closed(client.get_workflow_handle(handle.id))
        await _write_runs(client, handle.id, first_run, *SUPERVISOR_CONTINUED)


@on_demand
async def test_record_teardown_continued(emu: TpuEmulator):
    """A teardown whose delete is refused until it continued as new, then finishes: both
    runs."""
    from tests.tpu.test_tpu_teardown import FAST

    request = slice_request("replay-teardown-continued", poll_interval=timedelta(seconds=1))
    emu.set_scenario(request.slice_name, FAST)
    queue = f"keeper-replay-{request.slice_name}"
    # A teardown's history is short: past ten events, its first window's end rolls it over.
    async with _rolling_server(emu, queue, suggest_after=10) as client:
        await asyncio.wait_for((await _start(client, queue, request)).result(), 60)
        _refuse_deletes(emu, request.slice_name)
        teardown = await client.start_workflow(
            TpuSliceTeardown.run,
            TeardownRequest(
                slice_name=request.slice_name, project=request.project, zone=request.zone
            ),
            id=teardown_workflow_id(request.slice_name),
            task_queue=queue,
        )
        first_run = (await teardown.describe()).run_id
        await until_rolled_over(teardown, first_run, within=300)
        emu.clear_faults()
        await asyncio.wait_for(client.get_workflow_handle(teardown.id).result(), 120)
        await _write_runs(client, teardown.id, first_run, *TEARDOWN_CONTINUED)


# Recorded after 1.0.0, so not in LABELS: a supervisor's compensation carried on by a run
# whose settings lowered the stuck threshold below what it had taken (the patch
# `tpu-stuck-threshold-at-resume`): stuck and alerted as the continued run starts.
STUCK_AT_RESUME = ("compensation-stuck-at-resume.first", "compensation-stuck-at-resume.last")


@on_demand
async def test_record_supervisor_compensation_stuck_at_resume(
    emu: TpuEmulator, monkeypatch: pytest.MonkeyPatch
):
    from tests.tpu.test_tpu_compensation import wait_for_status

    reads: list[str] = []

    class LoweredAfterTheFirstRead(PolicyActivities):
        @activity.defn(name="tpu.policy")
        async def policy(self) -> TpuPolicy:
            stuck_after = timedelta(minutes=30) if not reads else timedelta(seconds=1)
            reads.append(activity.info().workflow_run_id or "")
            compensation = CompensationPolicy(stuck_after=stuck_after)
            return (await super().policy()).model_copy(update={"compensation": compensation})

    monkeypatch.setattr("keeper.workers.families.tpu.PolicyActivities", LoweredAfterTheFirstRead)
    request, queue = _refused_stockout(emu, "replay-stuck-at-resume")
    # The first run's window is five minutes (its threshold is 30); past twenty events, it
    # continues as new when that window runs out.
    async with _rolling_server(emu, queue, suggest_after=20) as client:
        handle = await _start(client, queue, request)
        first_run = (await handle.describe()).run_id
        await until_rolled_over(handle, first_run, within=480)
        latest = client.get_workflow_handle(handle.id)
        await wait_for_status(latest, lambda s: s.compensation_stuck, within=60)
        emu.clear_faults()
        await _closed(latest)
        await _write_runs(client, handle.id, first_run, *STUCK_AT_RESUME)


# Recorded after 1.0.0, so not in LABELS (the baseline's paths): the health phase's last
# round taken when the deadline passed with a round still running (the patch
# `tpu-last-look-past-deadline`). In real time: the round outlives the deadline on the worker.
HEALTH_IN_FLIGHT = "health-in-flight-at-deadline"


@on_demand
async def test_record_health_round_in_flight_at_the_deadline(dev_env, emu: TpuEmulator):
    settings = harness.settings_for_tests()
    settings.health.timeout = timedelta(seconds=3)
    request = slice_request(
        "replay-health-in-flight",
        poll_interval=timedelta(seconds=1),
        deadlines={"health": settings.health.timeout / 2},
    )
    emu.set_scenario(
        request.slice_name,
        Scenario(assign_after=0, active_after=0, ips_after=0, unreachable_vms=[0]),
    )
    async with running_worker(dev_env.client, emu, settings=settings) as worker:
        await _closed(await _start(dev_env.client, worker.task_queue, request))
    await _record_bootstrap(dev_env.client, HEALTH_IN_FLIGHT, request.slice_name)


@on_demand
async def test_record_teardown_cancelled_mid_delete(dev_env, emu: TpuEmulator):
    """A cancel waits for the delete it interrupted."""
    from tests.tpu.test_tpu_teardown import handed_over, start_teardown, until_delete_attempt

    async with running_worker(dev_env.client, emu) as worker:
        request = await handed_over(dev_env.client, worker.task_queue, emu)
        emu.inject_fault("DeleteQueuedResource", "UNAVAILABLE", count=2, slice=request.slice_name)
        handle = await start_teardown(dev_env.client, worker.task_queue, request)
        await until_delete_attempt(handle, 2)
        await handle.cancel()
        await _closed(handle, 60)
        history = await handle.fetch_history()
    write_recording("teardown-cancelled.json", history.to_json())


@on_demand
async def test_record_sweeps(dev_env, emu: TpuEmulator):
    """A sweep that deletes a dead owner's QR and keeps a handed-over slice; then one that
    reports the orphan it cannot delete and deletes another."""
    from tests.tpu.test_tpu_sweeper import dead_owner_qr, sweeping_worker, until_listed
    from tests.tpu.test_tpu_teardown import handed_over

    dead, stuck, ordinary = slice_request(), slice_request(), slice_request()
    async with sweeping_worker(dev_env.client, emu, delete_timeout=timedelta(seconds=3)) as w:
        kept = await handed_over(dev_env.client, w.task_queue, emu)
        await dead_owner_qr(dev_env.client, emu, dead)
        passes = ((SWEEPS[0], (dead,)), (SWEEPS[1], (stuck, ordinary)))
        for label, orphans in passes:
            if label == SWEEPS[1]:
                for request in orphans:
                    await dead_owner_qr(dev_env.client, emu, request)
                _refuse_deletes(emu, stuck.slice_name)
            ids = " OR ".join(
                f'WorkflowId = "{bootstrap_workflow_id(r.slice_name)}"' for r in orphans
            )
            query = f'({ids}) AND ExecutionStatus = "Terminated"'
            await until_listed(dev_env.client, query, len(orphans))
            handle = await dev_env.client.start_workflow(
                TpuSweeper.run,
                SweepRequest(project="keeper-test", zone="us-central2-b"),
                id=f"tpu-sweeper-manual-replay-{orphans[0].slice_name}",
                task_queue=w.task_queue,
            )
            await asyncio.wait_for(handle.result(), 90)
            write_recording(f"{label}.json", (await handle.fetch_history()).to_json())
        emu.clear_faults()
        await dev_env.client.execute_workflow(
            TpuSliceTeardown.run,
            TeardownRequest(slice_name=kept.slice_name, project=kept.project, zone=kept.zone),
            id=teardown_workflow_id(kept.slice_name),
            task_queue=w.task_queue,
        )
