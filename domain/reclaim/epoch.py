"""Controller epochs: telling a wiped controller's reissued ids from the ids keeper saw.

A spur controller allocates ids from a counter, so within one incarnation ids grow with
submit time. After a wipe the counter starts again, and new jobs get ids keeper has already
seen on older jobs. keeper's rule: a job in a view whose id is at or below the highest id of
the current epoch, but which was submitted after that highest job (beyond the clock skew),
or a job id keeper remembers in this epoch with a different submit time, proves the ids were
reissued: the next epoch begins.

One job's submit time never changes, and both readings come from the controller's clock, so
the same id's submit times are compared to SAME_JOB_TOLERANCE (the precision keeper stores),
not to the clock skew: a wipe that reissues an id is seen however soon after the original
submission it comes. Different ids' submit times are compared with the skew, since
concurrent submissions may be stamped out of id order. Evictions never trip it (they remove
jobs, they never add a low id with a new submit time), so an emptied job map is not a new
epoch on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from keeper.domain.reclaim.jobs import FINALIZED
from keeper.domain.reclaim.models import ControllerView, EpochState, JobView, KnownJob

# The same job read twice: keeper stores times to the microsecond, the controller stamps
# them to the nanosecond.
SAME_JOB_TOLERANCE = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Observation:
    """What one view changes in keeper's memory."""

    epoch: EpochState
    # A new epoch began with this view (epoch.why says why).
    new_epoch: bool
    # Jobs to remember: new ids, and ids whose finalized-ness changed.
    remember: list[KnownJob] = field(default_factory=list)


def _reissued(job: JobView, epoch: EpochState, known: KnownJob | None, skew: timedelta) -> str:
    if (
        known is not None
        and known.submit_time
        and job.submit_time
        and abs(known.submit_time - job.submit_time) > SAME_JOB_TOLERANCE
    ):
        return (
            f"job {job.job_id} was submitted at {job.submit_time.isoformat()}, but keeper "
            f"saw job {job.job_id} submitted at {known.submit_time.isoformat()}"
        )
    if (
        epoch.high_submit is not None
        and job.submit_time is not None
        and job.job_id <= epoch.high_id
        and job.submit_time > epoch.high_submit + skew
    ):
        return (
            f"job {job.job_id} was submitted after job {epoch.high_id}, the highest id keeper "
            "saw, so the controller issued ids again from the start"
        )
    return ""


def observe(
    view: ControllerView,
    epoch: EpochState,
    known: Mapping[int, KnownJob],
    skew: timedelta,
) -> Observation:
    """Folds one view into keeper's memory: `known` holds the current epoch's jobs."""
    why = ""
    for job in view.jobs.values():
        why = _reissued(job, epoch, known.get(job.job_id), skew)
        if why:
            break
    new_epoch = bool(why)
    if new_epoch:
        epoch = EpochState(epoch=epoch.epoch + 1, started_at=view.read_at, why=why)
        known = {}
    high = max(view.jobs.values(), key=lambda j: j.job_id, default=None)
    if high is not None and high.job_id > epoch.high_id:
        epoch = epoch.model_copy(update={"high_id": high.job_id, "high_submit": high.submit_time})
    remember = [
        _known(job, epoch.epoch, view.read_at)
        for job in view.jobs.values()
        if _changed(known.get(job.job_id), job)
    ]
    return Observation(epoch=epoch, new_epoch=new_epoch, remember=remember)


def _changed(before: KnownJob | None, job: JobView) -> bool:
    return (
        before is None
        or before.finalized != (job.state in FINALIZED)
        or (before.last_state != job.state)
    )


def _known(job: JobView, epoch: int, at: datetime) -> KnownJob:
    return KnownJob(
        job_id=job.job_id,
        epoch=epoch,
        submit_time=job.submit_time,
        finalized=job.state in FINALIZED,
        last_state=job.state,
        last_seen=at,
    )
