"""The iris wire models read and write protobuf JSON as the controller does: camelCase names,
enum names, int64 strings, explicit presence, tolerated drift, and a LaunchJobRequest that
comes back out exactly as it went in; plus the ExecInContainer output parsers."""

from __future__ import annotations

import base64
import inspect
import subprocess
from typing import Any

import pytest
from pydantic import ValidationError

from keeper.wire.iris import connect, enums, messages
from keeper.wire.iris.codec import WireEnum, WireMessage, field_number, from_wire, to_wire
from keeper.wire.iris.connect import Code, ConnectErrorBody, ErrorDetail, ErrorDetails
from keeper.wire.iris.enums import JobState, LogLevel, TaskState
from keeper.wire.iris.exec_commands import (
    CLK_TCK,
    COORDINATOR_CPU_COMMAND,
    PROC_STAT_COMMAND,
    SESSION_CPU_COMMAND,
    parse_proc_stat,
    parse_session_cpu,
    proc_stat_answer,
    split_coordinator_cpu,
)
from keeper.wire.iris.messages import (
    ExecInContainerRequest,
    ExecInContainerResponse,
    GetJobStatusResponse,
    GetTaskLogsRequest,
    GetTaskLogsResponse,
    JobQuery,
    JobStatus,
    LaunchJobRequest,
    ListJobsRequest,
    LogEntry,
    ProfileTaskRequest,
    ProfileTaskResponse,
    TaskStatus,
    Timestamp,
)
from keeper.wire.iris.methods import BY_PATH, METHODS

MESSAGE_CLASSES = [
    cls
    for _, cls in inspect.getmembers(messages, inspect.isclass)
    if issubclass(cls, WireMessage) and cls.__module__ == messages.__name__
]


# --- names -----------------------------------------------------------------------------------


def test_output_names_are_lower_camel_case() -> None:
    status = TaskStatus(task_id="/alice/job/0", current_attempt_id=2, worker_address="w:1")
    assert to_wire(status) == {
        "taskId": "/alice/job/0",
        "currentAttemptId": 2,
        "workerAddress": "w:1",
    }


def test_snake_case_and_camel_case_input_parse_alike() -> None:
    camel = from_wire(TaskStatus, {"taskId": "/a/j/0", "currentAttemptId": 1})
    snake = from_wire(TaskStatus, {"task_id": "/a/j/0", "current_attempt_id": 1})
    assert camel == snake
    assert camel.current_attempt_id == 1


def test_list_jobs_request_nests_the_query_under_query() -> None:
    request = ListJobsRequest(query=JobQuery(parent_job_id="/a/j", offset=50, limit=500))
    assert to_wire(request) == {"query": {"parentJobId": "/a/j", "offset": 50, "limit": 500}}


# --- enums -----------------------------------------------------------------------------------


def test_enums_are_written_by_prefixed_name() -> None:
    job = JobStatus(job_id="/a/j", state=JobState.RUNNING)
    task = TaskStatus(task_id="/a/j/0", state=TaskState.WORKER_FAILED)
    assert to_wire(job)["state"] == "JOB_STATE_RUNNING"
    assert to_wire(task)["state"] == "TASK_STATE_WORKER_FAILED"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("TASK_STATE_RUNNING", TaskState.RUNNING),
        (3, TaskState.RUNNING),
        ("3", TaskState.RUNNING),
        ("running", TaskState.RUNNING),
        ("TASK_STATE_ASSIGNED", TaskState.ASSIGNED),
        ("TASK_STATE_FROM_THE_FUTURE", TaskState.UNSPECIFIED),
        (99, TaskState.UNSPECIFIED),
    ],
)
def test_task_state_input_accepts_names_and_numbers(value: object, expected: TaskState) -> None:
    assert from_wire(TaskStatus, {"state": value}).state is expected


def test_job_state_numbers_match_upstream() -> None:
    assert [(s.name, s.value) for s in JobState] == [
        ("UNSPECIFIED", 0),
        ("PENDING", 1),
        ("BUILDING", 2),
        ("RUNNING", 3),
        ("SUCCEEDED", 4),
        ("FAILED", 5),
        ("KILLED", 6),
        ("WORKER_FAILED", 7),
        ("UNSCHEDULABLE", 8),
    ]
    assert TaskState.PREEMPTED == 10 and TaskState.COSCHED_FAILED == 11


# --- int64 -----------------------------------------------------------------------------------


def test_int64_fields_are_written_as_strings() -> None:
    assert to_wire(Timestamp(epoch_ms=1764590400000)) == {"epochMs": "1764590400000"}
    assert to_wire(GetTaskLogsResponse(cursor=42)) == {"cursor": "42"}
    assert to_wire(LogEntry(seq=7))["seq"] == "7"


def test_int64_fields_accept_strings_and_numbers() -> None:
    assert from_wire(Timestamp, {"epochMs": "1764590400000"}).epoch_ms == 1764590400000
    assert from_wire(Timestamp, {"epochMs": 1764590400000}).epoch_ms == 1764590400000


def test_int32_fields_stay_numbers() -> None:
    assert to_wire(ExecInContainerResponse(exit_code=3)) == {"exitCode": 3}


# --- presence, defaults, unknown fields -------------------------------------------------------


def test_absent_fields_read_as_defaults() -> None:
    status = from_wire(TaskStatus, {})
    assert status.state is TaskState.UNSPECIFIED
    assert status.current_attempt_id == 0
    assert status.attempts == []
    assert status.started_at is None
    assert from_wire(JobStatus, None) == JobStatus()


def test_null_reads_as_unset() -> None:
    status = from_wire(TaskStatus, {"exitCode": None, "startedAt": None, "taskId": "/a/j/0"})
    assert status.exit_code == 0 and status.started_at is None
    assert to_wire(status) == {"taskId": "/a/j/0"}


def test_a_field_set_to_its_default_is_still_written() -> None:
    # attempt_id 0 means "the first attempt" and is also the proto default: presence matters.
    assert to_wire(GetTaskLogsRequest(id="/a/j", attempt_id=0)) == {"id": "/a/j", "attemptId": 0}
    assert to_wire(GetTaskLogsRequest(id="/a/j")) == {"id": "/a/j"}


def test_include_defaults_writes_every_field() -> None:
    written = to_wire(ExecInContainerResponse(stdout="x"), include_defaults=True)
    assert written == {"exitCode": 0, "stdout": "x", "stderr": "", "error": ""}


def test_unknown_fields_are_ignored_by_ordinary_messages() -> None:
    status = from_wire(TaskStatus, {"taskId": "/a/j/0", "someNewField": {"x": 1}})
    assert to_wire(status) == {"taskId": "/a/j/0"}


# --- log level drift -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("INFO", LogLevel.INFO),
        ("info", LogLevel.INFO),
        ("LOG_LEVEL_INFO", LogLevel.INFO),
        (2, LogLevel.INFO),
        ("WARNING", LogLevel.WARNING),
        ("WARN", LogLevel.WARNING),
        ("ERROR", LogLevel.ERROR),
        ("CRITICAL", LogLevel.CRITICAL),
        (5, LogLevel.CRITICAL),
        ("", LogLevel.UNKNOWN),
        ("NOISY", LogLevel.UNKNOWN),
    ],
)
def test_log_level_string_or_enum_reads_as_one_enum(level: object, expected: LogLevel) -> None:
    assert from_wire(LogEntry, {"data": "x", "level": level}).level is expected


def _wire_enums() -> list[type[WireEnum]]:
    return [
        member
        for _, member in inspect.getmembers(enums, inspect.isclass)
        if issubclass(member, WireEnum) and member is not WireEnum and len(member) > 0
    ]


@pytest.mark.parametrize("enum", _wire_enums(), ids=lambda e: e.__name__)
def test_every_spelling_of_every_wire_enum_reads_as_its_member(enum: type[WireEnum]) -> None:
    """The looked-up spellings and the spelled-out rules agree, member by member."""
    for member in enum:
        for spelling in (
            member.wire_name,
            member.name,
            member.wire_name.lower(),
            f" {member.name.lower()} ",
            int(member),
            str(int(member)),
            member,
        ):
            assert enum.parse(spelling) is member, (enum, spelling)
    for alias, name in enum.aliases().items():
        assert enum.parse(alias) is enum[name]
    assert enum.parse("NO_SUCH_STATE") is enum(0)
    assert enum.parse(10_000) is enum(0)
    with pytest.raises(ValueError):
        enum.parse(True)
    with pytest.raises(ValueError):
        enum.parse(1.0)


class _Tangled(WireEnum):
    """Aliases that shadow a member's name and a prefixed spelling: the table must read every
    spelling as the spelled-out rules do."""

    UNSPECIFIED = 0
    WARN = 1
    WARNING = 2

    @classmethod
    def wire_prefix(cls) -> str:
        return "LEVEL_"

    @classmethod
    def aliases(cls) -> dict[str, str]:
        return {"WARN": "WARNING", "Err": "WARNING", "LEVEL_WARNING": "WARN"}


def test_the_spelling_table_reads_as_the_rules_even_where_aliases_shadow_names() -> None:
    spellings: list[object] = ["WARN", "LEVEL_WARN", "warn", "Err", "ERR", "LEVEL_WARNING"]
    spellings += ["WARNING", "LEVEL_LEVEL_WARNING", 0, 1, 2, 3, "1", " 2 ", "", "NOPE"]
    for spelling in spellings:
        assert _Tangled.parse(spelling) is _Tangled._parse_spelled(spelling), spelling
    assert _Tangled.parse("LEVEL_WARN") is _Tangled.WARNING  # the alias wins, as it always did


def test_nulls_read_as_unset_at_every_depth() -> None:
    status = from_wire(
        JobStatus,
        {"jobId": "/a/b", "error": None, "submittedAt": None, "state": "JOB_STATE_RUNNING"},
    )
    assert (status.error, status.submitted_at, status.state) == ("", None, JobState.RUNNING)
    tasks = from_wire(
        messages.ListTasksResponse,
        {"tasks": [{"taskId": "/a/b/0", "workerId": None, "attempts": [{"state": None}]}]},
    )
    assert tasks.tasks[0].worker_id == "" and tasks.tasks[0].attempts[0].state is TaskState(0)


def test_log_level_absent_is_unknown_and_written_by_enum_name() -> None:
    assert from_wire(LogEntry, {"data": "x"}).level is LogLevel.UNKNOWN
    assert to_wire(LogEntry(level=LogLevel.ERROR))["level"] == "LOG_LEVEL_ERROR"


# --- LaunchJobRequest ------------------------------------------------------------------------

ORIGINAL_REQUEST: dict[str, Any] = {
    "name": "/alice/tokenize-fineweb",
    "entrypoint": {
        "setupCommands": ["uv sync"],
        "runCommand": {"argv": ["python", "-m", "tokenize"]},
        "workdirFiles": {"conf.yaml": "a2V5OiB2YWx1ZQ=="},
        "futureEntrypointField": True,
    },
    "resources": {"cpuMillicores": 4000, "memoryBytes": "17179869184", "device": {"cpu": {}}},
    "environment": {"envVars": {"HF_HOME": "/cache"}, "pipPackages": ["numpy"]},
    "replicas": 1,
    "maxRetriesPreemption": 0,
    "failIfExists": False,
    "priorityBand": "PRIORITY_BAND_BATCH",
    "existingJobPolicy": 3,
    "constraints": [{"key": "pool", "op": "CONSTRAINT_OP_EQ", "value": {"stringValue": "a"}}],
    "containerProfile": "CONTAINER_PROFILE_DEFAULT",
    "healthCheck": {"period": {"milliseconds": "5000"}, "failureThreshold": 3},
}


def test_launch_job_request_round_trip_keeps_every_field() -> None:
    request = from_wire(LaunchJobRequest, ORIGINAL_REQUEST)
    assert to_wire(request) == ORIGINAL_REQUEST


def test_launch_job_request_exposes_core_fields_and_unknown_ones() -> None:
    request = from_wire(LaunchJobRequest, ORIGINAL_REQUEST)
    assert request.name == "/alice/tokenize-fineweb"
    assert request.entrypoint is not None and request.entrypoint.run_command is not None
    assert request.entrypoint.run_command.argv == ["python", "-m", "tokenize"]
    assert request.resources is not None and request.resources.memory_bytes == 17179869184
    assert request.environment is not None and request.environment.env_vars["HF_HOME"] == "/cache"
    assert set(request.unknown_fields) == {"containerProfile", "healthCheck"}


def test_original_request_inside_get_job_status_survives() -> None:
    body = {"job": {"jobId": "/alice/tokenize-fineweb"}, "request": ORIGINAL_REQUEST}
    response = from_wire(GetJobStatusResponse, body)
    assert response.request is not None
    assert to_wire(response.request) == ORIGINAL_REQUEST


def test_the_reserved_reservation_field_is_never_kept_nor_sent() -> None:
    # The newest controller refuses a LaunchJob naming it (field 30 is reserved there).
    read = from_wire(LaunchJobRequest, {"name": "/alice/a", "reservation": {"entries": []}})
    assert to_wire(read) == {"name": "/alice/a"}
    assert "reservation" not in read.unknown_fields
    built = LaunchJobRequest.model_validate({"name": "/alice/a", "reservation": {}})
    assert to_wire(built) == {"name": "/alice/a"}
    assert "reservation" not in LaunchJobRequest.model_fields
    numbers = {field_number(LaunchJobRequest, name) for name in LaunchJobRequest.model_fields}
    assert 30 not in numbers


def test_environment_secrets_are_field_seven_and_round_trip() -> None:
    body = {"environment": {"envVars": {"A": "1"}, "secrets": {"DB_PASSWORD": "[REDACTED]"}}}
    request = from_wire(LaunchJobRequest, body)
    assert request.environment is not None
    assert request.environment.secrets == {"DB_PASSWORD": "[REDACTED]"}
    assert field_number(type(request.environment), "secrets") == 7
    assert to_wire(request) == body


def test_launch_job_request_number_input_is_written_as_int64_string() -> None:
    # Same value, canonical form: a server's JSON parser reads both.
    request = from_wire(LaunchJobRequest, {"resources": {"memoryBytes": 1024}})
    assert to_wire(request) == {"resources": {"memoryBytes": "1024"}}


# --- field numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", MESSAGE_CLASSES, ids=lambda cls: cls.__name__)
def test_every_field_has_a_unique_number(cls: type[WireMessage]) -> None:
    numbers = [field_number(cls, name) for name in cls.model_fields]
    assert len(numbers) == len(set(numbers))


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (ExecInContainerRequest, {"task_id": 1, "command": 2, "timeout_seconds": 3}),
        (ExecInContainerResponse, {"exit_code": 1, "stdout": 2, "stderr": 3, "error": 4}),
        (ProfileTaskRequest, {"target": 4, "duration_seconds": 2, "profile_type": 3}),
        (ListJobsRequest, {"query": 9}),
        (
            LaunchJobRequest,
            {"name": 1, "entrypoint": 2, "resources": 3, "environment": 4, "replicas": 20},
        ),
        (
            GetTaskLogsRequest,
            {"id": 1, "since_ms": 3, "attempt_id": 6, "cursor": 8, "tail": 9},
        ),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_field_numbers_match_upstream(cls: type[WireMessage], expected: dict[str, int]) -> None:
    assert {name: field_number(cls, name) for name in expected} == expected


# --- profiles --------------------------------------------------------------------------------


def test_profile_data_is_base64_and_decodes_to_text() -> None:
    dump = 'Thread 0x7F00000001 (idle): "MainThread"\n'
    written = to_wire(ProfileTaskResponse(profile_data=dump.encode()))
    assert written == {"profileData": base64.b64encode(dump.encode()).decode()}
    assert from_wire(ProfileTaskResponse, written).text == dump


def test_profile_data_accepts_url_safe_unpadded_base64() -> None:
    data = b"\xfb\xff"
    text = base64.urlsafe_b64encode(data).decode().rstrip("=")
    assert from_wire(ProfileTaskResponse, {"profileData": text}).profile_data == data


def test_a_threads_profile_request_is_written_with_an_empty_threads_message() -> None:
    request = ProfileTaskRequest(
        target="/a/j/0",
        duration_seconds=1,
        profile_type=messages.ProfileType(threads=messages.ThreadsProfile()),
    )
    assert to_wire(request) == {
        "target": "/a/j/0",
        "durationSeconds": 1,
        "profileType": {"threads": {}},
    }


def test_profile_type_is_a_oneof() -> None:
    with pytest.raises(ValidationError):
        from_wire(messages.ProfileType, {"cpu": {}, "threads": {}})


# --- Connect errors and paths ----------------------------------------------------------------


def test_error_details_round_trip_through_the_binary_encoding() -> None:
    details = ErrorDetails(
        exception_type="KeyError", message="no job", traceback="Traceback...", timestamp_ms=17
    )
    assert ErrorDetails.decode(details.encode()) == details


def test_error_body_reads_iris_error_details() -> None:
    details = ErrorDetails(exception_type="ValueError", message="bad")
    body = ConnectErrorBody.of(Code.INTERNAL, "boom", details).to_json()
    assert body["code"] == "internal"
    assert body["details"][0]["type"] == "iris.rpc.ErrorDetails"
    parsed = ConnectErrorBody.model_validate(body)
    assert parsed.connect_code is Code.INTERNAL
    assert parsed.error_details() == details


def test_error_body_ignores_other_details_and_unknown_codes() -> None:
    body = {"code": "brand_new", "details": [{"type": "google.rpc.RetryInfo", "value": "AA"}]}
    parsed = ConnectErrorBody.model_validate(body)
    assert parsed.connect_code is Code.UNKNOWN
    assert parsed.error_details() is None


def test_error_detail_with_garbage_value_reads_as_none() -> None:
    assert ErrorDetail(type="iris.rpc.ErrorDetails", value="!!!").error_details() is None


@pytest.mark.parametrize(
    ("status", "code"),
    [(404, Code.UNIMPLEMENTED), (503, Code.UNAVAILABLE), (401, Code.UNAUTHENTICATED)],
)
def test_http_status_without_a_connect_body_maps_to_a_code(status: int, code: Code) -> None:
    assert connect.code_of_http_status(status) is code


def test_method_paths_are_the_connect_routes() -> None:
    assert connect.LIST_JOBS == "/iris.cluster.ControllerService/ListJobs"
    assert connect.FETCH_LOGS == "/iris.logging.LogService/FetchLogs"
    assert connect.FINELOG_FETCH_LOGS == "/finelog.logging.LogService/FetchLogs"
    assert len(BY_PATH) == len(METHODS)


# --- exec commands ---------------------------------------------------------------------------


def _stat_line(pid: int, comm: str, utime: int, stime: int, starttime: int, ppid: int = 1) -> str:
    fields = ["S", str(ppid), str(pid), str(pid), "0", "-1", "4194560", "10", "0", "0", "0"]
    fields += [str(utime), str(stime), "0", "0", "20", "0", "4", "0", str(starttime)]
    fields += ["123456", "789"]
    return f"{pid} ({comm}) " + " ".join(fields)


STAT_LINE = _stat_line(7, "python", 250, 50, 1200) + "\n"


def test_commands_are_the_contract() -> None:
    assert PROC_STAT_COMMAND == [
        "sh",
        "-c",
        'echo "keeper-exec-pid $$"; cat /proc/[0-9]*/stat 2>/dev/null',
    ]
    assert SESSION_CPU_COMMAND[:2] == ["sh", "-c"]
    assert CLK_TCK == 100


def test_the_execs_own_shell_is_dropped() -> None:
    out = "\n".join(
        [
            "keeper-exec-pid 310",
            _stat_line(1, "tini", 0, 0, 100, ppid=0),
            _stat_line(7, "python", 1500, 250, 900),
            # A shell of the task's own: kept, it is not the exec's.
            _stat_line(44, "sh", 3, 1, 950, ppid=7),
            _stat_line(310, "sh", 0, 0, 5000, ppid=0),
        ]
    )
    assert [s.pid for s in parse_proc_stat(out)] == [1, 7, 44]
    # Output without the shell's line (an older command's) is read whole.
    assert [s.pid for s in parse_proc_stat(out.split("\n", 1)[1])] == [1, 7, 44, 310]


@pytest.mark.parametrize(
    ("stdout", "exit_code", "answered"),
    [
        ("keeper-exec-pid 9\n" + STAT_LINE, 0, True),
        # cat exits 1 when a process vanished mid-read: what it printed still counts.
        ("keeper-exec-pid 9\n" + STAT_LINE, 1, True),
        # /proc unreadable: the shell's line alone is no answer.
        ("keeper-exec-pid 9\n", 1, False),
        ("", 1, False),
        # An empty /proc that cat read without complaint is an answer.
        ("keeper-exec-pid 9\n", 0, True),
    ],
)
def test_a_stat_exec_answered_unless_cat_failed_and_printed_nothing(
    stdout: str, exit_code: int, answered: bool
) -> None:
    assert (proc_stat_answer(stdout, exit_code) is not None) is answered


def test_a_real_shell_lists_itself_and_not_its_cat_and_the_parser_drops_it() -> None:
    # This machine's own sh and /proc: the shell expands the glob before `cat` exists (or
    # execs `cat` in its own place), so its own pid is the one line of the exec's.
    ran = subprocess.run(PROC_STAT_COMMAND, capture_output=True, text=True, check=False, timeout=30)
    assert ran.returncode in (0, 1) and ran.stdout.startswith("keeper-exec-pid "), ran
    marker, stats = ran.stdout.split("\n", 1)
    shell = int(marker.split()[1])
    everything = parse_proc_stat(stats)
    assert [s.pid for s in everything].count(shell) == 1
    # No process is the shell's child: `cat` was not there when the glob was read.
    ppids = [line.rsplit(")", 1)[1].split()[1] for line in stats.splitlines() if ")" in line]
    assert str(shell) not in ppids
    kept = parse_proc_stat(ran.stdout)
    assert shell not in [s.pid for s in kept]
    assert len(kept) == len(everything) - 1


def test_parse_proc_stat_reads_ticks_and_starttime() -> None:
    out = _stat_line(1, "python", 1500, 250, 900) + "\n" + _stat_line(42, "sh", 1, 2, 3) + "\n"
    stats = parse_proc_stat(out)
    assert [(s.pid, s.comm, s.utime, s.stime, s.starttime) for s in stats] == [
        (1, "python", 1500, 250, 900),
        (42, "sh", 1, 2, 3),
    ]
    assert stats[0].cpu_seconds == 17.5


def test_parse_proc_stat_splits_at_the_last_parenthesis() -> None:
    [stat] = parse_proc_stat(_stat_line(7, "weird) (name", 10, 20, 30))
    assert stat.comm == "weird) (name"
    assert (stat.utime, stat.stime, stat.starttime) == (10, 20, 30)


def test_parse_proc_stat_skips_partial_and_garbage_lines() -> None:
    whole = _stat_line(9, "zephyr worker", 5, 6, 7)
    out = "\n".join(["", "12 (gone) S 1 2", "not a stat line", whole[: len(whole) // 2], whole])
    assert [s.pid for s in parse_proc_stat(out)] == [9]


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        ("83824.5\n", 83824.5),
        ("0\n", 0.0),
        ("9351", 9351.0),
        ("", None),
        ("awk: not found\n", None),
        ("nan\n", None),
        ("-1\n", None),
    ],
)
def test_the_session_cpu_reads_a_non_negative_number_and_anything_else_as_unknown(
    stdout: str, expected: float | None
) -> None:
    assert parse_session_cpu(stdout) == expected


@pytest.mark.parametrize(
    ("stdout", "stat", "session"),
    [
        # Both parts, as the two commands of its own would have printed them.
        (f"{STAT_LINE}keeper-stat-exit 0\n9351\n", STAT_LINE, "9351\n"),
        # cat exits 1 when a process vanished mid-read: what it printed still counts.
        (f"{STAT_LINE}keeper-stat-exit 1\n12\n", STAT_LINE, "12\n"),
        # cat failed and printed nothing: that part did not answer; the session still did.
        ("keeper-stat-exit 1\n12\n", None, "12\n"),
        ("keeper-exec-pid 40\nkeeper-stat-exit 1\n12\n", None, "12\n"),
        # The shell's pid line travels with the stat part, for the parser to drop its own.
        (
            f"keeper-exec-pid 40\n{STAT_LINE}keeper-stat-exit 0\n7\n",
            f"keeper-exec-pid 40\n{STAT_LINE}",
            "7\n",
        ),
        # Nothing to read at all (an empty /proc) is an answer, not a failure.
        ("keeper-stat-exit 0\n0\n", "", "0\n"),
        # The session part missing (ps or awk absent): only the stat part answers.
        (f"{STAT_LINE}keeper-stat-exit 0\n", STAT_LINE, ""),
        # No exit line: the shell did not get that far, and neither part is known.
        (STAT_LINE, None, None),
        ("", None, None),
    ],
)
def test_the_coordinators_one_exec_splits_into_what_its_two_commands_print(
    stdout: str, stat: str | None, session: str | None
) -> None:
    assert split_coordinator_cpu(stdout) == (stat, session)
    if stat is not None:
        assert parse_proc_stat(stat) == parse_proc_stat(STAT_LINE if stat else "")
    assert COORDINATOR_CPU_COMMAND[:2] == ["sh", "-c"]
    script = COORDINATOR_CPU_COMMAND[2]
    assert PROC_STAT_COMMAND[2] in script and SESSION_CPU_COMMAND[2] in script
