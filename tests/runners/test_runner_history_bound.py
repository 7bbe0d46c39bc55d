"""A deletion's history stays bounded however long it waits.

An escalated deletion used to gain about eleven events per GitHub re-check (an activity and
a timer each), about 3,200 a day, and the server terminates a run at 51,200. Re-checks are
now activity retries, which write no events, so a month of waiting costs a constant; what
still grows (requests arriving as updates) rolls over into a new run. The month-long ones
run on the time-skipping server: a month of re-checks passes in seconds.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from keeper.domain.runners.models import DeletionOutcome, DeletionResult, DeletionStep, Requester
from keeper.domain.runners.status import InstanceStatus
from tests.runners.world import FAST_POLICY, RunnerWorld, eventually, runner_worker

# Re-checks every hour: 720 in 30 days, each a real call to the GitHub emulator.
MONTH_POLICY = FAST_POLICY.model_copy(update={"escalation_recheck": timedelta(hours=1)})
MONTH = timedelta(days=30)
# A deletion's own steps take about 60 events; the month of waiting may add none.
EVENT_BOUND = 120


async def events(handle: WorkflowHandle[Any, Any]) -> int:
    return len((await handle.fetch_history()).events)


async def escalated(env: WorkflowEnvironment, world: RunnerWorld, name: str) -> WorkflowHandle:
    world.add_runner(name, busy=True)
    handle = await world.request(env.client, name)

    async def is_escalated() -> bool:
        view = await handle.query("status")
        return view is not None and view["step"] == DeletionStep.ESCALATED.value

    deadline = asyncio.get_running_loop().time() + 60
    while not await is_escalated():
        assert asyncio.get_running_loop().time() < deadline, "never escalated"
        await asyncio.sleep(0.1)
    return handle


async def test_an_escalated_deletion_waits_a_month_in_bounded_history_then_the_job_ends(
    time_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    async with runner_worker(time_env.client, world, MONTH_POLICY):
        handle = await escalated(time_env, world, "month-job")
        # An hour in first: whatever the escalation itself still writes lands before the
        # count, not during the month it is measured over.
        await time_env.sleep(timedelta(hours=1))
        before = await events(handle)
        started = await time_env.get_current_time()
        await time_env.sleep(MONTH)
        assert await time_env.get_current_time() - started >= MONTH
        after = await events(handle)
        rechecks = sum(1 for r in world.github.requests if r["method"] == "DELETE")
        # The month really was spent asking GitHub again, and none of it reached the history.
        assert rechecks >= 700, f"only {rechecks} removal attempts in a month"
        assert after == before, f"history grew from {before} to {after} events while waiting"

        record = world.store.require("month-job")
        world.github.set_busy(record.github_runner_id, False)  # the job ended
        result = await handle.result()
        total = await events(handle)
    assert result.outcome is DeletionOutcome.DELETED and not result.forced
    assert world.status("month-job") is InstanceStatus.DELETED
    assert not world.instance_exists("month-job") and not world.registration_exists(record)
    assert total < EVENT_BOUND, f"{total} events"


async def test_an_escalated_deletion_waits_a_month_then_an_operator_forces_it(
    time_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    async with runner_worker(time_env.client, world, MONTH_POLICY):
        handle = await escalated(time_env, world, "month-force")
        await time_env.sleep(MONTH)
        await world.request(time_env.client, "month-force", force=True)
        result = await handle.result()
        total = await events(handle)
    assert result.outcome is DeletionOutcome.DELETED and result.forced
    assert world.status("month-force") is InstanceStatus.DELETED
    assert not world.instance_exists("month-force")
    assert total < EVENT_BOUND, f"{total} events"


async def test_requests_that_keep_arriving_roll_the_history_over_and_the_deletion_finishes(
    dev_env: WorkflowEnvironment, world: RunnerWorld
) -> None:
    """Each request is an update, events the deletion cannot avoid; past the policy's
    bound the run continues as new, carrying who asked and how far it got. On the dev
    server: it needs no skipped time, and the time-skipping test server closes a run that
    continues as new right after an update without recording the continue-as-new."""
    # The runner may stay busy past busy_wait while the requests arrive (a loaded machine):
    # then it escalates, and notices the job's end at its next re-check, a second later.
    policy = FAST_POLICY.model_copy(
        update={"history_events_limit": 150, "escalation_recheck": timedelta(seconds=1)}
    )
    async with runner_worker(dev_env.client, world, policy):
        world.add_runner("chatty", busy=True)
        first = await world.request(dev_env.client, "chatty")
        for i in range(120):
            await world.request(dev_env.client, "chatty", Requester.AGENT, reason=f"report {i}")
        latest = dev_env.client.get_workflow_handle(first.id, result_type=DeletionResult)

        async def rolled_over() -> bool:
            desc = await latest.describe()
            return desc.run_id != first.result_run_id

        deadline = asyncio.get_running_loop().time() + 60
        while not await rolled_over():
            assert asyncio.get_running_loop().time() < deadline, "never continued as new"
            await asyncio.sleep(0.1)
        view = await latest.query("status")
        assert view["run"] >= 2
        assert any("report 119" in r for r in view["requests"])

        record = world.store.require("chatty")
        world.github.set_busy(record.github_runner_id, False)
        result = await asyncio.wait_for(latest.result(), 60)
        await eventually(lambda: world.status("chatty") is InstanceStatus.DELETED)
    assert result.outcome is DeletionOutcome.DELETED
    assert not world.instance_exists("chatty")
    # Every run of the chain stayed near the bound: a run rolls over once the requests it
    # took are answered, and one that arrives meanwhile goes to the next run, so the bound
    # is soft by a few requests, far below the server's 51,200.
    # Walked from the last run back: each run's start names the run it continued.
    runs, run_id = 0, (await latest.describe()).run_id
    while run_id:
        history = await dev_env.client.get_workflow_handle(first.id, run_id=run_id).fetch_history()
        assert len(history.events) < 2 * policy.history_events_limit
        started = history.events[0].workflow_execution_started_event_attributes
        runs += 1
        run_id = started.continued_execution_run_id
    assert runs >= 2
