"""Which labelled resources the sweeper deletes.

A resource is an orphan when the run that created it is closed and did not complete: a
completed bootstrap handed its slice over to its user, and a running one still owns it.
"""

from __future__ import annotations

from enum import StrEnum

from domain.bootstrap_models import SweepCandidate


class SweepAction(StrEnum):
    DELETE = "delete"
    KEEP = "keep"
    UNKNOWN_OWNER = "unknown-owner"


CLOSED_WITHOUT_SUCCESS = frozenset({"FAILED", "CANCELED", "TERMINATED", "TIMED_OUT"})
OWNER_NOT_FOUND = "NOT_FOUND"


def sweep_action(candidate: SweepCandidate) -> SweepAction:
    status = candidate.owner_status
    if status in CLOSED_WITHOUT_SUCCESS:
        return SweepAction.DELETE
    if status == OWNER_NOT_FOUND:
        # The owner's history is gone (retention) or the label was forged: a human decides.
        return SweepAction.UNKNOWN_OWNER
    # RUNNING, COMPLETED, CONTINUED_AS_NEW: someone owns it.
    return SweepAction.KEEP
