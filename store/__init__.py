"""The runner store: runner records on SQLite (embedded default) or PostgreSQL."""

from store.runner_store import (
    AuditEntry,
    CasResult,
    LaneWriteRefused,
    Leak,
    RunnerExists,
    RunnerStore,
    UnknownRunner,
    open_store,
)

__all__ = [
    "AuditEntry",
    "CasResult",
    "LaneWriteRefused",
    "Leak",
    "RunnerExists",
    "RunnerStore",
    "UnknownRunner",
    "open_store",
]
