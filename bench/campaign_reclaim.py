"""The reclaim family's runs, one after another on one spur emulator (a controller wipe is
cluster-wide): each run has a node of its own with a live job that must never be touched.

| fault           | how                                                                    |
|-----------------|------------------------------------------------------------------------|
| none            | a job that finished an hour ago is still held by the node's agent       |
| worker-kill     | the same, with the reclaim worker killed once the reclaim has started  |
| controller-wipe | the controller forgets every job and reissues ids from 1               |

After a wipe the node's live pre-wipe job must be spared: keeper quarantines it, and the
campaign, as the operator, cancels the reclaim, which lifts the drain it made.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from bench.campaign_plan import RunSpec
from bench.campaign_report import RunOutcome
from bench.campaign_workers import Killable
from tests.reclaim.world import FAST, ReclaimWorld, until

HOUR = 3600.0
# Upper bounds, generous for a SIGKILL: a call the dead worker held is retried after its
# start-to-close (30 s), once a new worker process polls.
RESULT_WITHIN_S = 180.0


def _stale(world: ReclaimWorld, node: str) -> int:
    """A job that finished an hour ago and that `node`'s agent still holds."""
    (job,) = world.emu.submit(nodes=[node])
    world.emu.complete(job.job_id, leak=True)
    ended = world.emu.cluster.job(job.job_id)
    assert ended.end_time is not None
    ended.end_time -= HOUR
    return job.job_id


async def _release(world: ReclaimWorld, node: str, workflow_id: str) -> Any:
    """Beats `node` until its reclaim ends (each beat is evidence once the job is freed)."""
    for _ in range(FAST.release_beats + 4):
        await world.beat(node)
        desc = await world.handle(workflow_id).describe()
        if desc.status is not WorkflowExecutionStatus.RUNNING:
            break
    return await world.result(workflow_id, within=RESULT_WITHIN_S)


async def _closed_status(world: ReclaimWorld, workflow_id: str) -> str:
    desc = await world.handle(workflow_id).describe()
    return desc.status.name if desc.status else "UNKNOWN"


async def run_reclaim(
    client: Client, world: ReclaimWorld, node: str, worker: Killable, spec: RunSpec
) -> RunOutcome:
    first = spec.faults[0]
    world.emu.submit(nodes=[node])  # live: it keeps the node's heartbeats complete
    if first == "controller-wipe":
        return await _wipe(world, node, spec)
    job = _stale(world, node)
    await world.beat(node)
    (workflow_id,) = await until(
        lambda: [wf for h, wf in world.workflows(node) if h.job_id == job],
        within=RESULT_WITHIN_S,
        what=f"{node}: a reclaim of job {job}",
    )
    if first == "worker-kill":
        await worker.kill(since=asyncio.get_running_loop().time())
    await until(
        lambda: job not in world.emu.holdings(node),
        within=RESULT_WITHIN_S,
        what=f"{node}: job {job} released",
    )
    try:
        result = await _release(world, node, workflow_id)
        detail = result.outcome.value
    except (WorkflowFailureError, TimeoutError) as err:
        detail = f"{type(err).__name__}: {err}"[:160]
    status = await _closed_status(world, workflow_id)
    return RunOutcome("reclaim", spec.label, spec.faults, workflow_id, status, detail)


async def _wipe(world: ReclaimWorld, node: str, spec: RunSpec) -> RunOutcome:
    (pre_wipe,) = world.emu.submit(nodes=[node])
    await world.beat(node)
    world.emu.wipe()
    for other in list(world.emu.agents):
        await world.beat(other)  # NOT_FOUND: each agent registers again, through the tap
    for _ in range(pre_wipe.job_id + 2):
        world.emu.submit()  # the new counter passes the pre-wipe ids
    for _ in range(2):
        await world.beat(node)
    opened = [wf for _h, wf in world.workflows(node)]
    for workflow_id in opened:
        # The campaign is the operator: a quarantine waits for one; cancelling lifts the drain.
        handle = world.handle(workflow_id)
        if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
            await handle.cancel()
        with contextlib.suppress(WorkflowFailureError, TimeoutError):
            await asyncio.wait_for(handle.result(), RESULT_WITHIN_S)
    workflow_id = opened[0] if opened else f"(no reclaim on {node})"
    status = await _closed_status(world, opened[0]) if opened else "NONE_STARTED"
    detail = f"{len(opened)} reclaim(s) after the wipe, cancelled by the operator"
    return RunOutcome("reclaim", spec.label, spec.faults, workflow_id, status, detail)
