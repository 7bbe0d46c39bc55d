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

from keeper.domain.tpu.models import SweepCandidate


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
