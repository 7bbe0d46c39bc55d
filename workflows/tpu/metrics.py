"""What the TPU family's workflows count (runtime/metrics.py declares each metric).

Through workflow.metric_meter(), which records nothing while a history replays: a bootstrap
is counted once, when it closes, whichever worker runs it.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from keeper.domain.tpu.models import CompensationEvent, PhaseTiming, SweepReport
    from keeper.domain.tpu.phases import Phase
    from keeper.runtime import metrics as m

FAMILY = "tpu"


def bootstrap_closed(outcome: Phase, ended_in: Phase, timings: Sequence[PhaseTiming]) -> None:
    """`outcome` is done, failed or cancelled; `ended_in` the phase it stopped in, whose
    timing is still open on a failure: it lasted until now."""
    meter = workflow.metric_meter()
    m.count(meter, m.BOOTSTRAPS, outcome=outcome.value, phase=ended_in.value)
    now = workflow.now()
    for timing in timings:
        seconds = ((timing.ended_at or now) - timing.started_at).total_seconds()
        m.observe(meter, m.PHASE_DURATION, seconds, phase=timing.phase.value)


def compensation(event: CompensationEvent) -> None:
    m.count(workflow.metric_meter(), m.COMPENSATIONS, family=FAMILY, event=event)


def sweep_done(report: SweepReport) -> None:
    meter = workflow.metric_meter()
    if not report.dry_run:
        m.count(meter, m.SWEPT, len(report.deleted), outcome="deleted")
        m.count(meter, m.SWEPT, len(report.failed), outcome="failed")
    m.count(meter, m.SWEPT, len(report.kept), outcome="kept")
    m.count(meter, m.SWEPT, len(report.unknown_owner), outcome="unknown_owner")
