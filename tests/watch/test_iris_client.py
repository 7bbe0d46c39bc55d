"""IrisController against a real HTTP server: a small aiohttp fake of the iris endpoints each
test needs, answering hand-written protobuf JSON. Covers the wire shape (camelCase, enum
names, int64 strings, headers), paging, the fallbacks it remembers, the error mapping, the
bearer token, and a relaunch that sends the original request unchanged."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from keeper.runtime.watch.credentials import IrisToken, IrisTokenError
from keeper.runtime.watch.iris_client import (
    ChildrenQuery,
    IrisController,
    LogRoute,
    fetch_logs_source,
)
from keeper.runtime.watch.iris_errors import (
    IrisAlreadyExists,
    IrisAuthError,
    IrisError,
    IrisInternal,
    IrisInvalidArgument,
    IrisNotFound,
    IrisProtocolError,
    IrisRemoteFailure,
    IrisTimedOut,
    IrisUnavailable,
    IrisUnimplemented,
    JobNotFound,
    non_retryable_types,
)
from keeper.wire.iris import connect
from keeper.wire.iris.connect import HTTP_STATUS, Code, ConnectErrorBody, ErrorDetails
from keeper.wire.iris.enums import JobState, LogLevel, MatchScope, TaskState
from keeper.wire.iris.messages import LIST_JOBS_STATE_FILTERS
from tests.harness import served

TOKEN = "iris-jwt-eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.s1gn4ture"
JOB = "/alice/tokenize-fineweb"

Body = dict[str, Any]
Handler = Callable[[Body], Awaitable[Body | web.StreamResponse]]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Body


@dataclass
class FakeIris:
    """Routes by path; a path with no handler answers 404 with a plain-text body, as a
    server without the method does."""

    url: str = ""
    handlers: dict[str, Handler] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def on(self, path: str, handler: Handler) -> None:
        self.handlers[path] = handler

    def calls(self, path: str) -> list[Seen]:
        return [seen for seen in self.seen if seen.path == path]

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read() or b"{}")
        self.seen.append(Seen(request.path, dict(request.headers), body))
        handler = self.handlers.get(request.path)
        if handler is None:
            return web.Response(status=404, text="404: Not Found")
        answer = await handler(body)
        if isinstance(answer, web.StreamResponse):
            return answer
        return web.json_response(answer)


def connect_error(code: Code, message: str = "", details: ErrorDetails | None = None) -> Any:
    body = ConnectErrorBody.of(code, message, details).to_json()
    return web.json_response(body, status=HTTP_STATUS[code])


def answer(body: Body) -> Handler:
    async def handler(_: Body) -> Body:
        return body

    return handler


@pytest.fixture
async def fake() -> AsyncIterator[FakeIris]:
    fake = FakeIris()
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", fake.dispatch)
    async with served(app) as fake.url:
        yield fake


@pytest.fixture
async def iris(fake: FakeIris) -> AsyncIterator[IrisController]:
    async with IrisController(fake.url, timeout=5) as client:
        yield client


def token_of(value: str) -> IrisToken:
    return IrisToken(environ={"KEEPER_IRIS_TOKEN": value})


# --- the wire ---------------------------------------------------------------------------------


async def test_list_tasks_sends_camel_case_and_reads_enum_names(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(
        connect.LIST_TASKS,
        answer(
            {
                "tasks": [
                    {
                        "taskId": f"{JOB}/0",
                        "state": "TASK_STATE_RUNNING",
                        "workerId": "w-1",
                        "currentAttemptId": 2,
                        "startedAt": {"epochMs": "1764590400000"},
                        "attempts": [{"attemptId": 1, "state": "TASK_STATE_WORKER_FAILED"}],
                    }
                ]
            }
        ),
    )
    [task] = await iris.list_tasks(JOB)
    assert fake.calls(connect.LIST_TASKS)[0].body == {"jobId": JOB}
    assert task.state is TaskState.RUNNING
    assert task.current_attempt_id == 2
    assert task.started_at is not None and task.started_at.epoch_ms == 1764590400000
    assert task.attempts[0].state is TaskState.WORKER_FAILED


async def test_calls_carry_connect_headers_and_the_deadline(fake: FakeIris) -> None:
    fake.on(connect.GET_JOB_STATUS, answer({"job": {"jobId": JOB, "state": "JOB_STATE_RUNNING"}}))
    async with IrisController(fake.url, timeout=5) as iris:
        job, request = await iris.get_job_status(JOB, deadline_s=2.5)
    assert job.state is JobState.RUNNING and request is None
    headers = fake.calls(connect.GET_JOB_STATUS)[0].headers
    assert headers["Content-Type"] == "application/json"
    assert headers["Connect-Protocol-Version"] == "1"
    assert headers["Connect-Timeout-Ms"] == "2500"
    assert "Authorization" not in headers
    assert "gzip" in headers["Accept-Encoding"]


async def test_the_bearer_token_is_sent(fake: FakeIris) -> None:
    fake.on(connect.LIST_TASKS, answer({}))
    async with IrisController(fake.url, token=token_of(TOKEN)) as iris:
        assert await iris.list_tasks(JOB) == []
    assert fake.calls(connect.LIST_TASKS)[0].headers["Authorization"] == f"Bearer {TOKEN}"


async def test_a_gzip_response_is_decoded(fake: FakeIris, iris: IrisController) -> None:
    async def gzipped(_: Body) -> web.StreamResponse:
        raw = json.dumps({"tasks": [{"taskId": f"{JOB}/0"}]}).encode()
        return web.Response(
            body=gzip.compress(raw),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )

    fake.on(connect.LIST_TASKS, gzipped)
    [task] = await iris.list_tasks(JOB)
    assert task.task_id == f"{JOB}/0"


# --- children ---------------------------------------------------------------------------------


def _children_server(fake: FakeIris, jobs: list[str], *, refuse_children_scope: bool) -> None:
    async def list_jobs(body: Body) -> Body | web.StreamResponse:
        query = body.get("query", {})
        if query.get("scope") == "JOB_QUERY_SCOPE_CHILDREN":
            if refuse_children_scope:
                return connect_error(Code.INVALID_ARGUMENT, "unknown scope")
            matching = [j for j in jobs if j.rsplit("/", 1)[0] == query["parentJobId"]]
        else:
            matching = [j for j in jobs if j.startswith(query.get("jobIdPrefix", ""))]
        offset, limit = query.get("offset", 0), query.get("limit", 50)
        page = matching[offset : offset + limit]
        return {
            "jobs": [{"jobId": j, "state": "JOB_STATE_RUNNING"} for j in page],
            "totalCount": len(matching),
            "hasMore": offset + limit < len(matching),
        }

    fake.on(connect.LIST_JOBS, list_jobs)


CHILDREN = [f"{JOB}/zephyr-tok-0a1b2c3d-p0-a{n}-coord" for n in range(7)]
OTHERS = [f"{JOB}/zephyr-tok-0a1b2c3d-p0-a0-coord/grandchild", "/alice/other", "/bob/x"]


async def test_list_children_pages_until_has_more_is_false(
    fake: FakeIris, iris: IrisController
) -> None:
    _children_server(fake, CHILDREN + OTHERS, refuse_children_scope=False)
    children = await iris.list_children(JOB, page_size=3)
    assert [job.job_id for job in children] == CHILDREN
    queries = [seen.body["query"] for seen in fake.calls(connect.LIST_JOBS)]
    assert [(q["offset"], q["limit"]) for q in queries] == [(0, 3), (3, 3), (6, 3)]
    assert queries[0]["scope"] == "JOB_QUERY_SCOPE_CHILDREN"
    assert queries[0]["parentJobId"] == JOB
    assert iris.children_query is ChildrenQuery.CHILDREN_SCOPE


async def test_list_children_falls_back_to_the_id_prefix_and_remembers(
    fake: FakeIris, iris: IrisController
) -> None:
    _children_server(fake, CHILDREN + OTHERS, refuse_children_scope=True)
    first = await iris.list_children(JOB, page_size=4)
    assert [job.job_id for job in first] == CHILDREN  # the grandchild is filtered out
    assert iris.children_query is ChildrenQuery.ID_PREFIX
    fake.seen.clear()
    await iris.list_children(JOB, page_size=100)
    [only] = fake.calls(connect.LIST_JOBS)
    assert only.body["query"] == {
        "scope": "JOB_QUERY_SCOPE_ALL",
        "jobIdPrefix": f"{JOB}/",
        "offset": 0,
        "limit": 100,
    }


async def test_list_children_keeps_direct_children_whatever_the_server_returns(
    fake: FakeIris, iris: IrisController
) -> None:
    # An old controller that ignores the query answers every job it has.
    everything = [{"jobId": j} for j in CHILDREN[:2] + OTHERS]
    fake.on(connect.LIST_JOBS, answer({"jobs": everything, "hasMore": False}))
    assert [job.job_id for job in await iris.list_children(JOB)] == CHILDREN[:2]


OFFSET_REFUSAL = (
    "query.offset={} exceeds MAX_LIST_JOBS_OFFSET={}; narrow the result set with "
    "state_filter/name_filter/parent_job_id instead of paging deeper."
)


def _capped_server(fake: FakeIris, jobs: list[tuple[str, str]], *, max_offset: int = 5000) -> None:
    """ListJobs as the newest controller pages it: 500 a page at most (0 reads as 500), an
    offset past `max_offset` refused, state_filter, sort by date (newest first: the end of
    `jobs`) or by name either way. `jobs`: (id, lowercase state), oldest first."""

    async def list_jobs(body: Body) -> Body | web.StreamResponse:
        query = body.get("query", {})
        limit = query.get("limit", 0)
        limit = limit if 0 < limit <= 500 else 500
        offset = max(query.get("offset", 0), 0)
        if offset > max_offset:
            message = OFFSET_REFUSAL.format(offset, max_offset)
            return connect_error(Code.INVALID_ARGUMENT, message)
        rows = [(j, s) for j, s in jobs if j.rsplit("/", 1)[0] == query.get("parentJobId")]
        state = query.get("stateFilter", "").lower()
        rows = [(j, s) for j, s in rows if not state or s == state]
        if query.get("sortField") == "JOB_SORT_FIELD_NAME":
            rows.sort(reverse=query.get("sortDirection") == "SORT_DIRECTION_DESC")
        else:
            rows.reverse()
        page = rows[offset : offset + limit]
        return {
            "jobs": [{"jobId": j, "state": f"JOB_STATE_{s.upper()}"} for j, s in page],
            "totalCount": len(rows),
            "hasMore": offset + limit < len(rows),
        }

    fake.on(connect.LIST_JOBS, list_jobs)


def _queries(fake: FakeIris) -> list[dict[str, Any]]:
    return [seen.body["query"] for seen in fake.calls(connect.LIST_JOBS)]


async def test_a_family_past_one_listings_reach_is_read_by_state_from_both_ends(
    fake: FakeIris, iris: IrisController
) -> None:
    # 7,000 running (more than 5,500: read by name from both ends) and 3,000 succeeded.
    jobs = [
        (f"{JOB}/shard-{i:05d}", "running" if i % 10 < 7 else "succeeded") for i in range(10_000)
    ]
    _capped_server(fake, jobs)
    children = await iris.list_children(JOB)
    assert sorted(job.job_id for job in children) == sorted(j for j, _ in jobs)
    assert children.complete and children.total == 10_000
    assert children.describe() == "sees all 10,000 children"
    queries = _queries(fake)
    assert max(q["offset"] for q in queries) <= 5000
    assert {q["limit"] for q in queries} == {500}
    assert {q.get("stateFilter", "") for q in queries} == {"", *LIST_JOBS_STATE_FILTERS}
    assert iris.children_query is ChildrenQuery.CHILDREN_SCOPE
    # A page by date, then by state: running from both ends (11 pages up, the 1,500 left in
    # 3 down), succeeded in 6 pages, each other state in one (empty) page.
    assert len(queries) == 1 + (11 + 3) + 6 + 6


async def test_what_no_listing_reaches_is_counted_and_said(
    fake: FakeIris, iris: IrisController
) -> None:
    jobs = [(f"{JOB}/shard-{i:05d}", "running") for i in range(12_000)]
    _capped_server(fake, jobs)
    children = await iris.list_children(JOB)
    assert len(children) == 11_000 and children.unseen == 1_000 and not children.complete
    assert children.describe() == "sees 11,000 of 12,000 children"
    # The newest children are among those seen.
    assert {j for j, _ in jobs[-500:]} <= {job.job_id for job in children}


async def test_an_offset_refusal_is_never_read_as_a_scope_the_controller_lacks(
    fake: FakeIris, iris: IrisController
) -> None:
    # A controller with a lower cap: the page past it is refused, INVALID_ARGUMENT.
    jobs = [(child, "running") for child in CHILDREN]
    _capped_server(fake, jobs, max_offset=3)
    children = await iris.list_children(JOB, page_size=2)
    assert iris.children_query is ChildrenQuery.CHILDREN_SCOPE
    assert all("jobIdPrefix" not in q for q in _queries(fake))
    # Offsets 0 and 2 answer, 4 is refused: 4 children seen, 3 counted but not reached.
    assert len(children) == 4 and children.unseen == 3
    assert children.describe() == "sees 4 of 7 children"


async def test_an_offset_refusal_of_the_first_page_is_raised_not_a_fallback(
    fake: FakeIris, iris: IrisController
) -> None:
    refusal = OFFSET_REFUSAL.format(0, -1)
    fake.on(connect.LIST_JOBS, answer_error(Code.INVALID_ARGUMENT, refusal))
    with pytest.raises(IrisInvalidArgument, match="MAX_LIST_JOBS_OFFSET"):
        await iris.list_children(JOB)
    assert iris.children_query is None
    assert [q.get("scope") for q in _queries(fake)] == ["JOB_QUERY_SCOPE_CHILDREN"]


# --- logs -------------------------------------------------------------------------------------

LOG_LINES = [
    {"timestamp": {"epochMs": "1764590405000"}, "data": "[stage0] 3/10 complete", "level": "INFO"},
    {"data": "Shard 4 failed on worker w-2", "level": "LOG_LEVEL_WARNING", "attemptId": 1},
]


async def test_task_logs_uses_get_task_logs_when_present(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(
        connect.GET_TASK_LOGS,
        answer(
            {
                "taskLogs": [{"taskId": f"{JOB}/0", "logs": LOG_LINES}],
                "cursor": "41",
                "truncated": False,
            }
        ),
    )
    page = await iris.task_logs(f"{JOB}/0", cursor=17, tail=True, max_lines=200)
    assert page.route is LogRoute.GET_TASK_LOGS and page.cursor == 41
    assert [entry.level for entry in page.entries] == [LogLevel.INFO, LogLevel.WARNING]
    assert fake.calls(connect.GET_TASK_LOGS)[0].body == {
        "id": f"{JOB}/0",
        "includeChildren": False,
        "sinceMs": "0",
        "maxTotalLines": "200",
        "substring": "",
        "attemptId": -1,
        "minLevel": "",
        "cursor": "17",
        "tail": True,
    }


@pytest.mark.parametrize("absent", ["no route (HTTP 404)", "unimplemented"])
async def test_task_logs_falls_back_to_fetch_logs_and_remembers(
    fake: FakeIris, iris: IrisController, absent: str
) -> None:
    if absent == "unimplemented":
        fake.on(connect.GET_TASK_LOGS, answer_error(Code.UNIMPLEMENTED))
    fake.on(connect.FETCH_LOGS, answer({"entries": LOG_LINES, "cursor": "99"}))
    page = await iris.task_logs(f"{JOB}/0", attempt_id=-1)
    assert page.route is LogRoute.FETCH_LOGS and page.cursor == 99
    assert [entry.data for entry in page.entries] == [line["data"] for line in LOG_LINES]
    fetch = fake.calls(connect.FETCH_LOGS)[0].body
    assert (fetch["source"], fetch["matchScope"]) == (f"{JOB}/0:", "MATCH_SCOPE_PREFIX")
    await iris.task_logs(f"{JOB}/0", cursor=99)
    assert len(fake.calls(connect.GET_TASK_LOGS)) == 1
    assert len(fake.calls(connect.FETCH_LOGS)) == 2
    assert iris.log_route is LogRoute.FETCH_LOGS


async def test_task_logs_reaches_the_finelog_service_when_iris_logging_is_absent(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.FINELOG_FETCH_LOGS, answer({"entries": LOG_LINES[:1], "cursor": "5"}))
    page = await iris.task_logs(JOB)
    assert page.route is LogRoute.FINELOG_FETCH_LOGS
    await iris.task_logs(JOB, cursor=5)
    assert len(fake.calls(connect.FETCH_LOGS)) == 1
    assert len(fake.calls(connect.FINELOG_FETCH_LOGS)) == 2


async def test_task_logs_reaches_the_log_server_through_the_endpoint_proxy(
    fake: FakeIris, iris: IrisController
) -> None:
    # The newest controller: no GetTaskLogs, no LogService of its own.
    fake.on(connect.PROXIED_FETCH_LOGS, answer({"entries": LOG_LINES, "cursor": "8"}))
    page = await iris.task_logs(f"{JOB}/0", attempt_id=1)
    assert page.route is LogRoute.PROXIED_FETCH_LOGS and len(page.entries) == 2
    body = fake.calls("/proxy/system.log-server/finelog.logging.LogService/FetchLogs")[0].body
    assert (body["source"], body["matchScope"]) == (f"{JOB}/0:1", "MATCH_SCOPE_EXACT")
    fake.seen.clear()
    await iris.task_logs(f"{JOB}/0", cursor=8)
    assert [seen.path for seen in fake.seen] == [connect.PROXIED_FETCH_LOGS]


async def test_task_logs_raises_unimplemented_when_no_log_method_exists(
    fake: FakeIris, iris: IrisController
) -> None:
    with pytest.raises(IrisUnimplemented):
        await iris.task_logs(f"{JOB}/0")


async def test_a_cursor_of_zero_from_an_empty_read_keeps_the_callers_position(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.FETCH_LOGS, answer({}))
    page = await iris.task_logs(f"{JOB}/0", cursor=1234)
    assert page.entries == [] and page.cursor == 1234


@pytest.mark.parametrize(
    ("id_", "attempt", "children", "expected"),
    [
        (f"{JOB}/0", 2, False, (f"{JOB}/0:2", MatchScope.EXACT)),
        (f"{JOB}/0", -1, False, (f"{JOB}/0:", MatchScope.PREFIX)),
        (JOB, -1, True, (f"{JOB}/", MatchScope.PREFIX)),
        ("/alice/a.b", -1, False, (r"/alice/a\.b/\d+:.*", MatchScope.REGEX)),
        ("/alice/a", 0, False, (r"/alice/a/\d+:0", MatchScope.REGEX)),
    ],
)
def test_fetch_logs_source_matches_get_task_logs_semantics(
    id_: str, attempt: int, children: bool, expected: tuple[str, MatchScope]
) -> None:
    assert fetch_logs_source(id_, attempt, children) == expected


# --- profile and exec -------------------------------------------------------------------------

DUMP = 'Thread 0x7F00000002 (active+gil): "zephyr-coordinator-loop"\n    _coordinator_loop\n'


async def test_profile_threads_asks_for_threads_and_decodes_the_dump(
    fake: FakeIris, iris: IrisController
) -> None:
    data = base64.b64encode(DUMP.encode()).decode()
    fake.on(connect.PROFILE_TASK, answer({"profileData": data}))
    assert await iris.profile_threads(f"{JOB}/0") == DUMP
    assert fake.calls(connect.PROFILE_TASK)[0].body == {
        "target": f"{JOB}/0",
        "durationSeconds": 1,
        "profileType": {"threads": {}},
    }


async def test_a_failed_profile_raises_remote_failure(fake: FakeIris, iris: IrisController) -> None:
    fake.on(connect.PROFILE_TASK, answer({"error": "task is not running"}))
    with pytest.raises(IrisRemoteFailure, match="task is not running"):
        await iris.profile_threads(f"{JOB}/0")


async def test_exec_in_container_sends_the_command_and_returns_its_output(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.EXEC_IN_CONTAINER, answer({"stdout": "83824.5\n", "exitCode": 0}))
    result = await iris.exec_in_container(f"{JOB}/0", ["sh", "-c", "true"], timeout_s=5)
    assert result.ok and result.stdout == "83824.5\n"
    assert fake.calls(connect.EXEC_IN_CONTAINER)[0].body == {
        "taskId": f"{JOB}/0",
        "command": ["sh", "-c", "true"],
        "timeoutSeconds": 5,
    }


async def test_exec_setup_failure_is_a_result_not_an_exception(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.EXEC_IN_CONTAINER, answer({"error": "worker unreachable", "exitCode": -1}))
    result = await iris.exec_in_container(f"{JOB}/0", ["true"])
    assert not result.ok and result.error == "worker unreachable"


# --- launch, relaunch, terminate --------------------------------------------------------------

ORIGINAL = {
    "name": JOB,
    "entrypoint": {"runCommand": {"argv": ["python", "-m", "tok"]}, "workdirFileRefs": {"a": "b"}},
    "resources": {"cpuMillicores": 2000, "memoryBytes": "8589934592"},
    "replicas": 1,
    "maxRetriesFailure": 0,
    "containerProfile": "CONTAINER_PROFILE_DEFAULT",
    "healthCheck": {"failureThreshold": 3},
}


async def test_relaunch_sends_the_original_request_with_its_unknown_fields(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.GET_JOB_STATUS, answer({"job": {"jobId": JOB}, "request": ORIGINAL}))
    fake.on(connect.LAUNCH_JOB, answer({"jobId": JOB}))
    _, request = await iris.get_job_status(JOB)
    assert request is not None
    assert await iris.launch_job(request) == JOB
    assert fake.calls(connect.LAUNCH_JOB)[0].body == ORIGINAL


async def test_launch_of_an_existing_name_raises_already_exists_with_the_name(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.GET_JOB_STATUS, answer({"job": {"jobId": JOB}, "request": ORIGINAL}))
    fake.on(connect.LAUNCH_JOB, answer_error(Code.ALREADY_EXISTS, f"job {JOB} exists"))
    _, request = await iris.get_job_status(JOB)
    assert request is not None
    with pytest.raises(IrisAlreadyExists) as caught:
        await iris.launch_job(request)
    assert caught.value.name == JOB


async def test_terminate_of_an_unknown_job_raises_job_not_found(
    fake: FakeIris, iris: IrisController
) -> None:
    fake.on(connect.TERMINATE_JOB, answer_error(Code.NOT_FOUND, "no such job"))
    with pytest.raises(JobNotFound) as caught:
        await iris.terminate_job(JOB)
    assert caught.value.job_id == JOB and caught.value.code is Code.NOT_FOUND
    assert fake.calls(connect.TERMINATE_JOB)[0].body == {"jobId": JOB}


async def test_terminate_returns_on_an_empty_answer(fake: FakeIris, iris: IrisController) -> None:
    fake.on(connect.TERMINATE_JOB, answer({}))
    await iris.terminate_job(JOB)
    assert len(fake.calls(connect.TERMINATE_JOB)) == 1


# --- errors -----------------------------------------------------------------------------------


def answer_error(code: Code, message: str = "", details: ErrorDetails | None = None) -> Handler:
    async def handler(_: Body) -> web.StreamResponse:
        return connect_error(code, message, details)

    return handler


ERROR_TABLE: list[tuple[Code, type[IrisError]]] = [
    (Code.NOT_FOUND, JobNotFound),
    (Code.ALREADY_EXISTS, IrisAlreadyExists),
    (Code.INVALID_ARGUMENT, IrisInvalidArgument),
    (Code.FAILED_PRECONDITION, IrisInvalidArgument),
    (Code.OUT_OF_RANGE, IrisInvalidArgument),
    (Code.UNAUTHENTICATED, IrisAuthError),
    (Code.PERMISSION_DENIED, IrisAuthError),
    (Code.UNIMPLEMENTED, IrisUnimplemented),
    (Code.UNAVAILABLE, IrisUnavailable),
    (Code.RESOURCE_EXHAUSTED, IrisUnavailable),
    (Code.ABORTED, IrisUnavailable),
    (Code.CANCELED, IrisUnavailable),
    (Code.DEADLINE_EXCEEDED, IrisTimedOut),
    (Code.INTERNAL, IrisInternal),
    (Code.UNKNOWN, IrisInternal),
    (Code.DATA_LOSS, IrisInternal),
]


def test_the_error_table_covers_every_code() -> None:
    assert {code for code, _ in ERROR_TABLE} == set(Code)


@pytest.mark.parametrize(("code", "cls"), ERROR_TABLE, ids=[c.value for c, _ in ERROR_TABLE])
async def test_every_connect_code_maps_to_its_error(
    fake: FakeIris, iris: IrisController, code: Code, cls: type[IrisError]
) -> None:
    fake.on(connect.LIST_TASKS, answer_error(code, "refused"))
    with pytest.raises(IrisError) as caught:
        await iris.list_tasks(JOB)
    assert type(caught.value) is cls
    assert caught.value.code is code
    assert connect.LIST_TASKS in str(caught.value) and "refused" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "cls"),
    [(503, IrisUnavailable), (502, IrisUnavailable), (401, IrisAuthError), (500, IrisInternal)],
)
async def test_a_non_connect_error_page_maps_by_http_status(
    fake: FakeIris, iris: IrisController, status: int, cls: type[IrisError]
) -> None:
    async def page(_: Body) -> web.StreamResponse:
        return web.Response(status=status, text="<html>proxy says no</html>")

    fake.on(connect.LIST_TASKS, page)
    with pytest.raises(IrisError) as caught:
        await iris.list_tasks(JOB)
    assert type(caught.value) is cls


async def test_internal_carries_the_exception_type_but_not_the_traceback(
    fake: FakeIris, iris: IrisController
) -> None:
    details = ErrorDetails(
        exception_type="sqlite3.OperationalError",
        message="database is locked",
        traceback='Traceback (most recent call last):\n  File "service.py", line 12',
        timestamp_ms=1764590400000,
    )
    fake.on(connect.LIST_TASKS, answer_error(Code.INTERNAL, "list_tasks failed", details))
    with pytest.raises(IrisInternal) as caught:
        await iris.list_tasks(JOB)
    error = caught.value
    assert error.exception_type == "sqlite3.OperationalError"
    assert error.detail == "database is locked"
    assert "sqlite3.OperationalError" in str(error) and "database is locked" in str(error)
    assert "Traceback" not in str(error) and "service.py" not in repr(error)


async def test_a_slow_server_is_a_timeout_and_retryable(fake: FakeIris) -> None:
    release = asyncio.Event()

    async def never(_: Body) -> Body:
        await release.wait()
        return {}

    fake.on(connect.LIST_TASKS, never)
    try:
        async with IrisController(fake.url, timeout=0.2) as iris:
            with pytest.raises(IrisUnavailable) as caught:
                await iris.list_tasks(JOB)
    finally:
        release.set()
    assert isinstance(caught.value, IrisTimedOut) and caught.value.retryable


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_calls_go_through_the_proxy_the_environment_names(
    fake: FakeIris, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake stands for the proxy: a controller name nothing resolves reaches it.
    monkeypatch.setenv("HTTP_PROXY", fake.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    fake.on(connect.LIST_TASKS, answer({"tasks": []}))
    async with IrisController("http://iris.invalid", timeout=5) as iris:
        assert await iris.list_tasks(JOB) == []
    assert fake.calls(connect.LIST_TASKS)[0].headers["Host"] == "iris.invalid"


async def test_a_host_in_no_proxy_is_called_directly(
    fake: FakeIris, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_closed_port()}")  # refuses all
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    fake.on(connect.LIST_TASKS, answer({"tasks": []}))
    async with IrisController(fake.url, timeout=5) as iris:
        assert await iris.list_tasks(JOB) == []


async def test_a_refused_connection_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port once the socket is closed.
    async with IrisController(f"http://127.0.0.1:{port}") as iris:
        with pytest.raises(IrisUnavailable) as caught:
            await iris.list_tasks(JOB)
    assert type(caught.value) is IrisUnavailable and caught.value.retryable


async def test_a_200_that_is_not_json_is_a_protocol_error(
    fake: FakeIris, iris: IrisController
) -> None:
    async def html(_: Body) -> web.StreamResponse:
        return web.Response(text="<html>login</html>", content_type="text/html")

    fake.on(connect.LIST_TASKS, html)
    with pytest.raises(IrisProtocolError):
        await iris.list_tasks(JOB)


async def test_the_token_never_appears_in_error_text(fake: FakeIris) -> None:
    fake.on(connect.LIST_TASKS, answer_error(Code.UNAUTHENTICATED, f"bad token Bearer {TOKEN}"))
    token = token_of(TOKEN)
    async with IrisController(fake.url, token=token) as iris:
        with pytest.raises(IrisAuthError) as caught:
            await iris.list_tasks(JOB)
        texts = [str(caught.value), repr(caught.value), repr(iris), repr(token), str(token)]
    assert fake.calls(connect.LIST_TASKS)[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert "KEEPER_IRIS_TOKEN" in str(caught.value) and "watch.token_file" in str(caught.value)
    for text in texts:
        assert TOKEN not in text
        assert TOKEN[8:30] not in text


def test_non_retryable_types_name_every_class_temporal_must_not_retry() -> None:
    names = non_retryable_types()
    for cls in (
        IrisNotFound,
        JobNotFound,
        IrisAlreadyExists,
        IrisInvalidArgument,
        IrisAuthError,
        IrisUnimplemented,
        IrisProtocolError,
        IrisRemoteFailure,
    ):
        assert cls.__name__ in names and not cls.retryable
    for cls in (IrisUnavailable, IrisTimedOut, IrisInternal):
        assert cls.__name__ not in names and cls.retryable


# --- the token --------------------------------------------------------------------------------


def test_token_from_the_environment_is_stripped_and_empty_is_anonymous() -> None:
    assert token_of(f"  {TOKEN}\n").headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert token_of("  \n").headers() == {}
    assert not IrisToken.anonymous().present


def test_token_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"{TOKEN}\n")
    token = IrisToken(path=path)
    assert token.headers() == {"Authorization": f"Bearer {TOKEN}"}
    path.write_text("rotated-token-0123456789\n")
    stat = path.stat()
    # Make sure the stamp differs even on a coarse-grained filesystem clock.
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert token.headers() == {"Authorization": "Bearer rotated-token-0123456789"}
    path.write_text("")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert token.headers() == {}
    assert TOKEN not in repr(token) and "watch.token_file" in token.setting


def test_a_token_with_a_space_is_refused_without_showing_it() -> None:
    with pytest.raises(IrisTokenError) as caught:
        token_of("two words-secretvalue")
    assert "secretvalue" not in str(caught.value)


async def test_an_unreadable_token_file_is_an_auth_error(tmp_path: Path, fake: FakeIris) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    token = IrisToken(path=path)
    path.unlink()
    async with IrisController(fake.url, token=token) as iris:
        with pytest.raises(IrisAuthError, match="cannot be read"):
            await iris.list_tasks(JOB)
    assert fake.seen == []
