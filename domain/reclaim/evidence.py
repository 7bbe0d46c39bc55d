"""Release evidence: what later heartbeats say about a holding keeper asked an agent to free.

| the heartbeat | evidence | the tally |
|---|---|---|
| lists the job | held | back to 0 |
| lists other jobs, not this one | absent | one more |
| lists nothing | silent | unchanged |

An empty heartbeat is never evidence: spur's agent sends one whenever its job map is busy,
and a wedged agent sends nothing else. The holding counts as released after
`policy.release_beats` absent heartbeats in a row.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class BeatEvidence(StrEnum):
    HELD = "held"
    ABSENT = "absent"
    SILENT = "silent"


def evidence_of(reported: Collection[int], job_id: int) -> BeatEvidence:
    if not reported:
        return BeatEvidence.SILENT
    return BeatEvidence.HELD if job_id in reported else BeatEvidence.ABSENT


class BeatReport(BaseModel):
    """One heartbeat's evidence about one holding, as the intake signals it to its workflow."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evidence: BeatEvidence
    at: datetime
    # The agent's start time as the controller last listed it, when the tap knows it.
    boot: str = ""


class ReleaseTally(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    absent_in_a_row: int = 0
    last: BeatEvidence | None = None
    last_at: datetime | None = None

    def add(self, report: BeatReport) -> ReleaseTally:
        if report.evidence is BeatEvidence.SILENT:
            count = self.absent_in_a_row
        elif report.evidence is BeatEvidence.HELD:
            count = 0
        else:
            count = self.absent_in_a_row + 1
        return ReleaseTally(absent_in_a_row=count, last=report.evidence, last_at=report.at)

    def released(self, needed: int) -> bool:
        return self.absent_in_a_row >= needed
