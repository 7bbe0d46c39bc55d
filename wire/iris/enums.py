"""The iris enums keeper reads and writes, with their upstream numbers.

Sources: `iris.job` (job.proto) for JobState and TaskState, `iris.logging`
(iris_logging.proto) for LogLevel, `iris.cluster.Controller` (controller.proto) for the
ListJobs query enums, `finelog.logging` for MatchScope.
"""

from __future__ import annotations

from collections.abc import Mapping

from keeper.wire.iris.codec import WireEnum


class JobState(WireEnum):
    UNSPECIFIED = 0
    PENDING = 1
    BUILDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    KILLED = 6
    WORKER_FAILED = 7
    UNSCHEDULABLE = 8

    @classmethod
    def wire_prefix(cls) -> str:
        return "JOB_STATE_"


class TaskState(WireEnum):
    UNSPECIFIED = 0
    PENDING = 1
    BUILDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    KILLED = 6
    WORKER_FAILED = 7
    UNSCHEDULABLE = 8
    ASSIGNED = 9
    PREEMPTED = 10
    # Newest only: a coscheduled sibling failed (terminal), and a reconcile sentinel.
    COSCHED_FAILED = 11
    MISSING = 12

    @classmethod
    def wire_prefix(cls) -> str:
        return "TASK_STATE_"


JOB_TERMINAL = frozenset(
    {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.KILLED,
        JobState.WORKER_FAILED,
        JobState.UNSCHEDULABLE,
    }
)
# PREEMPTED is terminal: a task preempted with budget left is PENDING again, not PREEMPTED.
TASK_TERMINAL = frozenset(
    {
        TaskState.SUCCEEDED,
        TaskState.FAILED,
        TaskState.KILLED,
        TaskState.WORKER_FAILED,
        TaskState.UNSCHEDULABLE,
        TaskState.PREEMPTED,
        TaskState.COSCHED_FAILED,
    }
)
# The runbook counts ASSIGNED as active alongside BUILDING and RUNNING.
TASK_ACTIVE = frozenset({TaskState.ASSIGNED, TaskState.BUILDING, TaskState.RUNNING})


class LogLevel(WireEnum):
    """LogEntry.level = 5: a string ("INFO") in older logging.proto, this enum in newer
    iris_logging.proto; both read as this enum."""

    UNKNOWN = 0
    DEBUG = 1
    INFO = 2
    WARNING = 3
    ERROR = 4
    CRITICAL = 5

    @classmethod
    def wire_prefix(cls) -> str:
        return "LOG_LEVEL_"

    @classmethod
    def aliases(cls) -> Mapping[str, str]:
        # Python's logging and glog spell some levels differently.
        return {"WARN": "WARNING", "FATAL": "CRITICAL", "ERR": "ERROR", "": "UNKNOWN"}


class JobQueryScope(WireEnum):
    UNSPECIFIED = 0
    ALL = 1
    ROOTS = 2
    CHILDREN = 3

    @classmethod
    def wire_prefix(cls) -> str:
        return "JOB_QUERY_SCOPE_"


class JobSortField(WireEnum):
    UNSPECIFIED = 0
    DATE = 1
    NAME = 2
    STATE = 3
    FAILURES = 4
    PREEMPTIONS = 5

    @classmethod
    def wire_prefix(cls) -> str:
        return "JOB_SORT_FIELD_"


class SortDirection(WireEnum):
    UNSPECIFIED = 0  # descending for date, ascending otherwise
    ASC = 1
    DESC = 2

    @classmethod
    def wire_prefix(cls) -> str:
        return "SORT_DIRECTION_"


class MatchScope(WireEnum):
    """FetchLogsRequest.match_scope = 8. UNSPECIFIED is treated as REGEX by the server."""

    UNSPECIFIED = 0
    EXACT = 1
    PREFIX = 2
    REGEX = 3

    @classmethod
    def wire_prefix(cls) -> str:
        return "MATCH_SCOPE_"


class CpuProfileFormat(WireEnum):
    """CpuProfile.Format, a nested enum: its names carry no prefix."""

    FORMAT_UNSPECIFIED = 0
    FLAMEGRAPH = 1
    SPEEDSCOPE = 2
    RAW = 3


class MemoryProfileFormat(WireEnum):
    FORMAT_UNSPECIFIED = 0
    FLAMEGRAPH = 1
    TABLE = 2
    STATS = 3
    RAW = 4
