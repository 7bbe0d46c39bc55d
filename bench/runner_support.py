"""Support for bench/runner_deletion.py: the ceiling workload, a workflow that makes as many
activity calls as one RunnerDeletion and does nothing else, and the no-op activity it calls;
and bench/worker_cpu.py's empty poll.

A module of its own because the workflow sandbox re-imports a workflow's module by name,
which a script run as __main__ cannot offer. Importing it also puts the repository root on
sys.path: `python bench/runner_deletion.py` puts only bench/ there, and the benchmark must
import keeper's packages from this checkout whether or not they are installed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ApplicationError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CEILING_WORKFLOW = "BenchEmptyDeletion"
# runtime.shared_search_attributes.KEEPER_STEP, spelled out so the sandbox imports no keeper
# code.
KEEPER_STEP = SearchAttributeKey.for_keyword("KeeperStep")
NOOP_ACTIVITY = "bench.noop"


@dataclass(frozen=True)
class EmptyInput:
    runner: str
    activities: int
    # KeeperStep upserts, as many as a sampled RunnerDeletion made: the first before the
    # first activity, the last at the end, any others in between. Isolates their cost.
    upserts: int = 0


@activity.defn(name=NOOP_ACTIVITY)
async def noop(step: int) -> int:
    return step


@workflow.defn(name=CEILING_WORKFLOW)
class EmptyDeletion:
    """Started like a deletion (update-with-start, the same id and conflict policies), then
    `activities` no-op activities one after another; search-attribute upserts only when
    asked for."""

    def __init__(self) -> None:
        self._requests = 0

    @workflow.update(name="request")
    def request(self, _request: dict[str, Any]) -> int:
        self._requests += 1
        return self._requests

    @workflow.run
    async def run(self, inp: EmptyInput) -> str:
        before = max(0, inp.upserts - 1)
        for step in range(inp.activities):
            if step < before:
                workflow.upsert_search_attributes([KEEPER_STEP.value_set(f"step-{step}")])
            await workflow.execute_activity(
                noop, step, start_to_close_timeout=timedelta(seconds=60)
            )
        if inp.upserts:
            workflow.upsert_search_attributes([KEEPER_STEP.value_set("done")])
        return inp.runner


# --------------------------------------------------------------------- bench/worker_cpu.py

EMPTY_POLL_WORKFLOW = "BenchEmptyPoll"
NOT_YET_ACTIVITY = "bench.not_yet"


@activity.defn(name=NOT_YET_ACTIVITY)
async def not_yet(_: str) -> None:
    """An empty poll: fails every attempt, so its retry policy polls, as a waiting TPU
    bootstrap's observe does."""
    raise ApplicationError("not yet", type="Waiting")


@workflow.defn(name=EMPTY_POLL_WORKFLOW)
class EmptyPoll:
    """A bootstrap's wait with nothing to read: one activity retried every `interval_s`
    until cancelled."""

    @workflow.run
    async def run(self, interval_s: float) -> None:
        interval = timedelta(seconds=interval_s)
        await workflow.execute_activity(
            not_yet,
            "wait",
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                initial_interval=interval, backoff_coefficient=1.0, maximum_interval=interval
            ),
        )


EMPTY_CHECK_WORKFLOW = "BenchEmptyCheck"
DUE_ACTIVITY = "bench.due"


@activity.defn(name=DUE_ACTIVITY)
async def due(interval_s: float) -> None:
    """An empty check: its first attempt answers "not due" and is retried when due, as a
    job watch's check waits inside its own activity."""
    if activity.info().attempt == 1:
        raise ApplicationError(
            "not due", type="NotDue", next_retry_delay=timedelta(seconds=interval_s)
        )


@workflow.defn(name=EMPTY_CHECK_WORKFLOW)
class EmptyCheck:
    """A job watch with nothing to judge: one check every `interval_s`, until cancelled."""

    @workflow.run
    async def run(self, interval_s: float) -> None:
        while True:
            await workflow.execute_activity(
                due, interval_s, start_to_close_timeout=timedelta(seconds=30)
            )
