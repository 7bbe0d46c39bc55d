"""Which labelled resources the sweeper deletes.

A resource is an orphan when nobody owns it any more: the run that created it closed
without completing, or it completed (handed the slice over) and the teardown that took the
slice back closed without finishing. Only teardowns started after the owner closed count:
an older one released an earlier slice of the same name.

| owning run | teardown started after it closed | action |
|---|---|---|
| FAILED, CANCELED, TERMINATED, TIMED_OUT | any | delete |
| COMPLETED | closed in any state (COMPLETED too) | delete: released, yet still there |
| COMPLETED | RUNNING, or none | keep: the user owns it, or the teardown is deleting it |
| RUNNING, CONTINUED_AS_NEW | any | keep: a bootstrap still owns it |
| not found | any | unknown owner: reported, never deleted |
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from keeper.domain.tpu.models import SliceRef, SweepCandidate, SweepReport, SweepSurvey

ReportList = Literal["kept", "unknown_owner", "deleted", "failed"]


class SweepAction(StrEnum):
    DELETE = "delete"
    KEEP = "keep"
    UNKNOWN_OWNER = "unknown-owner"


CLOSED_WITHOUT_SUCCESS = frozenset({"FAILED", "CANCELED", "TERMINATED", "TIMED_OUT"})
# A teardown in any of these has stopped working on the slice; COMPLETED included, since
# a resource that outlived a finished teardown is nobody's.
TEARDOWN_STOPPED = CLOSED_WITHOUT_SUCCESS | {"COMPLETED"}
OWNER_NOT_FOUND = "NOT_FOUND"


def sweep_action(candidate: SweepCandidate) -> SweepAction:
    status = candidate.owner_status
    if status in CLOSED_WITHOUT_SUCCESS:
        return SweepAction.DELETE
    if status == OWNER_NOT_FOUND:
        # The owner's history is gone (retention) or the label was forged: a human decides.
        return SweepAction.UNKNOWN_OWNER
    if status == "COMPLETED" and candidate.teardown_status in TEARDOWN_STOPPED:
        return SweepAction.DELETE
    # RUNNING, CONTINUED_AS_NEW, or COMPLETED and not released: someone owns it.
    return SweepAction.KEEP


def counts_as_release(
    owner_closed_at: datetime | None, teardown_started_at: datetime | None
) -> bool:
    """A teardown releases the owner's slice only if it started after the owner closed."""
    if owner_closed_at is None or teardown_started_at is None:
        return False
    return teardown_started_at >= owner_closed_at


def candidate_label(candidate: SweepCandidate) -> str:
    """`<resource> (owner <id>: <status>[, teardown <status>])`, as the report lists it."""
    resource = candidate.resource
    owner = f"owner {resource.owner_workflow_id}: {candidate.owner_status}"
    if candidate.teardown_status:
        owner += f", teardown {candidate.teardown_status}"
    return f"{resource.name} ({owner})"


def orphan_ref(candidate: SweepCandidate, project: str, zone: str) -> SliceRef:
    """What to delete for an orphan: the QR (its nodes go with it) or the one node."""
    resource = candidate.resource
    queued = resource.kind == "queued_resource"
    return SliceRef(
        project=candidate.project or project,
        zone=candidate.zone or zone,
        slice_name=resource.id,
        queued=queued,
        node_ids=[] if queued else [resource.id],
    )


def triage(survey: SweepSurvey, dry_run: bool) -> tuple[SweepReport, list[SweepCandidate]]:
    """The pass's report before any deletion, and the orphans to delete (none on a dry
    run, which reports them as deleted)."""
    report = SweepReport(
        examined=len(survey.candidates),
        dry_run=dry_run,
        errors=survey.errors,
        locations=[str(location) for location in survey.locations],
    )
    orphans: list[SweepCandidate] = []
    for candidate in survey.candidates:
        action = sweep_action(candidate)
        if action is SweepAction.KEEP:
            report = listed(report, "kept", candidate_label(candidate))
        elif action is SweepAction.UNKNOWN_OWNER:
            report = listed(report, "unknown_owner", candidate_label(candidate))
        elif dry_run:
            report = listed(report, "deleted", candidate_label(candidate))
        else:
            orphans.append(candidate)
    return report, orphans


def listed(report: SweepReport, field: ReportList, label: str) -> SweepReport:
    return report.model_copy(update={field: [*getattr(report, field), label]})


def finished(report: SweepReport) -> SweepReport:
    """Deletions end in any order; the result lists them sorted."""
    return report.model_copy(
        update={"deleted": sorted(report.deleted), "failed": sorted(report.failed)}
    )
