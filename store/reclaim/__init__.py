"""keeper's reclaim memory: holdings first seen, jobs seen, controller epochs, drains owned."""

from keeper.store.reclaim.memory import (
    DRAINS_KEPT,
    FORGET_AFTER,
    RELEASED_BY_REPORT,
    REOPENABLE,
    WEAKLY_RELEASED,
    ReclaimMemory,
    UnknownHolding,
    WorkflowConflict,
    open_reclaim_memory,
)
from keeper.store.reclaim.records import AgentNode, CancelSend, DrainRecord

__all__ = [
    "DRAINS_KEPT",
    "FORGET_AFTER",
    "RELEASED_BY_REPORT",
    "REOPENABLE",
    "WEAKLY_RELEASED",
    "AgentNode",
    "CancelSend",
    "DrainRecord",
    "ReclaimMemory",
    "UnknownHolding",
    "WorkflowConflict",
    "open_reclaim_memory",
]
