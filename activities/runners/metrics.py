"""What the runner family's activities measure (runtime/metrics.py declares each metric)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from temporalio import activity

from keeper.domain.runners.models import RunnerRecord
from keeper.domain.runners.status import InstanceStatus
from keeper.runtime import metrics as m


def lane_records(records: Iterable[RunnerRecord]) -> None:
    """Every status is set, zeros too, so a status that emptied does not keep its old count."""
    counts = Counter(r.instance_status for r in records)
    meter = activity.metric_meter()
    for status in InstanceStatus:
        m.gauge(meter, m.LANE_RECORDS, counts[status], status=status.value)
