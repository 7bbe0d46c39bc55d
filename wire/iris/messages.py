"""The iris controller messages keeper speaks, in their protobuf JSON mapping (wire/iris/codec.py).

Names and field numbers (`= n` in each field's description, `field_number` reads them) are
upstream's: marin-community/marin lib/iris/src/iris/rpc, job.proto (package iris.job),
controller.proto (package iris.cluster, messages nested in `Controller`), iris_logging.proto
(iris.logging), time.proto (iris.time), and the log server's FetchLogs (finelog.logging).
Only the fields keeper reads or writes are declared; the rest are ignored on input, except
in LaunchJobRequest and the messages inside it, which keep everything they received and
write it back (but LaunchJobRequest's reserved `reservation`). The request GetJobStatus
returns is iris's rebuild of what it stored, secrets `[REDACTED]` and workdir files gone: not
the request a job was launched with.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from keeper.wire.iris.codec import (
    B64Bytes,
    Int64,
    OpenWireMessage,
    WireMessage,
    number,
    wire_enum,
)
from keeper.wire.iris.enums import (
    CpuProfileFormat,
    JobQueryScope,
    JobSortField,
    JobState,
    LogLevel,
    MatchScope,
    MemoryProfileFormat,
    SortDirection,
    TaskState,
)

JobStateField = wire_enum(JobState)
TaskStateField = wire_enum(TaskState)
LogLevelField = wire_enum(LogLevel)
JobQueryScopeField = wire_enum(JobQueryScope)
JobSortFieldField = wire_enum(JobSortField)
SortDirectionField = wire_enum(SortDirection)
MatchScopeField = wire_enum(MatchScope)
CpuProfileFormatField = wire_enum(CpuProfileFormat)
MemoryProfileFormatField = wire_enum(MemoryProfileFormat)

# --- iris.time -------------------------------------------------------------------------------


class Timestamp(WireMessage):
    """iris.time.Timestamp: milliseconds since the Unix epoch."""

    epoch_ms: Int64 = number(1, 0)


class Duration(OpenWireMessage):
    """iris.time.Duration."""

    milliseconds: Int64 = number(1, 0)


# --- iris.job: shared types ------------------------------------------------------------------


class Empty(WireMessage):
    """iris.job.Empty."""


class ResourceUsage(WireMessage):
    """iris.job.ResourceUsage. Field 5 (cpu_percent) is reserved upstream. The newest
    controller leaves TaskStatus.resource_usage unset (only workers fill it)."""

    memory_mb: Int64 = number(1, 0)
    disk_mb: Int64 = number(2, 0)
    cpu_millicores: int = number(3, 0)
    memory_peak_mb: Int64 = number(4, 0)
    process_count: int = number(6, 0)


class ResourceSpecProto(OpenWireMessage):
    """iris.job.ResourceSpecProto. `device` is a DeviceConfig oneof (cpu/gpu/tpu), kept as
    received."""

    cpu_millicores: int = number(1, 0)
    memory_bytes: Int64 = number(4, 0)
    device: dict[str, Any] | None = number(5)
    disk_bytes: Int64 = number(9, 0)


class TaskAttempt(WireMessage):
    """iris.job.TaskAttempt."""

    attempt_id: int = number(1, 0)
    worker_id: str = number(2, "")
    state: TaskStateField = number(3, TaskState.UNSPECIFIED)
    exit_code: int = number(4, 0)
    error: str = number(5, "")
    started_at: Timestamp | None = number(6)
    finished_at: Timestamp | None = number(7)
    is_worker_failure: bool = number(8, False)
    attempt_uid: str = number(9, "")  # newest only


class TaskStatus(WireMessage):
    """iris.job.TaskStatus. Fields 2-3 are unused and 18, 20-23, 26, 28 reserved upstream."""

    task_id: str = number(1, "")
    state: TaskStateField = number(4, TaskState.UNSPECIFIED)
    worker_id: str = number(5, "")
    worker_address: str = number(6, "")
    exit_code: int = number(7, 0)
    error: str = number(8, "")
    started_at: Timestamp | None = number(9)
    finished_at: Timestamp | None = number(10)
    ports: dict[str, int] = number(11, factory=dict)
    resource_usage: ResourceUsage | None = number(12)
    current_attempt_id: int = number(14, 0)
    attempts: list[TaskAttempt] = number(15, factory=list)
    pending_reason: str = number(16, "")
    can_be_scheduled: bool = number(17, False)
    container_id: str = number(19, "")
    backend_id: str = number(24, "")  # newest only
    cluster: str = number(25, "")  # newest only
    submitted_at: Timestamp | None = number(27)  # newest only
    status_message: str = number(29, "")  # newest only


class JobStatus(WireMessage):
    """iris.job.JobStatus."""

    job_id: str = number(1, "")
    state: JobStateField = number(2, JobState.UNSPECIFIED)
    exit_code: int = number(3, 0)
    error: str = number(4, "")
    started_at: Timestamp | None = number(5)
    finished_at: Timestamp | None = number(6)
    ports: dict[str, int] = number(7, factory=dict)
    resource_usage: ResourceUsage | None = number(8)  # reserved in the newest
    status_message: str = number(9, "")
    failure_count: int = number(17, 0)
    preemption_count: int = number(18, 0)
    tasks: list[TaskStatus] = number(24, factory=list)
    name: str = number(25, "")
    submitted_at: Timestamp | None = number(26)
    resources: ResourceSpecProto | None = number(27)
    task_state_counts: dict[str, int] = number(28, factory=dict)
    task_count: int = number(29, 0)
    completed_count: int = number(30, 0)
    pending_reason: str = number(31, "")
    has_children: bool = number(32, False)
    parent_job_id: str = number(33, "")  # newest only
    backend_id: str = number(34, "")  # newest only
    cluster: str = number(35, "")  # newest only
    submitting_user: str = number(38, "")  # newest only


# --- iris.job: launching ---------------------------------------------------------------------


class CommandEntrypoint(OpenWireMessage):
    """iris.job.CommandEntrypoint."""

    argv: list[str] = number(1, factory=list)


class RuntimeEntrypoint(OpenWireMessage):
    """iris.job.RuntimeEntrypoint. The map<string, bytes> workdir_files stays base64 text."""

    setup_commands: list[str] = number(1, factory=list)
    run_command: CommandEntrypoint | None = number(2)
    workdir_files: dict[str, str] = number(3, factory=dict)
    workdir_file_refs: dict[str, str] = number(4, factory=dict)


class EnvironmentConfig(OpenWireMessage):
    """iris.job.EnvironmentConfig. Older versions' pip_packages=1, extras=3,
    python_version=4, dockerfile=5 (reserved now) are kept as received. GetJobStatus shows
    every `secrets` value, and each credential-looking `env_vars` value, as `[REDACTED]`
    (domain/watch/redaction.py)."""

    env_vars: dict[str, str] = number(2, factory=dict)
    setup_scripts: list[str] = number(6, factory=list)
    secrets: dict[str, str] = number(7, factory=dict)  # name -> value, delivered as files


class LaunchJobRequest(OpenWireMessage):
    """iris.cluster.Controller.LaunchJobRequest: every field received is kept and written
    back, declared or not (controller.proto gains fields often: client_revision_date = 36,
    container_profile = 37, federation = 38, egress_policy = 39 upstream).

    Field 30 (`reservation`) is reserved in the newest controller, which refuses a request
    that names it (its JSON parser rejects unknown fields): keeper never sends it, and drops
    it from a request it reads. The enum fields and the messages keeper never reads
    (constraints, coscheduling) are kept exactly as received, names or numbers alike.
    """

    name: str = number(1, "")
    entrypoint: RuntimeEntrypoint | None = number(2)
    resources: ResourceSpecProto | None = number(3)
    environment: EnvironmentConfig | None = number(4)
    bundle_id: str = number(5, "")
    bundle_blob: str = number(6, "")  # bytes: base64 text, kept as received
    scheduling_timeout: Duration | None = number(8)
    ports: list[str] = number(9, factory=list)
    max_task_failures: int = number(11, 0)
    max_retries_failure: int = number(12, 0)
    max_retries_preemption: int = number(13, 0)
    constraints: list[dict[str, Any]] = number(14, factory=list)
    coscheduling: dict[str, Any] | None = number(15)
    replicas: int = number(20, 0)
    timeout: Duration | None = number(21)
    fail_if_exists: bool = number(22, False)
    # 30: reserved (`reservation`, removed upstream)
    preemption_policy: str | int | None = number(31)
    existing_job_policy: str | int | None = number(32)
    priority_band: str | int | None = number(33)
    task_image: str = number(34, "")
    submit_argv: list[str] = number(35, factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_reservation(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in RESERVED_LAUNCH_FIELDS}
        return data

    @property
    def unknown_fields(self) -> dict[str, Any]:
        """The fields received that this model does not declare, as received."""
        return dict(self.model_extra or {})


# LaunchJobRequest's reserved field names (JSON and proto spellings): never kept, never sent.
RESERVED_LAUNCH_FIELDS = frozenset({"reservation"})


class LaunchJobResponse(WireMessage):
    job_id: str = number(1, "")


# --- iris.cluster.Controller: jobs and tasks -------------------------------------------------


class GetJobStatusRequest(WireMessage):
    job_id: str = number(1, "")  # 2 (include_result) and 3 (include_tasks) are reserved


class GetJobStatusResponse(WireMessage):
    job: JobStatus | None = number(1)
    request: LaunchJobRequest | None = number(2)  # the original request
    resource_min: ResourceUsage | None = number(3)  # reserved in the newest
    resource_max: ResourceUsage | None = number(4)  # reserved in the newest


class GetJobStateRequest(WireMessage):
    job_ids: list[str] = number(1, factory=list)


class GetJobStateResponse(WireMessage):
    states: dict[str, JobStateField] = number(1, factory=dict)


class TerminateJobRequest(WireMessage):
    job_id: str = number(1, "")


# ListJobs' paging bounds in the newest controller (marin-iris 0.2.227.dev40316220070): a
# limit of 0, below 0 or above 500 reads as 500; an offset below 0 as 0; an offset above 5000
# is refused (INVALID_ARGUMENT), so one query reaches its first 5,500 jobs at most.
LIST_JOBS_MAX_LIMIT = 500
LIST_JOBS_MAX_OFFSET = 5000
# The states `state_filter` takes (lowercase; case does not matter); any other matches nothing.
LIST_JOBS_STATE_FILTERS = (
    "pending", "building", "running", "succeeded", "failed", "killed", "worker_failed",
    "unschedulable",
)  # fmt: skip


def list_jobs_offset_refusal(offset: int) -> str:
    """The controller's message refusing an offset above LIST_JOBS_MAX_OFFSET."""
    return (
        f"query.offset={offset} exceeds MAX_LIST_JOBS_OFFSET={LIST_JOBS_MAX_OFFSET}; narrow "
        "the result set with state_filter/name_filter/parent_job_id instead of paging deeper."
    )


class JobQuery(WireMessage):
    """iris.cluster.Controller.JobQuery. limit 0 reads as 500, the most a page holds; an offset
    above 5000 is refused. name_filter is a case-insensitive SQL LIKE `%<filter>%` over the
    job's lowercased full name (`_` and `%` are wildcards); job_id_prefix a case-insensitive
    literal prefix; sort DATE descends by default, the other fields ascend."""

    scope: JobQueryScopeField = number(1, JobQueryScope.UNSPECIFIED)
    parent_job_id: str = number(2, "")  # required for scope CHILDREN
    name_filter: str = number(3, "")  # LIKE %filter%, over the lowercased full name
    state_filter: str = number(4, "")  # a state name, "running" (LIST_JOBS_STATE_FILTERS)
    sort_field: JobSortFieldField = number(5, JobSortField.UNSPECIFIED)
    sort_direction: SortDirectionField = number(6, SortDirection.UNSPECIFIED)
    offset: int = number(7, 0)
    limit: int = number(8, 0)
    job_id_prefix: str = number(9, "")  # newest only; anchored prefix of job_id


class ListJobsRequest(WireMessage):
    query: JobQuery | None = number(9)  # fields 1-7 are reserved


class ListJobsResponse(WireMessage):
    jobs: list[JobStatus] = number(1, factory=list)
    total_count: int = number(2, 0)
    has_more: bool = number(3, False)


class GetTaskStatusRequest(WireMessage):
    task_id: str = number(1, "")


class GetTaskStatusResponse(WireMessage):
    task: TaskStatus | None = number(1)
    job_resources: ResourceSpecProto | None = number(2)


class ListTasksRequest(WireMessage):
    job_id: str = number(1, "")


class ListTasksResponse(WireMessage):
    tasks: list[TaskStatus] = number(1, factory=list)


# --- logs ------------------------------------------------------------------------------------


class LogEntry(WireMessage):
    """iris.logging.LogEntry (wire-compatible with finelog.logging.LogEntry)."""

    timestamp: Timestamp | None = number(1)
    source: str = number(2, "")  # "stdout", "stderr", "build"; newer adds "error"
    data: str = number(3, "")
    attempt_id: int = number(4, 0)
    level: LogLevelField = number(5, LogLevel.UNKNOWN)
    key: str = number(6, "")  # newer: the log-store key, "/user/job/0:3"
    seq: Int64 = number(7, 0)


class GetTaskLogsRequest(WireMessage):
    """Controller.GetTaskLogsRequest: deprecated, absent from the newest controller.

    attempt_id: -1 is all attempts and 0 the first attempt, which is also the proto default,
    so a caller always sets it.
    """

    id: str = number(1, "")  # a job id, or a task id (trailing numeric component)
    include_children: bool = number(2, False)
    since_ms: Int64 = number(3, 0)  # exclusive
    max_total_lines: Int64 = number(4, 0)  # 0 = 10000
    substring: str = number(5, "")
    attempt_id: int = number(6, 0)
    min_level: str = number(7, "")  # DEBUG ... CRITICAL
    cursor: Int64 = number(8, 0)
    tail: bool = number(9, False)


class TaskLogBatch(WireMessage):
    task_id: str = number(1, "")
    logs: list[LogEntry] = number(2, factory=list)
    error: str = number(3, "")
    worker_id: str = number(4, "")


class GetTaskLogsResponse(WireMessage):
    task_logs: list[TaskLogBatch] = number(1, factory=list)
    truncated: bool = number(2, False)
    child_job_statuses: list[JobStatus] = number(3, factory=list)
    cursor: Int64 = number(4, 0)  # the highest id seen; pass it back


class FetchLogsRequest(WireMessage):
    """LogService.FetchLogsRequest (iris.logging / finelog.logging)."""

    source: str = number(1, "")  # a key, a prefix or a regex, per match_scope
    since_ms: Int64 = number(2, 0)
    cursor: Int64 = number(3, 0)
    substring: str = number(4, "")
    max_lines: int = number(5, 0)  # 0 = 1000
    tail: bool = number(6, False)
    min_level: str = number(7, "")
    match_scope: MatchScopeField = number(8, MatchScope.UNSPECIFIED)
    cluster: str = number(9, "")


class FetchLogsResponse(WireMessage):
    entries: list[LogEntry] = number(1, factory=list)
    cursor: Int64 = number(2, 0)


# --- profiling and exec ----------------------------------------------------------------------


class CpuProfile(WireMessage):
    format: CpuProfileFormatField = number(1, CpuProfileFormat.FORMAT_UNSPECIFIED)
    rate_hz: int = number(2, 0)  # 0 = 20
    native: bool = number(3, False)  # unset = true


class MemoryProfile(WireMessage):
    format: MemoryProfileFormatField = number(1, MemoryProfileFormat.FORMAT_UNSPECIFIED)
    leaks: bool = number(2, False)


class ThreadsProfile(WireMessage):
    locals: bool = number(1, False)  # include local variables


class ProfileType(WireMessage):
    """iris.job.ProfileType: `oneof profiler`, so at most one of the three is set."""

    cpu: CpuProfile | None = number(1)
    memory: MemoryProfile | None = number(2)
    threads: ThreadsProfile | None = number(3)

    @model_validator(mode="after")
    def _one_of(self) -> ProfileType:
        chosen = [name for name in ("cpu", "memory", "threads") if getattr(self, name)]
        if len(chosen) > 1:
            raise ValueError(f"profile_type is a oneof; got {', '.join(chosen)}")
        return self


class ProfileTaskRequest(WireMessage):
    """iris.job.ProfileTaskRequest. target: a task id (current attempt), `<task>:<attempt>`
    or `/system/process`. Field 1 (task_id) is reserved."""

    duration_seconds: int = number(2, 0)  # 0 = 10
    profile_type: ProfileType | None = number(3)
    target: str = number(4, "")


class ProfileTaskResponse(WireMessage):
    profile_data: B64Bytes = number(1, b"")  # SVG, JSON, HTML or text
    error: str = number(2, "")  # set when profiling failed

    @property
    def text(self) -> str:
        """profile_data as text (a thread dump is plain text)."""
        return self.profile_data.decode("utf-8", errors="replace")


class ExecInContainerRequest(WireMessage):
    """Controller.ExecInContainerRequest (proxied to the task's worker)."""

    task_id: str = number(1, "")
    command: list[str] = number(2, factory=list)
    timeout_seconds: int = number(3, 0)  # 0 = 60


class ExecInContainerResponse(WireMessage):
    exit_code: int = number(1, 0)
    stdout: str = number(2, "")
    stderr: str = number(3, "")
    error: str = number(4, "")  # set when the exec could not be set up
