"""Decisions the deletion workflow takes about a record's status, one step at a time.

Each step re-reads the record and asks these functions what to do with what it found, so
the workflow acts on durable state and never on a cached idea of it.
"""

from __future__ import annotations

from enum import StrEnum

from keeper.domain.runners.status import InstanceStatus, can_transition, lane_rank, on_lane

S = InstanceStatus


class LaneMove(StrEnum):
    WRITE = "write"  # compare-and-set the record to the target
    ALREADY = "already"  # the record is at the target or past it: the intent is fulfilled
    BLOCKED = "blocked"  # the record cannot reach the target from where it is


def entry_target(force: bool) -> InstanceStatus:
    return S.PENDING_FORCE_DELETE if force else S.PENDING_DELETE


def decide(current: InstanceStatus, target: InstanceStatus) -> LaneMove:
    """What to do to move a record at `current` to the lane status `target`.

    A record already at or beyond the target counts as success: a runner that is already
    being deleted is what every deletion request wants. The one exception is the upgrade
    from pending_delete to pending_force_delete, which is a real write.
    """
    if current == target:
        return LaneMove.ALREADY
    if on_lane(current) and lane_rank(current) >= lane_rank(target):
        if current is S.PENDING_DELETE and target is S.PENDING_FORCE_DELETE:
            return LaneMove.WRITE
        return LaneMove.ALREADY
    if can_transition(current, target):
        return LaneMove.WRITE
    return LaneMove.BLOCKED
