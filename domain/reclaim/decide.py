"""The reclaim verdict of one holding, from one controller view and keeper's memory.

spur's rule (#623) is the first column's starting point; keeper adds the fences its holes
called for (docs/reclaim.md#deciding). Rows are tried top to bottom; the first match wins.

| # | what keeper sees | verdict | reason |
|---|---|---|---|
| 1 | the node is not one keeper knows | quarantine | unknown-node |
| 2 | tracked, active, this node in the allocation | spare | active-here |
| 3 | tracked, active, no allocation committed yet | spare | nodes-not-committed |
| 4 | seen in an older epoch, or soon after this one began | quarantine | other-controller-epoch |
| 5 | tracked, the holding first seen before the job's submit | quarantine | predates-the-job |
| 6 | tracked, waiting (pending, preempted, requeued) | spare | waiting-for-dispatch |
| 7 | tracked, active, allocated to other nodes only | reclaim | active-elsewhere |
| 8 | tracked, terminal, no end time | spare | end-time-unknown |
| 9 | tracked, terminal, ended less than end_grace ago | spare | just-ended |
| 10 | tracked, terminal | reclaim | terminal |
| 11 | untracked, id at or above the watermark | spare | at-or-above-watermark |
| 12 | untracked, keeper never saw the id issued in this epoch | quarantine | never-seen-issued |
| 13 | untracked, first seen before keeper saw the job submitted | quarantine | predates-the-job |
| 14 | untracked, last seen live (it cannot have aged out) | quarantine | vanished-while-live |
| 15 | untracked, last seen finalized | reclaim | aged-out |

Rows 2 and 3 come before every fence: a job the controller runs on the node (or may be
placing there) is never cancelled, quarantined or drained, whatever keeper remembers of its
id. A wipe seen out of order can leave a new controller's holding remembered in the old
epoch; its job runs there, and the verdict follows what the controller runs now.

Row 4's second half: an agent whose job started moments before a wipe may list it for the
first time only after the wipe, when the new controller may already have issued its id to
another job. Its heartbeat after the wipe lists it within one interval (spurd: 30 s) unless
a busy job map empties that one, and keeper finds the new epoch no earlier than the wipe, so
a holding first seen before the epoch's start plus `epoch_fence` may be the wiped
controller's: unless the new controller ran
its job of that id on this very node, it is fenced, never cancelled by a number that now
names another job.

Omission is never an input: only what an agent reports holding is decided, and a heartbeat
that omits a job is evidence of nothing here (domain/reclaim/evidence.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from keeper.domain.reclaim.jobs import ACTIVE, TERMINAL, WAITING
from keeper.domain.reclaim.models import (
    ControllerView,
    Decision,
    EpochState,
    Holding,
    JobView,
    KnownJob,
    Reason,
    Verdict,
)
from keeper.domain.reclaim.policy import ReclaimPolicy

V, R = Verdict, Reason


def decide(
    holding: Holding,
    view: ControllerView,
    epoch: EpochState,
    known: KnownJob | None,
    known_nodes: Collection[str],
    policy: ReclaimPolicy,
) -> Decision:
    """The verdict on `holding`, from `view` alone for the controller's side.

    `known` is keeper's memory of the job id in the current epoch (None if never seen),
    `known_nodes` the canonical ids of the nodes keeper knows (registered through the tap or
    listed by the controller), `view.read_at` the time the verdict is for.
    """
    job = view.jobs.get(holding.job_id)
    watermark = max(epoch.watermark, view.max_job_id + 1)

    def verdict(v: Verdict, r: Reason, detail: str) -> Decision:
        return Decision(
            verdict=v, reason=r, detail=detail, job=job, watermark=watermark, epoch=epoch.epoch
        )

    node, job_id = holding.node, holding.job_id
    if node not in known_nodes:
        return verdict(
            V.QUARANTINE, R.UNKNOWN_NODE,
            f"{node} is not a node keeper knows: it never registered through the tap and the "
            "controller does not list it",
        )  # fmt: skip
    if job is not None and job.state in ACTIVE and not job.nodes:
        return verdict(
            V.SPARE, R.NODES_NOT_COMMITTED,
            f"job {job_id} is {job.state.name} with no nodes committed yet: {node} may be one",
        )  # fmt: skip
    if job is not None and job.state in ACTIVE and node in job.nodes:
        return verdict(V.SPARE, R.ACTIVE_HERE, f"job {job_id} is {job.state.name} on {node}")
    if holding.epoch != epoch.epoch:
        return verdict(
            V.QUARANTINE, R.OTHER_EPOCH,
            f"{node} has held job {job_id} since controller epoch {holding.epoch}; the "
            f"controller is in epoch {epoch.epoch}, so the id may name another job",
        )  # fmt: skip
    if (
        epoch.started_at is not None
        and holding.first_seen < epoch.started_at + policy.epoch_fence
        and (job is None or node not in job.nodes)
    ):
        return verdict(
            V.QUARANTINE, R.OTHER_EPOCH,
            f"{node} was first seen holding job {job_id} within {_ago(policy.epoch_fence)} of "
            f"controller epoch {epoch.epoch}'s start: it may hold a run of the wiped "
            "controller, whose id names another job now",
        )  # fmt: skip
    if job is not None:
        return _tracked(holding, job, view.read_at, policy, verdict)
    if job_id >= watermark:
        return verdict(
            V.SPARE, R.NEVER_ISSUED,
            f"job {job_id} is at or above the watermark {watermark}: not issued here yet",
        )  # fmt: skip
    if known is None:
        return verdict(
            V.QUARANTINE, R.NEVER_SEEN,
            f"the controller does not track job {job_id}, and keeper never saw it issued in "
            f"epoch {epoch.epoch}: no proof the holding is stale",
        )  # fmt: skip
    if _before(holding.first_seen, known.submit_time, policy.clock_skew):
        return verdict(
            V.QUARANTINE, R.PREDATES_JOB,
            f"{node} held job {job_id} before keeper saw that job submitted: another job's "
            "holding under a reused id",
        )  # fmt: skip
    if not known.finalized:
        return verdict(
            V.QUARANTINE, R.VANISHED_LIVE,
            f"job {job_id} was {known.last_state.name} when keeper last saw it and is gone "
            "from the controller: a live job cannot age out, so the controller lost it",
        )  # fmt: skip
    return verdict(
        V.RECLAIM, R.AGED_OUT,
        f"job {job_id} ended ({known.last_state.name}) and aged out of the controller",
    )  # fmt: skip


def _before(first_seen: datetime, submitted: datetime | None, skew: timedelta) -> bool:
    """The holding was seen before the job existed (a submit time keeper lacks proves nothing)."""
    return submitted is not None and first_seen + skew < submitted


def _tracked(
    holding: Holding,
    job: JobView,
    now: datetime,
    policy: ReclaimPolicy,
    verdict: Callable[[Verdict, Reason, str], Decision],
) -> Decision:
    node, job_id, state = holding.node, holding.job_id, job.state.name
    if _before(holding.first_seen, job.submit_time, policy.clock_skew):
        return verdict(
            V.QUARANTINE, R.PREDATES_JOB,
            f"{node} held job {job_id} before the controller's job {job_id} was submitted: "
            "a holding of another incarnation",
        )  # fmt: skip
    if job.state in WAITING:
        return verdict(
            V.SPARE, R.WAITING,
            f"job {job_id} is {state}: it may be on its way to {node}",
        )  # fmt: skip
    if job.state in ACTIVE:
        return verdict(
            V.RECLAIM, R.ACTIVE_ELSEWHERE,
            f"job {job_id} is {state} on {job.nodelist or ', '.join(sorted(job.nodes))}, "
            f"not on {node}",
        )  # fmt: skip
    assert job.state in TERMINAL
    if job.end_time is None:
        return verdict(
            V.SPARE, R.END_UNKNOWN,
            f"job {job_id} is {state} without an end time: keeper cannot tell the heartbeat "
            "did not cross its completion",
        )  # fmt: skip
    if now - job.end_time < policy.end_grace:
        return verdict(
            V.SPARE, R.JUST_ENDED,
            f"job {job_id} ended {_ago(now - job.end_time)} ago, within the "
            f"{_ago(policy.end_grace)} grace: the heartbeat may have crossed its completion",
        )  # fmt: skip
    return verdict(
        V.RECLAIM, R.TERMINAL, f"job {job_id} ended {_ago(now - job.end_time)} ago ({state})"
    )


def _ago(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"
