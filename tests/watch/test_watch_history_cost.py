"""What a check costs the watch's history (bench/watch_load.py measures it at the production
defaults): the wait between checks is the next check's own activity, retried when due, so a
check is one activity and one workflow task, 6 events, and no timer; an approval still ends
the wait at once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from keeper.activities.watch.observe import raise_unless_due
from keeper.domain.watch.cadence import CadencePolicy
from keeper.domain.watch.calls import Observation, ObserveCall
from keeper.domain.watch.models import APPROVE_UPDATE, Decision, Proposal, ProposalState, WatchView
from keeper.domain.watch.policy import WatchPolicy
from tests.watch.test_watch_races import (
    alert,
    prepare_relaunch,
    relaunch,
    stop,
    watching,
    zombie,
)
from tests.watch.world import FAST_LIVENESS, watch_world

pytestmark = pytest.mark.e2e


async def test_a_check_costs_one_activity_and_one_workflow_task_and_no_timer(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        handle = await w.watch(w.launch("cpu-bound-quiet"))
        await w.until_view(handle, lambda v: v.checks >= 8, within=60, what="eight checks")
        events = [e async for e in handle.fetch_history_events()]
        await handle.cancel()
    kinds = [e.event_type for e in events]
    observes = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "watch.observe"
    ]
    assert EventType.EVENT_TYPE_TIMER_STARTED not in kinds
    completed = kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    # From the second check on, each is: activity scheduled, started, completed, and one
    # workflow task (scheduled, started, completed). Upserts and markers come on changes.
    first = kinds.index(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, kinds.index(
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 5))  # fmt: skip
    last = len(kinds) - 1 - kinds[::-1].index(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    steady = kinds[first + 1 : last + 1]  # from one check's end to the last check's
    checks = steady.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
    assert checks >= 5 and len(observes) >= 8, (checks, len(observes), completed)
    # What changes now and then (a search-attribute upsert, a patch marker) aside.
    now_and_then = (
        EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
        EventType.EVENT_TYPE_MARKER_RECORDED,
    )
    per_check = len([k for k in steady if k not in now_and_then]) / checks
    assert per_check <= 6.5, (per_check, Counter(EventType.Name(k) for k in steady))


@activity.defn(name="watch.policy")
async def slow_policy() -> WatchPolicy:
    """A second of smoke checks, then five minutes between checks."""
    cadence = CadencePolicy(
        smoke_duration=timedelta(seconds=1),
        smoke_interval=timedelta(milliseconds=200),
        failure_interval=timedelta(minutes=5),
        min_interval=timedelta(minutes=5),
        max_interval=timedelta(minutes=5),
        default_interval=timedelta(minutes=5),
    )
    return WatchPolicy(cadence=cadence, liveness=FAST_LIVENESS)


@activity.defn(name="watch.observe")
async def zombie_check(call: ObserveCall) -> Observation:
    raise_unless_due(call)
    return zombie()


async def test_an_approval_ends_the_wait_for_the_next_check_at_once(
    dev_env: WorkflowEnvironment,
) -> None:
    activities = [slow_policy, zombie_check, alert, stop, prepare_relaunch, relaunch]
    async with watching(dev_env.client, activities) as handle:
        # The zombie is proposed for a restart in the smoke checks; then the watch waits
        # five minutes for its next check, and the approval lands in that wait.
        view = await until_view(
            handle,
            lambda v: (
                bool(v.pending())
                and v.next_check_at is not None
                and v.last_check_at is not None
                and v.next_check_at - v.last_check_at >= timedelta(minutes=5)
            ),
            "a restart proposal, and a five-minute wait",
        )
        (restart,) = view.pending()
        asked = time.monotonic()
        answer = await handle.execute_update(
            APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
        )
        took = time.monotonic() - asked
        assert answer.state is ProposalState.DONE, answer
        assert took < 30, took  # not the rest of a five-minute wait
        result = await handle.result()
        assert result.outcome.value == "restarted"


async def until_view(handle: Any, check: Any, what: str) -> WatchView:
    deadline = time.monotonic() + 60
    view = None
    while time.monotonic() < deadline:
        view = await handle.query("status", result_type=WatchView)
        if view is not None and check(view):
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {view}")
