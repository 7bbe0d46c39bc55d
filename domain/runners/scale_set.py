"""Scale-set capacity: how many runners a set has, and what to create or remove.

Only live records count. A record on the deletion lane cannot take a job, so counting it
(as the #854 controller did) suppresses scale-up, and a couple of records stuck on the lane
pin a quiet set in permanent scale-down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.runners.models import RunnerRecord
from keeper.domain.runners.status import LIVE, AgentStatus, InstanceStatus

S = InstanceStatus

RunnerCounter = Callable[[Sequence[RunnerRecord]], int]


def live_runner_count(records: Sequence[RunnerRecord]) -> int:
    return sum(1 for r in records if r.instance_status in LIVE)


class ScalePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_idle_runners: int = Field(default=0, ge=0)
    max_runners: int = Field(default=10, ge=0)


class ScalePlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    desired: int
    counted: int
    create: int = 0
    remove: tuple[str, ...] = ()


def plan_scaling(
    records: Sequence[RunnerRecord],
    policy: ScalePolicy,
    queued_jobs: int,
    count: RunnerCounter = live_runner_count,
) -> ScalePlan:
    """GARM's scale-set rule: enough runners for the queued jobs plus the idle minimum."""
    desired = min(policy.max_runners, queued_jobs + policy.min_idle_runners)
    counted = count(records)
    if counted < desired:
        return ScalePlan(desired=desired, counted=counted, create=desired - counted)
    if counted == desired:
        return ScalePlan(desired=desired, counted=counted)
    # Removal candidates are live records only; lane records are not part of the count
    # the delta came from, so they never consume it. Idle or never-started live runners go
    # first; a busy one is never a removal candidate.
    busy = AgentStatus.ACTIVE
    idle = [r for r in records if r.instance_status in LIVE and r.agent_status is not busy]
    candidates = sorted(idle, key=lambda r: (r.instance_status is S.RUNNING, r.created_at, r.name))
    remove = tuple(r.name for r in candidates[: counted - desired])
    return ScalePlan(desired=desired, counted=counted, remove=remove)
