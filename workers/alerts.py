"""The alert activity as each family's worker serves it, and one list of activities
without repeats for a worker that serves several families on one queue."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from temporalio import activity

from keeper.activities.alerts import AlertActivities
from keeper.runtime.alerts import alert_channel
from keeper.runtime.settings import Settings


def alert_activity(settings: Settings) -> Callable[..., Any]:
    """`keeper.alert` on the shared channel (runtime/alerts.py)."""
    return AlertActivities(alert_channel(settings)).alert


def _name(fn: Callable[..., Any]) -> str:
    defn = activity._Definition.from_callable(fn)
    return defn.name if defn is not None and defn.name else repr(fn)


def distinct_activities(activities: Iterable[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """The first of each activity name: every family serves `keeper.alert`, and a Worker
    refuses a name registered twice."""
    seen: dict[str, Callable[..., Any]] = {}
    for fn in activities:
        seen.setdefault(_name(fn), fn)
    return list(seen.values())
