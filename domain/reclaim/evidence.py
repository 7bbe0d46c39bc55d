"""Release evidence: what an agent says, after keeper saw it holding a job, about that job.

| what arrived | evidence | the tally |
|---|---|---|
| a heartbeat that lists the job | held | every count back to 0 |
| a heartbeat that lists other jobs, not this one | absent | absent + 1 |
| an empty heartbeat, while the controller runs nothing on the node | idle | idle + 1 |
| an empty heartbeat, while the controller runs a job on the node | silent | unchanged |
| the agent's ReportJobStatus for the job (it reaped the process) | done | released |

Which tally releases the holding, strongest first:

| evidence | released when | how strong |
|---|---|---|
| done | at once | the agent's own word: spurd removes a job from its running map, then reports it |
| absent | `policy.release_beats` in a row | complete listings that leave it out |
| idle | `policy.idle_release_beats` in a row, spanning `policy.idle_release_window` | weak |

Empty heartbeats keep the holding's fence when they release it, and so does a completion
report on a quarantined holding: a later heartbeat that lists the job reopens the same
holding (`Release.keeps_fence`).

An empty heartbeat is weak: spurd sends one whenever its job map is busy (`try_lock`), so an
agent that still holds the job can send one. On a node the controller believes idle, the
map is busy only for moments (its monitor loop's reap every 2 s), so empty heartbeats over a
window of minutes are evidence, though not proof. Its mistake corrects itself: the holding
is closed, and a later heartbeat that lists the job again is a new sighting, decided afresh.
An empty heartbeat while the controller runs something on the node is never evidence: that
job's own launch or teardown may be what keeps the map busy.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from enum import StrEnum

from keeper.domain.reclaim.models import Frozen
from keeper.domain.reclaim.policy import ReclaimPolicy


class BeatEvidence(StrEnum):
    HELD = "held"
    ABSENT = "absent"
    SILENT = "silent"
    IDLE = "idle"
    DONE = "done"


def evidence_of(
    reported: Collection[int], job_id: int, *, node_runs_nothing: bool = False
) -> BeatEvidence:
    """What one heartbeat says about `job_id`; `node_runs_nothing`: the controller has no
    active job on the heartbeat's node."""
    if not reported:
        return BeatEvidence.IDLE if node_runs_nothing else BeatEvidence.SILENT
    return BeatEvidence.HELD if job_id in reported else BeatEvidence.ABSENT


class BeatReport(Frozen):
    """One report's evidence about one holding, as the intake signals it to its workflow."""

    evidence: BeatEvidence
    at: datetime
    # The agent's start time as the controller last listed it, when the tap knows it.
    boot: str = ""


class ReleaseTally(Frozen):
    absent_in_a_row: int = 0
    last: BeatEvidence | None = None
    last_at: datetime | None = None
    # Empty heartbeats in a row on a node the controller runs nothing on, since when.
    idle_in_a_row: int = 0
    idle_since: datetime | None = None
    # When the agent reported the job finished (no heartbeat has listed it since).
    done_at: datetime | None = None
    # The last heartbeat that listed the job.
    held_at: datetime | None = None

    def add(self, report: BeatReport) -> ReleaseTally:
        e, at = report.evidence, report.at
        if e is BeatEvidence.HELD:
            return ReleaseTally(last=e, last_at=at, held_at=at)
        update: dict[str, object] = {"last": e, "last_at": at}
        if e is BeatEvidence.ABSENT:
            update["absent_in_a_row"] = self.absent_in_a_row + 1
        elif e is BeatEvidence.IDLE:
            update["idle_in_a_row"] = self.idle_in_a_row + 1
            update["idle_since"] = self.idle_since or at
        elif e is BeatEvidence.DONE:
            update["done_at"] = self.done_at or at
        return self.model_copy(update=update)

    def released(self, policy: ReclaimPolicy) -> bool:
        return self.release(policy) is not None

    def release(self, policy: ReclaimPolicy) -> Release | None:
        """The evidence that releases the holding, strongest first (None: not released)."""
        if self.done_at is not None:
            at = self.done_at.isoformat(timespec="seconds")
            return Release(
                by=BeatEvidence.DONE,
                why=f"the agent reported the job finished at {at} (ReportJobStatus)",
            )
        if self.absent_in_a_row >= policy.release_beats:
            return Release(
                by=BeatEvidence.ABSENT,
                why=f"{self.absent_in_a_row} heartbeats in a row listed other jobs, not this one",
            )
        if (
            self.idle_in_a_row >= policy.idle_release_beats
            and self.idle_since is not None
            and self.last_at is not None
            and self.last_at - self.idle_since >= policy.idle_release_window
        ):
            span = int((self.last_at - self.idle_since).total_seconds())
            return Release(
                by=BeatEvidence.IDLE,
                why=f"{self.idle_in_a_row} empty heartbeats over {span}s while the controller "
                "ran nothing on the node (weak evidence: a heartbeat that lists the job again "
                "reopens the reclaim)",
            )
        return None


class Release(Frozen):
    """What released a holding: the kind of evidence, and a sentence for the operator."""

    by: BeatEvidence
    why: str

    @property
    def weak(self) -> bool:
        """Evidence that is not proof (an idle node's empty heartbeats)."""
        return self.by is BeatEvidence.IDLE

    def keeps_fence(self, fenced: bool) -> bool:
        """Whether the holding is closed so that a later listing reopens the same one (its
        fence, first sighting and epoch, kept) instead of sighting a new one decided afresh.
        `fenced`: keeper's last verdict on it was quarantine.

        Weak evidence may be wrong, so it always keeps the fence. A completion report is
        not bound to the node that sends it (spur checks no node token on ReportJobStatus):
        on a quarantined holding, a forged one must never turn it into a new sighting that
        could be cancelled by its number. Otherwise a report is the agent's word, and a
        later listing of that id is a new run, decided afresh like any other."""
        return self.weak or (fenced and self.by is BeatEvidence.DONE)
