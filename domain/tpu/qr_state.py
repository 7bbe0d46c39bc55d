"""How keeper reads queued-resource and node states.

GCP renamed ACCEPTED to WAITING_FOR_RESOURCES; CREATING, ACCEPTED and WAITING_FOR_RESOURCES
all mean "waiting for assignment". FAILED, SUSPENDING, SUSPENDED and DELETING end a bootstrap
at once: none of them can still turn into a usable slice.
"""

from __future__ import annotations

from enum import StrEnum


class QrStage(StrEnum):
    WAITING = "waiting"
    PROVISIONING = "provisioning"
    ACTIVE = "active"
    TERMINAL = "terminal"


WAITING_STATES = frozenset({"STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"})
TERMINAL_STATES = frozenset({"FAILED", "SUSPENDING", "SUSPENDED", "DELETING"})
# NotFound while we still expect the resource is terminal too; it is reported as this state.
GONE = "NOT_FOUND"


def qr_stage(state: str) -> QrStage:
    if state in WAITING_STATES:
        return QrStage.WAITING
    if state == "PROVISIONING":
        return QrStage.PROVISIONING
    if state == "ACTIVE":
        return QrStage.ACTIVE
    if state in TERMINAL_STATES or state == GONE:
        return QrStage.TERMINAL
    # An unknown future state must not be mistaken for progress; keep waiting on it.
    return QrStage.WAITING


# Node states that can never become READY without someone else's intervention.
NODE_TERMINAL_STATES = frozenset({"DELETING", "PREEMPTED", "TERMINATED", "STOPPED", "STOPPING"})


def node_is_terminal(state: str) -> bool:
    return state in NODE_TERMINAL_STATES or state == GONE
