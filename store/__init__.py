"""The runner store: runner records on SQLite (embedded default) or PostgreSQL."""

from store.runners.store import (
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
    "AuditEntry",
    "BadRow",
    "CasResult",
    "InvalidRecord",
    "LaneWriteRefused",
    "Leak",
    "LeaseResult",
    "RecordScan",
    "RunnerExists",
    "RunnerStore",
    "StoreUnavailable",
    "UnknownRunner",
    "open_store",
    "redacted_url",
]
