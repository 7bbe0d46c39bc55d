"""TpuSweeper: deletes labelled TPU resources whose owning run closed without success.

    survey every location ─► triage (domain/tpu/sweep.py) ─► delete the orphans, bounded

A Temporal Schedule runs it. It backs up compensation for the cases no workflow code can
cover, such as a supervisor terminated while its child was already gone, or a teardown
terminated mid-delete. It covers every project and zone keeper has bootstrapped in.

Each orphan's deletion is bounded (`sweeper.delete_timeout`) and runs alongside the others
(at most `sweeper.max_concurrent_deletes` at once): one resource that cannot be deleted is
reported with its error and left for the next pass, and never holds up the rest, nor,
since the schedule skips overlapping runs, every later sweep.
"""

from __future__ import annotations

import asyncio

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from keeper.domain.tpu.models import SweepCandidate, SweepPolicy, SweepReport, SweepRequest
    from keeper.domain.tpu.status_view import render_sweep
    from keeper.domain.tpu.sweep import candidate_label, finished, listed, orphan_ref, triage
    from keeper.workflows.common.publishing import Publisher
    from keeper.workflows.tpu import calls, metrics
    from keeper.workflows.tpu.compensation import (
        DeletionUnfinished,
        delete_slice_within,
        deletion,
    )


@workflow.defn(
    name="TpuSweeper",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.PINNED,
)
class TpuSweeper:
    def __init__(self) -> None:
        self._publisher = Publisher()

    @workflow.run
    async def run(self, req: SweepRequest) -> SweepReport:
        policy = await calls.read_policy()
        survey = await calls.survey(req)
        report, orphans = triage(survey, req.dry_run)
        for label in report.unknown_owner:
            workflow.logger.warning("no owner found for %s; left for an operator", label)
        self._set(report)
        gate = asyncio.Semaphore(policy.sweep.max_concurrent_deletes)
        await asyncio.gather(*(self._delete(c, req, policy.sweep, gate) for c in orphans))
        self._set(finished(self._report))
        metrics.sweep_done(self._report)
        return self._report

    async def _delete(
        self,
        candidate: SweepCandidate,
        req: SweepRequest,
        policy: SweepPolicy,
        gate: asyncio.Semaphore,
    ) -> None:
        resource = candidate.resource
        label = candidate_label(candidate)
        async with gate:
            try:
                await delete_slice_within(
                    deletion(
                        orphan_ref(candidate, req.project, req.zone),
                        resource.owner_workflow_id,
                        resource.owner_run_id,
                        f"sweeper: owner {candidate.owner_status}",
                    ),
                    policy.delete_timeout,
                )
            except DeletionUnfinished as unfinished:
                workflow.logger.warning(
                    "sweeper could not delete %s within %s: %s; the next pass tries again",
                    label,
                    policy.delete_timeout,
                    unfinished.last_error,
                )
                self._set(listed(self._report, "failed", f"{label}: {unfinished.last_error}"))
            else:
                self._set(listed(self._report, "deleted", label))

    def _set(self, report: SweepReport) -> None:
        self._report = report
        self._publisher.publish(render_sweep(report))
