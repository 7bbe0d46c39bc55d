"""What a workflow family gives the worker."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, Schedule

from keeper.runtime.settings import Settings
from keeper.workers.alerts import AlertedCounter
from keeper.workers.input_guard import InputHelp


@dataclass(frozen=True)
class ScheduleSpecOf:
    """A schedule a family owns: created when absent; at each worker start its interval,
    overlap policy, task queue and input are set back to these (workers/main.py,
    ensure_schedules)."""

    schedule_id: str
    schedule: Schedule
    describe: str


@dataclass(frozen=True)
class Family:
    name: str
    workflows: Sequence[type]
    # By workflow type: what a start with no input (or several) tells its caller.
    input_help: Mapping[str, InputHelp]
    # Opens the clients the family's activities use; a worker that does not serve the
    # family never calls it.
    open_deps: Callable[[Settings], AbstractAsyncContextManager[Any]]
    # The activity callables, built on the open clients.
    activities: Callable[[Settings, Client, Any], list[Callable[..., Any]]]
    # Its schedules, aimed at the given task queue.
    schedules: Callable[[Settings, str], list[ScheduleSpecOf]]
    activity_slots: Callable[[Settings], int]
    # Workflows its worker keeps in memory between tasks (max_cached_workflows).
    cached_workflows: Callable[[Settings], int]
    # The counters its workflows count that an alert rule watches: published at 0 when a
    # worker that runs those workflows starts.
    alerted_counters: Sequence[AlertedCounter] = ()

    def task_queue(self, settings: Settings) -> str:
        return settings.temporal.family_queue(self.name)
