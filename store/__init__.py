"""keeper's stores on SQLite (embedded default) or PostgreSQL: the runner store and the
reclaim memory."""

from keeper.store.database import open_engine
from keeper.store.reclaim import (
    AgentNode,
    DrainRecord,
    ReclaimMemory,
    UnknownHolding,
    WorkflowConflict,
    open_reclaim_memory,
)
from keeper.store.runners.store import (
    AuditEntry,
    BadRow,
    CasResult,
    InvalidRecord,
    LaneWriteRefused,
    Leak,
    LeaseResult,
    RecordScan,
    RunnerExists,
    RunnerStore,
    StoreUnavailable,
    UnknownRunner,
    open_store,
    redacted_url,
)

__all__ = [
    "AgentNode",
    "AuditEntry",
    "BadRow",
    "CasResult",
    "DrainRecord",
    "InvalidRecord",
    "LaneWriteRefused",
    "Leak",
    "LeaseResult",
    "ReclaimMemory",
    "RecordScan",
    "RunnerExists",
    "RunnerStore",
    "StoreUnavailable",
    "UnknownHolding",
    "UnknownRunner",
    "WorkflowConflict",
    "open_engine",
    "open_reclaim_memory",
    "open_store",
    "redacted_url",
]
