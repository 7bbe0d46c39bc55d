"""What the reclaim family's workflows count (runtime/metrics.py declares each metric).

Through workflow.metric_meter(), which records nothing while a history replays.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keeper.domain.reclaim.steps import Outcome
    from keeper.runtime import metrics as m


def reclaim_closed(outcome: Outcome) -> None:
    m.count(workflow.metric_meter(), m.RECLAIMS, outcome=outcome.value)


def node_drained() -> None:
    m.count(workflow.metric_meter(), m.DRAINED_NODES)
