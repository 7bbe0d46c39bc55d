"""What the runner family's workflows count (runtime/metrics.py declares each metric).

Through workflow.metric_meter(), which records nothing while a history replays.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keeper.domain.runners.models import DeletionOutcome, DeletionResult
    from keeper.runtime import metrics as m


def deletion_closed(result: DeletionResult) -> DeletionResult:
    """Counts a closed deletion and hands its result on; a forced delete is its own outcome,
    since it may have left an instance behind."""
    forced = result.forced and result.outcome is DeletionOutcome.DELETED
    outcome = "forced" if forced else result.outcome.value
    m.count(workflow.metric_meter(), m.RUNNER_DELETIONS, outcome=outcome)
    return result


def escalated() -> None:
    m.count(workflow.metric_meter(), m.RUNNER_ESCALATIONS)
