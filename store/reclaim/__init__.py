"""keeper's reclaim memory: holdings first seen, jobs seen, controller epochs, drains owned."""

from store.reclaim.memory import (
    FORGET_AFTER,
    ReclaimMemory,
    UnknownHolding,
    WorkflowConflict,
    open_reclaim_memory,
)
from store.reclaim.records import AgentNode, DrainRecord

__all__ = [
    "FORGET_AFTER",
    "AgentNode",
    "DrainRecord",
    "ReclaimMemory",
    "UnknownHolding",
    "WorkflowConflict",
    "open_reclaim_memory",
]
