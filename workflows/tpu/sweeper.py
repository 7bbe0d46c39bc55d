"""TpuSweeper: deletes labelled TPU resources whose owning run closed without success.

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
from typing import Literal

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from keeper.activities.tpu.sweeper import SweeperActivities
    from keeper.domain.common.untrusted import md_text
    from keeper.domain.tpu.models import (
        SliceRef,
        SweepCandidate,
        SweepReport,
        SweepRequest,
        SweepSurvey,
    )
    from keeper.domain.tpu.sweep import SweepAction, sweep_action
    from keeper.workflows.tpu import activity_options as opts
    from keeper.workflows.tpu import metrics
    from keeper.workflows.tpu.compensation import (
        DeletionUnfinished,
        delete_slice,
        delete_slice_within,
    )

# Sweeps recorded before it covered one zone and deleted orphans one by one, unbounded.
SURVEY_PATCH = "sweeper-survey-bounded-deletes"
MAX_SHOWN = 10
ReportList = Literal["kept", "unknown_owner", "deleted", "failed"]


def _label(candidate: SweepCandidate) -> str:
    resource = candidate.resource
    owner = f"owner {resource.owner_workflow_id}: {candidate.owner_status}"
    if candidate.teardown_status:
        owner += f", teardown {candidate.teardown_status}"
    return f"{resource.name} ({owner})"


def _ref(candidate: SweepCandidate, project: str, zone: str) -> SliceRef:
    resource = candidate.resource
    queued = resource.kind == "queued_resource"
    return SliceRef(
        project=candidate.project or project,
        zone=candidate.zone or zone,
        slice_name=resource.id,
        queued=queued,
        node_ids=[] if queued else [resource.id],
    )


@workflow.defn(
    name="TpuSweeper",
    failure_exception_types=[ValidationError],
    versioning_behavior=VersioningBehavior.PINNED,
)
class TpuSweeper:
    @workflow.run
    async def run(self, req: SweepRequest) -> SweepReport:
        if not workflow.patched(SURVEY_PATCH):
            return await self._one_zone(req)
        survey = await workflow.execute_activity_method(
            SweeperActivities.survey_owned_resources,
            req,
            start_to_close_timeout=opts.SURVEY_START_TO_CLOSE,
            retry_policy=opts.SWEEP_RETRY,
            summary=f"list keeper-labelled TPU resources in every location (from {req.zone})",
        )
        self._report = SweepReport(
            examined=len(survey.candidates),
            dry_run=req.dry_run,
            errors=survey.errors,
            locations=[str(location) for location in survey.locations],
        )
        orphans: list[SweepCandidate] = []
        for candidate in survey.candidates:
            action = sweep_action(candidate)
            label = _label(candidate)
            if action is SweepAction.KEEP:
                self._add("kept", label)
            elif action is SweepAction.UNKNOWN_OWNER:
                workflow.logger.warning("no owner found for %s; left for an operator", label)
                self._add("unknown_owner", label)
            elif req.dry_run:
                self._add("deleted", label)
            else:
                orphans.append(candidate)
        self._show(req)
        gate = asyncio.Semaphore(survey.max_concurrent_deletes)
        await asyncio.gather(*(self._delete(c, req, survey, gate) for c in orphans))
        self._report = self._report.model_copy(
            update={
                "deleted": sorted(self._report.deleted),
                "failed": sorted(self._report.failed),
            }
        )
        self._show(req)
        metrics.sweep_done(self._report)
        return self._report

    async def _delete(
        self,
        candidate: SweepCandidate,
        req: SweepRequest,
        survey: SweepSurvey,
        gate: asyncio.Semaphore,
    ) -> None:
        resource = candidate.resource
        label = _label(candidate)
        async with gate:
            try:
                await delete_slice_within(
                    _ref(candidate, req.project, req.zone),
                    resource.owner_workflow_id,
                    resource.owner_run_id,
                    f"sweeper: owner {candidate.owner_status}",
                    survey.delete_timeout,
                )
            except DeletionUnfinished as unfinished:
                workflow.logger.warning(
                    "sweeper could not delete %s within %s: %s; the next pass tries again",
                    label,
                    survey.delete_timeout,
                    unfinished.last_error,
                )
                self._add("failed", f"{label}: {unfinished.last_error}")
            else:
                self._add("deleted", label)
        self._show(req)

    def _add(self, field: ReportList, label: str) -> None:
        self._report = self._report.model_copy(
            update={field: [*getattr(self._report, field), label]}
        )

    def _show(self, req: SweepRequest) -> None:
        report = self._report
        lines = [
            f"## sweep of {len(report.locations)} location(s)",
            "",
            f"examined {report.examined}, deleted {len(report.deleted)}, kept "
            f"{len(report.kept)}, unknown owner {len(report.unknown_owner)}, failed "
            f"{len(report.failed)}" + (" (dry run)" if req.dry_run else ""),
            "",
            "locations: " + ", ".join(md_text(location) for location in report.locations),
        ]
        # Items carry resource names, owner labels and GCP errors: outside text.
        for title, items in (("Not deleted", report.failed), ("Errors", report.errors)):
            if items:
                lines += ["", f"**{title}:**", *(f"- {md_text(i)}" for i in items[:MAX_SHOWN])]
                if len(items) > MAX_SHOWN:
                    lines.append(f"- ... and {len(items) - MAX_SHOWN} more (see the result)")
        workflow.set_current_details("\n".join(lines))

    async def _one_zone(self, req: SweepRequest) -> SweepReport:
        """The pass as recorded before the survey: one zone, orphans one by one."""
        candidates = await workflow.execute_activity_method(
            SweeperActivities.find_sweep_candidates,
            req,
            start_to_close_timeout=opts.CALL_TIMEOUT,
            retry_policy=opts.SWEEP_RETRY,
            summary=f"list keeper-labelled TPU resources in {req.project}/{req.zone}",
        )
        report = SweepReport(examined=len(candidates), dry_run=req.dry_run)
        for candidate in candidates:
            resource = candidate.resource
            action = sweep_action(candidate)
            label = (
                f"{resource.name} (owner {resource.owner_workflow_id}: {candidate.owner_status})"
            )
            if action is SweepAction.KEEP:
                report = report.model_copy(update={"kept": [*report.kept, label]})
                continue
            if action is SweepAction.UNKNOWN_OWNER:
                workflow.logger.warning("no owner found for %s; left for an operator", label)
                report = report.model_copy(update={"unknown_owner": [*report.unknown_owner, label]})
                continue
            if not req.dry_run:
                await delete_slice(
                    _ref(candidate, req.project, req.zone),
                    resource.owner_workflow_id,
                    resource.owner_run_id,
                    f"sweeper: owner {candidate.owner_status}",
                )
            report = report.model_copy(update={"deleted": [*report.deleted, label]})
        workflow.set_current_details(
            f"## sweep of {req.project}/{req.zone}\n\n"
            f"examined {report.examined}, deleted {len(report.deleted)}, kept "
            f"{len(report.kept)}, unknown owner {len(report.unknown_owner)}"
            + (" (dry run)" if req.dry_run else "")
        )
        return report
