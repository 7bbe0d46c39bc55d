"""The runner status vocabulary and the one transition table every status write obeys.

The vocabulary is GARM's, so records and operators' habits carry over. The table differs
from GARM's on purpose in three places, each closing a hole from the #854 chain:

- the deletion lane is forward-only: nothing leaves it except forward, and `deleting`
  no longer falls back to `error` (a failing provider delete is retried by the record's
  one durable owner while the record stays on the lane);
- `creating` may enter the lane, because a deletion can be requested for a runner whose
  create is still in flight, and the provider's delete is idempotent;
- `unknown` (a record whose agent stopped reporting) may enter the lane or be resolved.
"""

from __future__ import annotations

from enum import StrEnum


class InstanceStatus(StrEnum):
    PENDING_CREATE = "pending_create"
    CREATING = "creating"
    RUNNING = "running"
    STOPPED = "stopped"
    ERROR = "error"
    PENDING_DELETE = "pending_delete"
    PENDING_FORCE_DELETE = "pending_force_delete"
    DELETING = "deleting"
    DELETED = "deleted"
    UNKNOWN = "unknown"


class AgentStatus(StrEnum):
    """What the runner's agent last reported; informational, never a lane status."""

    PENDING = "pending"
    INSTALLING = "installing"
    IDLE = "idle"
    ACTIVE = "active"
    FAILED = "failed"
    OFFLINE = "offline"
    TERMINATED = "terminated"


S = InstanceStatus

TRANSITIONS: dict[InstanceStatus, frozenset[InstanceStatus]] = {
    S.PENDING_CREATE: frozenset({S.CREATING, S.PENDING_DELETE, S.PENDING_FORCE_DELETE}),
    S.CREATING: frozenset({S.RUNNING, S.ERROR, S.PENDING_DELETE, S.PENDING_FORCE_DELETE}),
    S.RUNNING: frozenset({S.STOPPED, S.UNKNOWN, S.PENDING_DELETE, S.PENDING_FORCE_DELETE}),
    S.STOPPED: frozenset({S.RUNNING, S.UNKNOWN, S.PENDING_DELETE, S.PENDING_FORCE_DELETE}),
    S.ERROR: frozenset({S.UNKNOWN, S.PENDING_DELETE, S.PENDING_FORCE_DELETE, S.DELETING}),
    S.UNKNOWN: frozenset({S.RUNNING, S.STOPPED, S.ERROR, S.PENDING_DELETE, S.PENDING_FORCE_DELETE}),
    S.PENDING_DELETE: frozenset({S.PENDING_FORCE_DELETE, S.DELETING}),
    S.PENDING_FORCE_DELETE: frozenset({S.DELETING}),
    S.DELETING: frozenset({S.DELETED}),
    S.DELETED: frozenset(),
}

# The deletion lane, in the order a record moves along it.
DELETION_LANE: tuple[InstanceStatus, ...] = (
    S.PENDING_DELETE,
    S.PENDING_FORCE_DELETE,
    S.DELETING,
    S.DELETED,
)
# Records that can run jobs, or soon will: the only ones a scale set counts as capacity.
LIVE: frozenset[InstanceStatus] = frozenset(
    {S.PENDING_CREATE, S.CREATING, S.RUNNING, S.STOPPED, S.ERROR}
)


class InvalidTransition(ValueError):
    def __init__(self, current: InstanceStatus, target: InstanceStatus) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "nothing (terminal)"
        super().__init__(
            f"{current} -> {target} is not a valid transition; {current} may go to {allowed}"
        )
        self.current = current
        self.target = target


def can_transition(current: InstanceStatus, target: InstanceStatus) -> bool:
    return target in TRANSITIONS[current]


def check_transition(current: InstanceStatus, target: InstanceStatus) -> None:
    if not can_transition(current, target):
        raise InvalidTransition(current, target)


def on_lane(status: InstanceStatus) -> bool:
    return status in DELETION_LANE


# Position on the lane: pending_delete and its forced twin share a rank.
_LANE_RANK = {S.PENDING_DELETE: 0, S.PENDING_FORCE_DELETE: 0, S.DELETING: 1, S.DELETED: 2}


def lane_rank(status: InstanceStatus) -> int:
    """Position on the lane; -1 off it."""
    return _LANE_RANK.get(status, -1)
