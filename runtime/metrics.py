"""keeper's metrics: the one table of what it exports, and the worker's Prometheus endpoint.

Workflows emit through `workflow.metric_meter()` (nothing is recorded while a history
replays, so a metric counts what happened once) and activities through
`activity.metric_meter()`; both go through `count`, `observe` and `gauge` below, which refuse
a metric or label the table does not declare. The endpoint is the SDK's own Prometheus
exporter, so the SDK's `temporal_*` metrics (pollers, task latencies, slots) share it.

docs/operations.md#metrics-and-logs lists this table; tests/common/test_metrics.py checks that the
list, the alert rules and the dashboard name only metrics that exist.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from temporalio.common import MetricCounter, MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime

from keeper.runtime.sdk_logs import sdk_telemetry


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


# Labels keep a bounded set of values; a slice name, runner or job id would make a series
# per resource, so none of them is a label.
LABELS = frozenset({"family", "phase", "outcome", "status", "reason", "event", "verdict"})

# Phases last seconds (submit) to hours (assign on a busy zone).
PHASE_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)


@dataclass(frozen=True)
class Metric:
    # As Prometheus shows it: counters end in _total, durations in _seconds.
    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()
    # The process that serves it: the worker (through the SDK's exporter) or
    # `keeper reclaim tap` (its own /metrics on reclaim.metrics_address).
    process: str = "worker"

    @property
    def sdk_name(self) -> str:
        """The name given to the SDK, which appends _total to a counter itself."""
        return self.name.removesuffix("_total") if self.kind is Kind.COUNTER else self.name


BOOTSTRAPS = Metric(
    "keeper_tpu_bootstraps_total",
    Kind.COUNTER,
    "1",
    ("outcome", "phase"),
    "TPU bootstraps closed, by outcome (done, failed, cancelled) and the phase they ended in.",
)
PHASE_DURATION = Metric(
    "keeper_tpu_phase_duration_seconds",
    Kind.HISTOGRAM,
    "s",
    ("phase",),
    "Time each phase of a closed TPU bootstrap took.",
    PHASE_BUCKETS,
)
COMPENSATIONS = Metric(
    "keeper_compensations_total",
    Kind.COUNTER,
    "1",
    ("family", "event"),
    "Compensations by event: started, finished, stuck (still deleting past its time).",
)
SWEPT = Metric(
    "keeper_tpu_sweeper_resources_total",
    Kind.COUNTER,
    "1",
    ("outcome",),
    "Resources the TPU sweeper looked at, by outcome: deleted, failed, kept, unknown_owner.",
)
RUNNER_DELETIONS = Metric(
    "keeper_runner_deletions_total",
    Kind.COUNTER,
    "1",
    ("outcome",),
    "Runner deletions closed, by outcome: deleted, already_deleted, forced, cancelled.",
)
RUNNER_ESCALATIONS = Metric(
    "keeper_runner_deletion_escalations_total",
    Kind.COUNTER,
    "1",
    (),
    "Runner deletions escalated to an operator (waiting for a fix or a --force).",
)
LANE_RECORDS = Metric(
    "keeper_runner_records",
    Kind.GAUGE,
    "1",
    ("status",),
    "Runner records in the store by instance status, as the reconciler's last pass read them.",
)
RECLAIMS = Metric(
    "keeper_reclaims_total",
    Kind.COUNTER,
    "1",
    ("outcome",),
    "Job reclaims closed, by outcome: released, spared, operator-released, cancelled.",
)
DRAINED_NODES = Metric(
    "keeper_reclaim_drained_nodes_total",
    Kind.COUNTER,
    "1",
    (),
    "Nodes job reclaim drained because an agent kept holding a finished job.",
)
WATCH_VERDICTS = Metric(
    "keeper_watch_verdicts_total",
    Kind.COUNTER,
    "1",
    ("verdict",),
    "Job watch checks, by the liveness verdict: running, stalled, unknown.",
)

# The heartbeat tap's own counters (runtime/reclaim/tap.py TapCounters), served by
# `keeper reclaim tap`: none of them depends on Temporal or the reclaim memory.
TAP_FORWARDED = Metric(
    "keeper_reclaim_tap_forwarded_total",
    Kind.COUNTER,
    "1",
    (),
    "RPCs the reclaim tap forwarded to the spur controller and answered, whatever the status.",
    process="tap",
)
TAP_OBSERVED = Metric(
    "keeper_reclaim_tap_observed_total",
    Kind.COUNTER,
    "1",
    (),
    "Copies of agent calls keeper reads (RegisterAgent, Heartbeat, ReportJobStatus) the reclaim "
    "tap handed to its intake.",
    process="tap",
)
TAP_DROPPED = Metric(
    "keeper_reclaim_tap_dropped_total",
    Kind.COUNTER,
    "1",
    (),
    "Copies the reclaim tap dropped because its queue was full (the calls were forwarded).",
    process="tap",
)
TAP_OBSERVER_ERRORS = Metric(
    "keeper_reclaim_tap_observer_errors_total",
    Kind.COUNTER,
    "1",
    (),
    "Copies the reclaim intake failed on (logged; the calls were forwarded).",
    process="tap",
)
TAP_DECODE_ERRORS = Metric(
    "keeper_reclaim_tap_decode_errors_total",
    Kind.COUNTER,
    "1",
    (),
    "Copies that did not decode as spur's messages (the calls were forwarded).",
    process="tap",
)
TAP_METRICS: tuple[Metric, ...] = (
    TAP_FORWARDED,
    TAP_OBSERVED,
    TAP_DROPPED,
    TAP_OBSERVER_ERRORS,
    TAP_DECODE_ERRORS,
)

METRICS: tuple[Metric, ...] = (
    BOOTSTRAPS,
    PHASE_DURATION,
    COMPENSATIONS,
    SWEPT,
    RUNNER_DELETIONS,
    RUNNER_ESCALATIONS,
    LANE_RECORDS,
    RECLAIMS,
    DRAINED_NODES,
    WATCH_VERDICTS,
    *TAP_METRICS,
)


def _attributes(metric: Metric, kind: Kind, labels: dict[str, str]) -> dict[str, str | int]:
    # A programming error: the table is the contract the docs, alerts and dashboard rely on.
    if metric not in METRICS or metric.kind is not kind:
        raise ValueError(f"{metric.name} is not a declared {kind.value}")
    if set(labels) != set(metric.labels):
        raise ValueError(f"{metric.name} takes labels {metric.labels}, not {tuple(labels)}")
    return dict(labels)


def _counter(meter: MetricMeter, metric: Metric, labels: dict[str, str]) -> MetricCounter:
    attributes = _attributes(metric, Kind.COUNTER, labels)
    return meter.create_counter(
        metric.sdk_name, metric.help, metric.unit
    ).with_additional_attributes(attributes)


def count(meter: MetricMeter, metric: Metric, value: int = 1, **labels: str) -> None:
    if value <= 0:
        return
    _counter(meter, metric, labels).add(value)


def publish_zero(meter: MetricMeter, metric: Metric, **labels: str) -> None:
    """The counter's series at 0, before anything counts into it. An alert rule's
    `increase(...) > 0` needs a sample before the first count: a series whose first sample
    is already 1 never increased as far as Prometheus can see."""
    _counter(meter, metric, labels).add(0)


def observe(meter: MetricMeter, metric: Metric, value: float, **labels: str) -> None:
    attributes = _attributes(metric, Kind.HISTOGRAM, labels)
    meter.create_histogram_float(
        metric.sdk_name, metric.help, metric.unit
    ).with_additional_attributes(attributes).record(value)


def gauge(meter: MetricMeter, metric: Metric, value: int, **labels: str) -> None:
    attributes = _attributes(metric, Kind.GAUGE, labels)
    meter.create_gauge(metric.sdk_name, metric.help, metric.unit).with_additional_attributes(
        attributes
    ).set(value)


def exposition(values: Mapping[Metric, float]) -> str:
    """Unlabelled metrics in Prometheus's text format (0.0.4), for a process that counts
    outside the SDK (the tap): HELP, TYPE and the one sample of each."""
    lines: list[str] = []
    for metric, value in values.items():
        if metric not in METRICS or metric.labels or metric.kind is Kind.HISTOGRAM:
            raise ValueError(f"{metric.name} is not a declared unlabelled counter or gauge")
        help_text = metric.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {metric.name} {help_text}")
        lines.append(f"# TYPE {metric.name} {metric.kind.value}")
        lines.append(f"{metric.name} {value}")
    return "\n".join(lines) + "\n"


EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsEndpointError(Exception):
    """The metrics endpoint could not listen, phrased for the operator."""


@functools.cache
def prometheus_runtime(address: str) -> Runtime:
    """The process's one Runtime serving /metrics on `address` (worker.metrics_address).

    Counters get the `_total` suffix and durations are seconds, as Prometheus expects; the
    SDK's own metrics follow the same rules (temporal_workflow_completed_total).
    """
    config = PrometheusConfig(
        bind_address=address,
        counters_total_suffix=True,
        durations_as_seconds=True,
        histogram_bucket_overrides={
            m.sdk_name: list(m.buckets) for m in METRICS if m.kind is Kind.HISTOGRAM
        },
    )
    try:
        return Runtime(telemetry=sdk_telemetry(config))
    except Exception as err:  # the bridge raises a bare exception for a busy or bad address
        raise MetricsEndpointError(
            f"worker.metrics_address {address!r}: cannot serve metrics there ({err}); "
            'choose a free HOST:PORT, or set it to "" to turn metrics off'
        ) from None
