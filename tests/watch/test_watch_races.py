"""Races between an operator and a watch's own steps, with stand-in activities: an approval
that lands while a check reads iris, and an unwatch while an approved stop is running."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateStage
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keeper.activities.watch.observe import raise_unless_due
from keeper.domain.common.alerts import Alert
from keeper.domain.watch.calls import (
    JobWatchInput,
    Observation,
    ObserveCall,
    RelaunchCall,
    RelaunchReady,
    RelaunchResult,
    StopCall,
    StopResult,
    TaskSeen,
)
from keeper.domain.watch.models import APPROVE_UPDATE, Decision, Proposal
from keeper.domain.watch.names import AttemptRef, JobPhase
from keeper.domain.watch.policy import WatchPolicy
from keeper.domain.watch.relaunch import HeldLaunch
from keeper.domain.watch.threads import DumpReading, ThreadState
from keeper.runtime.watch import search_attributes as sa
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS
from keeper.workers.runner import workflow_runner
from keeper.workflows.watch.job_watch import JobWatch
from tests.watch.world import FAST_CADENCE, FAST_LIVENESS

GATE = asyncio.Event()
CALLS: list[int] = []
STOPS: list[str] = []


def zombie() -> Observation:
    return Observation(
        at=datetime.now(UTC),
        job_state=JobPhase.RUNNING,
        latest=AttemptRef(
            parent="/a/j",
            group="ab12cd34-p0-a0",
            pipeline=0,
            attempt=0,
            coord="/a/j/ab12cd34-p0-a0-coord",
            coord_state=JobPhase.RUNNING,
            workers="/a/j/ab12cd34-p0-a0-workers",
            workers_state=JobPhase.RUNNING,
        ),
        coordinator=TaskSeen(task_id="/a/j/ab12cd34-p0-a0-coord/0", state=JobPhase.RUNNING),
        threads=DumpReading(state=ThreadState.ZOMBIE, evidence="all idle in _worker"),
    )


@activity.defn(name="watch.policy")
async def policy() -> WatchPolicy:
    return WatchPolicy(cadence=FAST_CADENCE, liveness=FAST_LIVENESS)


@activity.defn(name="watch.observe")
async def observe(call: ObserveCall) -> Observation:
    raise_unless_due(call)
    CALLS.append(1)
    if len(CALLS) == 3:
        await GATE.wait()  # the check is running while the operator approves
    return zombie()


@activity.defn(name="common.alert")
async def alert(raised: Alert) -> bool:
    return True


@activity.defn(name="watch.stop")
async def stop(call: StopCall) -> StopResult:
    STOPS.append(call.proposal)
    return StopResult(job_state="killed", detail="stopped")


@activity.defn(name="watch.prepare_relaunch")
async def prepare_relaunch(call: RelaunchCall) -> RelaunchReady:
    assert call.launch is not None  # the request keeper holds, never iris's
    return RelaunchReady(name=f"j-r{call.restart}")


@activity.defn(name="watch.relaunch")
async def relaunch(call: RelaunchCall) -> RelaunchResult:
    return RelaunchResult(job_id=f"{call.job_id}-r{call.restart}")


# The watch holds the request keeper launched the job with, so a restart may be approved.
HELD = HeldLaunch(request={"name": "j", "entrypoint": {"runCommand": {"argv": ["run"]}}})


@contextlib.asynccontextmanager
async def watching(
    client: Client, activities: list[Any]
) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    """The real JobWatch on a queue of its own, its activities the given stand-ins."""
    queue = f"race-{uuid.uuid4().hex[:6]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[JobWatch],
        activities=activities,
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
        workflow_runner=workflow_runner(False, client.data_converter),
    ):
        yield await client.start_workflow(
            JobWatch.run,
            JobWatchInput(job_id="/a/j", launch=HELD),
            id=f"job-watch-{queue}",
            task_queue=queue,
            search_attributes=sa.for_job("/a/j"),
        )


async def test_an_approval_during_a_check_is_kept_carried_out_once_and_answered(
    dev_env: WorkflowEnvironment,
) -> None:
    stand_ins = [policy, observe, alert, stop, prepare_relaunch, relaunch]
    # The stops of this test's watch (another module's test may use the same stand-in).
    stopped_before = len(STOPS)
    async with watching(dev_env.client, stand_ins) as handle:
        for _ in range(200):
            if len(CALLS) >= 3:
                break
            await asyncio.sleep(0.05)
        view = await handle.query("status")
        pending = [p["id"] for p in view["proposals"] if p["state"] == "pending"]
        assert pending, view
        upd = await handle.start_update(
            APPROVE_UPDATE,
            Decision(proposal=pending[0], by="op"),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=Proposal,
        )
        GATE.set()
        answer = await asyncio.wait_for(upd.result(), 20)
        for _ in range(100):
            if STOPS[stopped_before:]:
                break
            await asyncio.sleep(0.05)
        assert answer.state.value == "done" and answer.decided_by == "op", answer
        assert STOPS[stopped_before:] == [pending[0]]


STOP_GATE = asyncio.Event()
OBS2: list[int] = []


@activity.defn(name="watch.observe")
async def observe2(call: ObserveCall) -> Observation:
    raise_unless_due(call)
    OBS2.append(1)
    return zombie()


@activity.defn(name="watch.stop")
async def slow_stop(call: StopCall) -> StopResult:
    while True:  # a slow controller: heartbeats so the cancel reaches it
        activity.heartbeat()
        await asyncio.sleep(0.1)


async def test_an_unwatch_while_an_approved_stop_runs_ends_the_watch_and_answers_the_approver(
    dev_env: WorkflowEnvironment,
) -> None:
    stand_ins = [policy, observe2, alert, prepare_relaunch, slow_stop]
    async with watching(dev_env.client, stand_ins) as handle:
        for _ in range(200):
            view = await handle.query("status") or {"proposals": []}
            pending = [p["id"] for p in view["proposals"] if p["state"] == "pending"]
            if pending:
                break
            await asyncio.sleep(0.05)
        upd = await handle.start_update(
            APPROVE_UPDATE,
            Decision(proposal=pending[0], by="op"),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=Proposal,
        )
        await asyncio.sleep(1.0)
        before = len(OBS2)
        await handle.cancel()
        await asyncio.sleep(3.0)
        desc = await handle.describe()
        view = await handle.query("status") if desc.status.name == "RUNNING" else None
        assert desc.status.name == "COMPLETED", (desc.status, view)
        # No check after the unwatch (at most the one already under way).
        assert len(OBS2) <= before + 1
        result = await handle.result()
        assert result.outcome.value == "unwatched"
        # The approver is told what became of the step, not that the watch is gone.
        answer = await asyncio.wait_for(upd.result(), 10)
        assert (answer.state.value, answer.outcome) == ("failed", "the watch was ended first")


CHECK_GATE = asyncio.Event()
OBS3: list[int] = []


@activity.defn(name="watch.observe")
async def observe3(call: ObserveCall) -> Observation:
    raise_unless_due(call)
    OBS3.append(1)
    if len(OBS3) == 4:
        await CHECK_GATE.wait()  # the approval lands while this check reads
    return zombie()


async def test_a_watch_closed_by_an_approved_restart_shows_the_killed_job_and_nothing_open(
    dev_env: WorkflowEnvironment,
) -> None:
    activities = [policy, observe3, alert, stop, prepare_relaunch, relaunch]
    async with watching(dev_env.client, activities) as handle:
        for _ in range(400):
            view = await handle.query("status") or {"proposals": []}
            pending = [p["id"] for p in view["proposals"] if p["state"] == "pending"]
            if pending and len(OBS3) >= 4:
                break
            await asyncio.sleep(0.05)
        assert pending, view
        upd = await handle.start_update(
            APPROVE_UPDATE,
            Decision(proposal=pending[0], by="op"),
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
            result_type=Proposal,
        )
        CHECK_GATE.set()
        answer = await asyncio.wait_for(upd.result(), 20)
        assert answer.state.value == "done", answer
        result = await asyncio.wait_for(handle.result(), 20)
        assert result.outcome.value == "restarted" and result.job_state == "killed", result

        # What the closed watch shows: the job as keeper left it, the watch's own end, and
        # no proposal anyone could still approve.
        closed = await handle.query("status")
        assert closed["job_state"] == "killed", closed["proposals"]
        assert closed["verdict"] == "finished" and closed["phase"] == "finished", closed
        assert [p["id"] for p in closed["proposals"] if p["state"] == "pending"] == [], closed
        assert closed["timeline"][-1]["verdict"] == "finished", closed["timeline"]
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(sa.KEEPER_STEP) == "killed"
        assert attributes.get(sa.VERDICT) == ["finished"]
