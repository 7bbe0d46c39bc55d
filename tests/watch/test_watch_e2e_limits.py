"""JobWatch end to end at two of the controller's limits, on the iris emulator: a job whose
task ends PREEMPTED (its preemption budget spent), and a job with more children than one
ListJobs query reaches (500 a page, offsets up to 5000)."""

from __future__ import annotations

import pytest
from temporalio.testing import WorkflowEnvironment

from emulators.iris import IrisEmulatorConfig
from keeper.domain.watch.cadence import WatchPhase
from keeper.domain.watch.models import WatchOutcome
from tests.watch.world import SPEED, watch_world

pytestmark = pytest.mark.e2e


async def test_a_job_whose_task_ended_preempted_is_reported_ended_not_waited_on(
    dev_env: WorkflowEnvironment,
) -> None:
    # Preempted at 200 s (budget left: PENDING, then a1 runs) and at 500 s (budget spent:
    # the task PREEMPTED for good, the job WORKER_FAILED), about 8 wall seconds in.
    async with watch_world(dev_env.client) as w:
        job = w.launch("preempted")
        handle = await w.watch(job)
        await w.until_view(
            handle,
            lambda v: v.attempt is not None and v.attempt.attempt == 1,
            what="the watch on the retry's pipeline (a1)",
        )
        result = await w.result(handle, within=60)
        assert result.outcome is WatchOutcome.FAILED, result
        assert result.job_state == "worker_failed"
        view = await w.view(handle)
        assert view is not None and view.phase is WatchPhase.FINISHED
        assert view.proposals == [] and w.actions() == []


async def test_a_job_with_six_thousand_children_is_watched_through_the_caps(
    dev_env: WorkflowEnvironment,
) -> None:
    # 6,000 plain children beside the pipeline's coordinator and workers, which are among
    # the oldest: a listing by date alone reaches them only past offset 5,500.
    # At half the tests' speed: a check pages through 6,000 children, and on a loaded
    # machine two of them must fit in the job's life.
    async with watch_world(dev_env.client, IrisEmulatorConfig(speed=SPEED / 2)) as w:
        job = w.launch("healthy", extra_children=6000)
        handle = await w.watch(job)
        # Running, not merely steady: on a loaded machine a first check can come late and
        # judge "unknown" (an observer gap), which is right, and the next one "running".
        seen = await w.until_view(
            handle,
            lambda v: v.phase is WatchPhase.STEADY and v.attempt is not None
            and v.verdict == "running",
            within=90,
            what="a steady watch judging the pipeline's attempt running",
        )  # fmt: skip
        assert seen.attempt is not None and seen.attempt.workers_running > 0
        assert not any("ListJobs" in e for e in seen.controller_errors), seen.controller_errors
        result = await w.result(handle, within=120)
        assert result.outcome is WatchOutcome.SUCCEEDED
        assert w.actions() == []
