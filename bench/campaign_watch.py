"""The watch family's runs, concurrent on one iris emulator: every job is healthy, so any
stop or relaunch is a wrongful kill (the campaign approves nothing).

| fault               | how                                                                |
|---------------------|--------------------------------------------------------------------|
| none                | a short healthy job, watched to its success                        |
| counter-reset       | a quiet CPU-bound job whose CPU counter resets every read; 8 checks  |
| controller-timeouts | the controller hangs, answers unavailable, then recovers          |
| worker-kill         | the watch worker is killed after the first check                    |
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowFailureError

from bench.campaign_plan import RunSpec
from bench.campaign_report import RunOutcome
from bench.campaign_workers import Killable
from tests.watch.world import WatchWorld

# Upper bounds, generous for a SIGKILL: a new worker process takes seconds to poll on a busy
# host, and the check the dead one held runs again after its heartbeat timeout (30 s).
RESULT_WITHIN_S = 420.0
CHECKS_WITHIN_S = 240.0
SHORT_JOB = "finish-while-down"
# The rpc-timeouts scenario over one 8-minute stage (8 s of wall time at the world's pace).
TIMEOUTS_OVERRIDES: dict[str, Any] = {
    "stages": ({"name": "stage0-Map → Write", "shards": 100, "seconds": 480},),
}


async def run_watch(world: WatchWorld, worker: Killable, spec: RunSpec) -> tuple[RunOutcome, str]:
    """The run's outcome and the job it watched."""
    first = spec.faults[0]
    if first == "counter-reset":
        job = world.launch("cpu-bound-quiet")
    elif first == "controller-timeouts":
        job = world.launch("rpc-timeouts", **TIMEOUTS_OVERRIDES)
    else:
        job = world.launch(SHORT_JOB)
    handle = await world.watch(job)
    if first == "counter-reset":
        view = await world.until_view(
            handle, lambda v: v.checks >= 8, within=CHECKS_WITHIN_S, what="8 checks"
        )
        detail = f"verdicts {sorted({e.verdict for e in view.timeline})}"
        await handle.cancel()
    elif first == "worker-kill":
        await world.until_view(
            handle, lambda v: v.checks >= 1, within=CHECKS_WITHIN_S, what="a first check"
        )
        await worker.kill(since=asyncio.get_running_loop().time())
    try:
        result = await asyncio.wait_for(handle.result(), RESULT_WITHIN_S)
        detail = result.outcome.value
    except WorkflowFailureError as err:
        if first != "counter-reset":
            detail = str(err.cause)[:160]
    except TimeoutError:
        return RunOutcome("watch", spec.label, spec.faults, handle.id, "TIMED_OUT", ""), job
    desc = await handle.describe()
    status = desc.status.name if desc.status else "UNKNOWN"
    return RunOutcome("watch", spec.label, spec.faults, handle.id, status, detail), job
