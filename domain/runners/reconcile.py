"""The reconciler's rule: which mismatches between the store, GitHub and the provider it
sees, and when it may act on one.

Pure and table-tested. The reconciler acts on a mismatch only when two consecutive passes
saw it, because each source is read at a slightly different moment: a runner registered a
second before its record was written is not an orphan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.runners.github import GitHubRunner
from keeper.domain.runners.models import RunnerRecord
from keeper.domain.runners.provider import ProviderInstance
from keeper.domain.runners.status import InstanceStatus, on_lane

S = InstanceStatus
CONFIRMING_PASSES = 2

# Records whose instance may legitimately not exist yet.
_NOT_YET_CREATED = frozenset({S.PENDING_CREATE, S.CREATING})


class MismatchKind(StrEnum):
    REGISTRATION = "registration"  # a registration with no record: remove it from GitHub
    INSTANCE = "instance"  # an instance with no record: delete it through the provider
    RECORD = "record"  # a record whose instance is gone: request its deletion
    UNOWNED_LANE = "unowned-lane"  # a lane record with no deletion running: request one


class Mismatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: MismatchKind
    key: str  # stable across passes; what the store's marks count
    runner: str
    scope: str | None = None
    github_runner_id: int | None = None
    pool: str | None = None
    provider_id: str | None = None
    detail: str = ""


def find_mismatches(
    records: Sequence[RunnerRecord],
    registrations: Mapping[str, Sequence[GitHubRunner]],
    instances: Mapping[str, Sequence[ProviderInstance]],
    *,
    managed_label: str,
    lane_owned: Iterable[str] = (),
) -> list[Mismatch]:
    """Mismatches visible in one snapshot.

    `registrations` and `instances` hold only the scopes and pools that were listed
    successfully: a source that failed to answer says nothing about what is missing.
    `lane_owned` names the lane records whose deletion workflow is running.
    """
    kept = [r for r in records if r.instance_status is not S.DELETED]
    by_name = {r.name: r for r in kept}
    by_provider_id = {r.provider_id: r for r in kept if r.provider_id}
    owned = set(lane_owned)
    found: list[Mismatch] = []

    for scope, runners in sorted(registrations.items()):
        for runner in runners:
            if managed_label not in runner.labels or runner.name in by_name:
                continue
            found.append(
                Mismatch(
                    kind=MismatchKind.REGISTRATION,
                    key=f"{scope}#{runner.id}",
                    runner=runner.name,
                    scope=scope,
                    github_runner_id=runner.id,
                    detail=f"registered in {scope} with no runner record",
                )
            )

    listed_ids: dict[str, set[str]] = {}
    for pool, pool_instances in sorted(instances.items()):
        listed_ids[pool] = set()
        for inst in pool_instances:
            listed_ids[pool].update({inst.provider_id, inst.name})
            if inst.provider_id in by_provider_id or inst.name in by_name:
                continue
            found.append(
                Mismatch(
                    kind=MismatchKind.INSTANCE,
                    key=f"{pool}#{inst.provider_id}",
                    runner=inst.name,
                    pool=pool,
                    provider_id=inst.provider_id,
                    detail=f"instance in pool {pool} with no runner record",
                )
            )

    for record in kept:
        if on_lane(record.instance_status):
            if record.name not in owned:
                found.append(
                    Mismatch(
                        kind=MismatchKind.UNOWNED_LANE,
                        key=record.name,
                        runner=record.name,
                        detail=f"{record.instance_status} with no deletion workflow running",
                    )
                )
            continue
        if record.instance_status in _NOT_YET_CREATED or record.scale_set not in listed_ids:
            continue
        ids = listed_ids[record.scale_set]
        if (record.provider_id or record.name) not in ids and record.name not in ids:
            found.append(
                Mismatch(
                    kind=MismatchKind.RECORD,
                    key=record.name,
                    runner=record.name,
                    pool=record.scale_set,
                    provider_id=record.provider_id,
                    detail=f"{record.instance_status} record whose instance is gone",
                )
            )
    return found


class ReconcileRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scopes: list[str] = Field(default_factory=list)
    managed_label: str = "keeper-managed"
    # Pools to list besides every scale set the store knows.
    pools: list[str] = Field(default_factory=list)
    # Where requested deletions run; the workflow sets its own task queue here.
    task_queue: str = "keeper"
    # One provider call; kept well under the pass's heartbeat timeout.
    provider_timeout_s: float = Field(default=60.0, gt=0, le=120.0, strict=True)
    tombstone_retention_s: float = Field(default=7 * 86400.0, strict=True)
    # Actions per pass; the rest wait for the next pass (they stay confirmed). The
    # deletions it requests follow the worker's policy (runners.deletion), as every one does.
    max_actions: int = Field(default=50, ge=1, strict=True)


class ReconcileReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    seen: dict[str, int] = Field(default_factory=dict)  # per kind, this pass
    confirmed: dict[str, int] = Field(default_factory=dict)  # seen on two passes
    acted: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    purged_tombstones: int = 0

    def summary(self) -> str:
        seen = ", ".join(f"{k} {v}" for k, v in sorted(self.seen.items())) or "none"
        return (
            f"mismatches seen: {seen}; acted on {len(self.acted)}; "
            f"errors {len(self.errors)}; tombstones purged {self.purged_tombstones}"
        )
