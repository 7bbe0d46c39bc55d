"""The alert activity as each family's worker serves it, one list of activities without
repeats for a worker that serves several families on one queue, and the counters the alert
rules watch, published at 0 when a worker starts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.runtime import Runtime

from keeper.activities.alerts import AlertActivities
from keeper.runtime import metrics as m
from keeper.runtime.alerts import alert_channel
from keeper.runtime.settings import Settings


def alert_activity(settings: Settings) -> Callable[..., Any]:
    """`common.alert` on the shared channel (runtime/alerts.py)."""
    return AlertActivities(alert_channel(settings)).alert


def _name(fn: Callable[..., Any]) -> str:
    defn = activity._Definition.from_callable(fn)
    return defn.name if defn is not None and defn.name else repr(fn)


def distinct_activities(activities: Iterable[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """The first of each activity name: every family serves `common.alert`, and a Worker
    refuses a name registered twice."""
    seen: dict[str, Callable[..., Any]] = {}
    for fn in activities:
        seen.setdefault(_name(fn), fn)
    return list(seen.values())


@dataclass(frozen=True)
class AlertedCounter:
    """A counter series a rule in deploy/prometheus/keeper-alerts.yaml watches with
    `increase(...) > 0`, as a family's workflows count it.

    A series whose first sample is already 1 shows Prometheus no increase, so the first stuck
    compensation or drained node would never fire its alert; a worker publishes each series
    at 0 when it starts (`publish_alerted_counters`). The series must be the very one the
    workflows count into: `workflow.metric_meter()` labels it with the namespace, the task
    queue and the workflow type, hence the workflows here.
    """

    metric: m.Metric
    # The label values the rule selects on (`event="stuck"`); the metric's other labels, if
    # it had any, would need a value each too.
    labels: Mapping[str, str]
    workflows: Sequence[type]


def _workflow_type(cls: type) -> str:
    return workflow._Definition.must_from_class(cls).name or cls.__name__


def publish_alerted_counters(
    client: Client, task_queue: str, workflows: Iterable[type], counters: Iterable[AlertedCounter]
) -> None:
    """Each counter's series at 0 for the workflows of `counters` that this queue's worker
    runs, on the client's runtime (the worker's /metrics; nothing when metrics are off)."""
    runtime = client.service_client.config.runtime or Runtime.default()
    served = {_workflow_type(cls) for cls in workflows}
    for counter in counters:
        for cls in counter.workflows:
            name = _workflow_type(cls)
            if name not in served:
                continue
            meter = runtime.metric_meter.with_additional_attributes(
                {"namespace": client.namespace, "task_queue": task_queue, "workflow_type": name}
            )
            m.publish_zero(meter, counter.metric, **counter.labels)
