"""What the watch family's workflows count (runtime/metrics.py declares each metric).

Through workflow.metric_meter(), which records nothing while a history replays.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keeper.domain.watch.models import Verdict
    from keeper.runtime import metrics as m


def verdict(seen: Verdict) -> None:
    """One check's liveness verdict."""
    m.count(workflow.metric_meter(), m.WATCH_VERDICTS, verdict=seen)
