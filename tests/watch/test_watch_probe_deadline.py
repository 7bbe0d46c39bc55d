"""The delta probe has a deadline and a clock: the real JobWatch on the dev server, with
stand-in activities, where the first probe answers long after the check that asked for it
(the worker that was to take it was down in between). It must not confirm the stall on the
gate built before that gap; a stall is confirmed only after a whole new gate."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keeper.activities.watch.observe import raise_unless_due
from keeper.domain.common.alerts import Alert
from keeper.domain.watch.calls import (
    CpuSeen,
    JobWatchInput,
    Observation,
    ObserveCall,
    ProbeCall,
    ProbeSeen,
    TaskSeen,
)
from keeper.domain.watch.liveness_models import LivenessPolicy
from keeper.domain.watch.models import WatchView
from keeper.domain.watch.names import AttemptRef, JobPhase
from keeper.domain.watch.policy import WatchPolicy
from keeper.domain.watch.state import ReadingState
from keeper.domain.watch.threads import DumpReading, ThreadState
from keeper.runtime.watch import search_attributes as sa
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS
from keeper.workers.runner import workflow_runner
from keeper.workflows.watch.activity_options import PROBE_SCHEDULE_TO_CLOSE
from keeper.workflows.watch.job_watch import JobWatch
from tests.reclaim.world import until
from tests.watch.world import FAST_CADENCE

COORD_TASK = "/a/j/ab12cd34-p0-a0-coord/0"
HOST = "w-1"
# The gate (3 flat checks and 2 s of them) and the observer gap (2 s) at a test's pace; the
# first probe answers 6 s after its check, three times the gap.
LIVENESS = LivenessPolicy(
    stall_ticks=3,
    stall_min_elapsed=timedelta(seconds=2),
    fallback_ticks=2,
    observer_gap=timedelta(seconds=2),
)
HELD_UP = 6.0
ADVANCING_CHECKS = 3


class World:
    def __init__(self) -> None:
        self.checks = 0
        self.probes: list[float] = []
        self.answered = 0
        # The check after the late probe waits until the test has read the watch's answer
        # to it, so the answer cannot be overwritten unseen.
        self.seen = asyncio.Event()


WORLD = World()


def _cpu(ticks: int) -> CpuSeen:
    return CpuSeen(
        task_id=COORD_TASK, host=HOST, attempt=0, pid=7, start_time=500, ticks=ticks, clk_tck=100
    )


def _ticks() -> int:
    # Busy for the first checks (5 core-s a check), then flat for good: a hung process.
    return 100_000 + 500 * min(WORLD.checks, ADVANCING_CHECKS)


@activity.defn(name="watch.policy")
async def policy() -> WatchPolicy:
    return WatchPolicy(cadence=FAST_CADENCE, liveness=LIVENESS, probe_gap=timedelta(seconds=1))


@activity.defn(name="watch.observe")
async def observe(call: ObserveCall) -> Observation:
    raise_unless_due(call)
    if WORLD.answered:
        await WORLD.seen.wait()
    WORLD.checks += 1
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
        coordinator=TaskSeen(task_id=COORD_TASK, state=JobPhase.RUNNING, worker_id=HOST),
        # A live dispatch loop: the quiet fallback stays out of it, only the CPU path runs.
        threads=DumpReading(state=ThreadState.ACTIVE, evidence="in _wait_for_stage"),
        cpu=[_cpu(_ticks())],
        reading=ReadingState(attempt="ab12cd34-p0-a0", tasks_by_host={HOST: COORD_TASK}),
    )


@activity.defn(name="watch.probe")
async def probe(call: ProbeCall) -> ProbeSeen:
    WORLD.probes.append(asyncio.get_running_loop().time())
    if len(WORLD.probes) == 1:
        # As if the worker that was to take the probe was down this long: the reads are
        # taken only now, long after the check that asked for them.
        await asyncio.sleep(HELD_UP)
    flat = _cpu(_ticks())
    WORLD.answered += 1
    return ProbeSeen(first=flat, second=flat, seconds_apart=call.gap_s)


@activity.defn(name="common.alert")
async def alert(raised: Alert) -> bool:
    return True


@contextlib.asynccontextmanager
async def watching(client: Client) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    queue = f"probe-deadline-{uuid.uuid4().hex[:6]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[JobWatch],
        activities=[policy, observe, probe, alert],
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
        workflow_runner=workflow_runner(False, client.data_converter),
    ):
        handle = await client.start_workflow(
            JobWatch.run,
            JobWatchInput(job_id="/a/j"),
            id=f"job-watch-{queue}",
            task_queue=queue,
            search_attributes=sa.for_job("/a/j"),
        )
        try:
            yield handle
        finally:
            await handle.cancel()


async def _view(handle: WorkflowHandle[Any, Any]) -> WatchView | None:
    return await handle.query("status", result_type=WatchView)


async def _concluded(handle: WorkflowHandle[Any, Any]) -> WatchView | None:
    """The view once the check that asked for the probe is concluded: one check in the view
    per check read (the next one waits until the test has looked)."""
    view = await _view(handle)
    return view if view is not None and view.checks == WORLD.checks else None


async def test_a_probe_held_up_past_the_observer_gap_confirms_no_stall(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watching(dev_env.client) as handle:
        # The late probe's answer, read before the next check may run (it waits for us).
        await until(lambda: WORLD.answered, within=60, what="the late probe's answer")
        view = await until(
            lambda: _concluded(handle), within=30, what="the check the late probe concluded"
        )
        assert (view.verdict, view.verdict_reason) == ("unknown", "observer_gap"), view
        assert any("later than it should have" in line for line in view.evidence), view.evidence
        WORLD.seen.set()

        async def stalled() -> WatchView | None:
            view = await _view(handle)
            return view if view is not None and view.verdict == "stalled" else None

        # The stall comes from a later probe, on a gate built after the gap.
        view = await until(stalled, within=60, what="a stalled verdict")
        assert view.verdict_reason == "probe_confirmed_stall", view
        assert len(WORLD.probes) >= 2, WORLD.probes

        history = await handle.fetch_history()
        probes = [
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "watch.probe"
        ]
        assert probes, "no probe was scheduled"
        for scheduled in probes:
            bound = scheduled.schedule_to_close_timeout.ToTimedelta()
            assert bound == PROBE_SCHEDULE_TO_CLOSE, bound
