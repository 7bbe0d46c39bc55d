"""The TPU family's runs: one TpuSliceBootstrap per run, its faults injected on the way.

| fault                        | how                                                        |
|------------------------------|------------------------------------------------------------|
| tpu-unavailable (and -resource-exhausted, -deadline-exceeded) | 1-3 calls of a method fail |
| cancel-<phase>               | the slice is held in the phase, the bootstrap cancelled   |
| terminate-supervisor, -child | held in assign, the supervisor or the phase child ended   |
| worker-kill                  | held in assign for 8 s; the worker is killed and replaced |
| late-fulfilment              | time-skipping: capacity 70 min after the 4 h deadline     |

Every run ends closed (completed, failed or cancelled); what it left behind is the auditor's.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from bench.campaign_plan import RunSpec
from bench.campaign_report import RunOutcome
from bench.campaign_workers import Killable
from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapResult, BootstrapStatus
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest
from tests.harness import slice_request

FAST = Scenario(assign_after=0.5, active_after=0.5, ips_after=0.2, delete_duration=0.3)
HOLD = {
    Phase.ASSIGN: Scenario(assign_after=None, delete_duration=0.3),
    Phase.PROVISION: Scenario(assign_after=0.2, active_after=None, delete_duration=0.3),
    Phase.READY: Scenario(assign_after=0.2, active_after=0.2, vms_without_ip=[1]),
    Phase.HEALTH: Scenario(assign_after=0.2, active_after=0.2, ips_after=0, unhealthy_vms=[0]),
}
# Long enough in assign that the kill lands there even when a busy machine is slow to show it.
SLOW_ASSIGN = Scenario(assign_after=8, active_after=0.5, ips_after=0.2, delete_duration=0.3)
API_CODES = {
    "tpu-unavailable": "UNAVAILABLE",
    "tpu-resource-exhausted": "RESOURCE_EXHAUSTED",
    "tpu-deadline-exceeded": "DEADLINE_EXCEEDED",
}
# Capacity that arrives 70 minutes after the 4 h assign deadline (the seed-000 incident).
LATE_FULFILMENT_S = timedelta(hours=4, minutes=70).total_seconds()
# Upper bounds, generous for a SIGKILL: an activity the dead worker held is retried only once
# its start-to-close timeout has passed.
HOLD_WITHIN_S = 300.0
RESULT_WITHIN_S = 600.0


def _request(name: str, poll: timedelta = timedelta(seconds=1)) -> SliceRequest:
    return slice_request(name, poll_interval=poll)


# Hundreds of runs wait at once in a long campaign: each asks for its status twice a second.
PHASE_POLL_S = 0.5


# The phases of a bootstrap under way, in order: a run seen past the phase it waits for
# is still a run whose work is in flight (a killed worker may have hidden the phase itself).
UNDER_WAY = (Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH)


async def wait_for_phase(
    handle: WorkflowHandle[Any, BootstrapResult],
    phase: Phase,
    within: float,
    *,
    or_later: bool = False,
) -> None:
    wanted = set(UNDER_WAY[UNDER_WAY.index(phase) :]) if or_later else {phase}
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    seen = None
    while loop.time() < end:
        try:
            seen = (await handle.query("status", result_type=BootstrapStatus)).phase
        except Exception:  # no first workflow task yet, or no worker (one is being killed)
            seen = None
        if seen in wanted:
            return
        await asyncio.sleep(PHASE_POLL_S)
    raise AssertionError(f"{handle.id} never reached {phase.value}; last seen {seen}")


def _name(spec: RunSpec) -> str:
    return f"c{spec.index:04d}-{uuid.uuid4().hex[:6]}"


async def _closed(handle: WorkflowHandle[Any, BootstrapResult]) -> tuple[str, str]:
    try:
        result = await asyncio.wait_for(handle.result(), RESULT_WITHIN_S)
        detail = f"{len(result.vms)} VMs"
    except WorkflowFailureError as err:
        detail = str(err.cause)[:160]
    except TimeoutError:
        return "TIMED_OUT", f"not closed within {RESULT_WITHIN_S:g}s"
    desc = await handle.describe()
    return (desc.status.name if desc.status else "UNKNOWN"), detail


async def run_tpu(
    client: Client, emu: TpuEmulator, task_queue: str, worker: Killable, spec: RunSpec
) -> RunOutcome:
    name = _name(spec)
    request = _request(name)
    first = spec.faults[0]
    hold: Phase | None = None
    if first.startswith("cancel-"):
        hold = Phase(first.removeprefix("cancel-"))
        emu.set_scenario(name, HOLD[hold])
    elif first.startswith("terminate-"):
        hold = Phase.ASSIGN
        emu.set_scenario(name, HOLD[hold])
    elif first == "worker-kill":
        hold = Phase.ASSIGN
        emu.set_scenario(name, SLOW_ASSIGN)
    else:
        emu.set_scenario(name, FAST)
    for fault in spec.faults:
        if fault in API_CODES:
            drawn = spec.params[fault]
            emu.inject_fault(drawn["method"], API_CODES[fault], count=drawn["count"], slice=name)
    handle = await client.start_workflow(
        "TpuSliceBootstrap",
        request,
        id=bootstrap_workflow_id(name),
        task_queue=task_queue,
        result_type=BootstrapResult,
    )
    if hold is not None:
        await wait_for_phase(handle, hold, within=HOLD_WITHIN_S, or_later=first == "worker-kill")
        if first.startswith("cancel-"):
            await handle.cancel()
        elif first == "terminate-supervisor":
            await handle.terminate(reason="campaign: supervisor terminated")
        elif first == "terminate-child":
            child = client.get_workflow_handle(bootstrap_run_workflow_id(name))
            await child.terminate(reason="campaign: phase workflow terminated")
        else:
            await worker.kill(since=asyncio.get_running_loop().time())
    if first == "terminate-supervisor":
        # The supervisor is gone at once; the run is over when its child has compensated.
        child = client.get_workflow_handle(bootstrap_run_workflow_id(name))
        with contextlib.suppress(WorkflowFailureError, TimeoutError):
            await asyncio.wait_for(child.result(), RESULT_WITHIN_S)
        desc = await handle.describe()
        status, detail = (desc.status.name if desc.status else "UNKNOWN"), "terminated"
    else:
        status, detail = await _closed(handle)
    return RunOutcome("tpu", spec.label, spec.faults, handle.id, status, detail)


async def run_late_fulfilment(
    env: WorkflowEnvironment, emu: TpuEmulator, task_queue: str, spec: RunSpec
) -> RunOutcome:
    """On the time-skipping server, with `emu` following its clock: the bootstrap gives up
    at its deadline; then the emulator plays past the moment capacity would have come, so
    a QR keeper failed to delete would boot VMs that phone home (zombies)."""
    name = _name(spec)
    emu.set_scenario(name, Scenario(assign_after=LATE_FULFILMENT_S))
    handle = await env.client.start_workflow(
        "TpuSliceBootstrap",
        # Polled as in production: a 1 s poll over 4 skipped hours is 14,400 activities.
        _request(name, timedelta(seconds=30)),
        id=bootstrap_workflow_id(name),
        task_queue=task_queue,
        result_type=BootstrapResult,
    )
    status, detail = await _closed(handle)
    emu.advance(LATE_FULFILMENT_S + 3600)
    return RunOutcome("tpu", spec.label, spec.faults, handle.id, status, detail)
