"""An async client of the iris controller, the calls job watch makes, over Connect JSON.

Every call is one POST of a protobuf JSON body with `Connect-Protocol-Version: 1`, a
`Connect-Timeout-Ms` deadline, and `Authorization: Bearer <token>` when a token is set.
Failures come back as the typed errors of runtime/watch/iris_errors.py; the client never
retries (Temporal's retry policies do, for the retryable ones).

iris versions differ, and the client remembers what the controller it talks to supports:

| call          | first try                               | when refused                          |
|---------------|-----------------------------------------|---------------------------------------|
| list_children | ListJobs scope CHILDREN + parent_job_id | ListJobs job_id_prefix `<job>/`       |
| task_logs     | ControllerService.GetTaskLogs           | LogService.FetchLogs: iris.logging,   |
|               |                                         | finelog.logging, then finelog through |
|               |                                         | the `/proxy/system.log-server` route  |

Whatever the server does with the query, list_children keeps only the job's direct children.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.watch.credentials import IrisToken, IrisTokenError
from runtime.watch.iris_errors import (
    IrisAuthError,
    IrisError,
    IrisInvalidArgument,
    IrisProtocolError,
    IrisRemoteFailure,
    IrisTimedOut,
    IrisUnavailable,
    IrisUnimplemented,
    iris_error,
)
from wire.iris import connect
from wire.iris.codec import WireMessage, from_wire, to_wire
from wire.iris.connect import Code, ConnectErrorBody, ErrorDetails
from wire.iris.enums import JobQueryScope, MatchScope
from wire.iris.messages import (
    Empty,
    ExecInContainerRequest,
    ExecInContainerResponse,
    FetchLogsRequest,
    FetchLogsResponse,
    GetJobStatusRequest,
    GetJobStatusResponse,
    GetTaskLogsRequest,
    GetTaskLogsResponse,
    JobQuery,
    JobStatus,
    LaunchJobRequest,
    LaunchJobResponse,
    ListJobsRequest,
    ListJobsResponse,
    ListTasksRequest,
    ListTasksResponse,
    LogEntry,
    ProfileTaskRequest,
    ProfileTaskResponse,
    ProfileType,
    TaskStatus,
    TerminateJobRequest,
    ThreadsProfile,
)

DEFAULT_TIMEOUT_S = 30.0  # the iris Python client's own default
PAGE_SIZE = 500  # the most ListJobs returns per page
# A server that keeps saying has_more with ever new pages is broken; stop rather than spin.
MAX_PAGES = 200
# ExecInContainer and ProfileTask run for their own duration before answering.
EXEC_GRACE_S = 10.0

R = TypeVar("R", bound=WireMessage)


class ChildrenQuery(StrEnum):
    CHILDREN_SCOPE = "scope CHILDREN"
    ID_PREFIX = "job_id_prefix"


class LogRoute(StrEnum):
    GET_TASK_LOGS = connect.GET_TASK_LOGS
    FETCH_LOGS = connect.FETCH_LOGS
    FINELOG_FETCH_LOGS = connect.FINELOG_FETCH_LOGS
    PROXIED_FETCH_LOGS = connect.PROXIED_FETCH_LOGS


# In the order they are tried: oldest controllers first, so each finds its own quickly.
LOG_ROUTES = (
    LogRoute.GET_TASK_LOGS,
    LogRoute.FETCH_LOGS,
    LogRoute.FINELOG_FETCH_LOGS,
    LogRoute.PROXIED_FETCH_LOGS,
)


class LogPage(BaseModel):
    """One read of a task's or job's log, whichever method served it."""

    model_config = ConfigDict(frozen=True)

    entries: list[LogEntry] = Field(default_factory=list)
    # Pass back as `cursor` to read only what came after this page.
    cursor: int = 0
    truncated: bool = False
    route: LogRoute
    # Per-task failures GetTaskLogs reported (task id -> error) alongside what it did read.
    errors: dict[str, str] = Field(default_factory=dict)


class ExecResult(BaseModel):
    """What a command run through ExecInContainer did."""

    model_config = ConfigDict(frozen=True)

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    # Set when the exec could not be set up at all (no container, worker gone).
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.exit_code == 0


_TASK_ID = re.compile(r"/\d+$")


def is_task_id(id_: str) -> bool:
    """iris's rule: an id whose last component is numeric names a task."""
    return bool(_TASK_ID.search(id_))


def is_direct_child(parent_id: str, job: JobStatus) -> bool:
    if job.parent_job_id:
        return job.parent_job_id == parent_id
    prefix = parent_id.rstrip("/") + "/"
    rest = job.job_id[len(prefix) :] if job.job_id.startswith(prefix) else ""
    return bool(rest) and "/" not in rest


def fetch_logs_source(id_: str, attempt_id: int, include_children: bool) -> tuple[str, MatchScope]:
    """The FetchLogs key for what GetTaskLogs(id, attempt_id, include_children) returns.

    | id   | attempt | include_children | source                        | scope  |
    |------|---------|------------------|-------------------------------|--------|
    | task | >= 0    | -                | `<task>:<attempt>`            | EXACT  |
    | task | -1      | -                | `<task>:`                     | PREFIX |
    | job  | any     | yes              | `<job>/`                      | PREFIX |
    | job  | >= 0    | no               | `<job>/\\d+:<attempt>` escaped | REGEX  |
    | job  | -1      | no               | `<job>/\\d+:.*` escaped        | REGEX  |
    """
    if is_task_id(id_):
        if attempt_id >= 0:
            return f"{id_}:{attempt_id}", MatchScope.EXACT
        return f"{id_}:", MatchScope.PREFIX
    job = id_.rstrip("/")
    if include_children:
        return f"{job}/", MatchScope.PREFIX
    attempt = str(attempt_id) if attempt_id >= 0 else ".*"
    return rf"{re.escape(job)}/\d+:{attempt}", MatchScope.REGEX


class IrisController:
    """The iris controller at `base_url` (`https://host[:port]`). One instance per controller;
    use `async with` or call `aclose()`.

    `log_url` is where LogService answers, when not at the controller's own address.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: IrisToken | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        log_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r} must be an http:// or https:// URL")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._base_url = base_url.rstrip("/")
        self._log_url = (log_url or base_url).rstrip("/")
        self._token = token
        self._timeout = timeout
        # httpx asks for and decodes gzip and deflate (and zstd or brotli when their
        # decoders are installed); iris compresses responses only when asked.
        self._http = httpx.AsyncClient(transport=transport, follow_redirects=False)
        self._children_query: ChildrenQuery | None = None
        self._log_route: LogRoute | None = None

    def __repr__(self) -> str:
        return f"IrisController(base_url={self._base_url!r}, token={self._token!r})"

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def log_route(self) -> LogRoute | None:
        """The log method that last worked (None until a log read succeeded)."""
        return self._log_route

    @property
    def children_query(self) -> ChildrenQuery | None:
        return self._children_query

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> IrisController:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------- jobs

    async def get_job_status(
        self, job_id: str, *, deadline_s: float | None = None
    ) -> tuple[JobStatus, LaunchJobRequest | None]:
        """The job and the request it was launched with (None if the server leaves it out).
        Raises JobNotFound."""
        response = await self._call(
            connect.GET_JOB_STATUS,
            GetJobStatusRequest(job_id=job_id),
            GetJobStatusResponse,
            deadline_s=deadline_s,
            job_id=job_id,
        )
        if response.job is None:
            raise IrisProtocolError(f"{connect.GET_JOB_STATUS} at {self._base_url}: no job")
        return response.job, response.request

    async def list_children(
        self, job_id: str, *, page_size: int = PAGE_SIZE, deadline_s: float | None = None
    ) -> list[JobStatus]:
        """The direct child jobs of `job_id`, every page of them."""
        if self._children_query is not ChildrenQuery.ID_PREFIX:
            try:
                jobs = await self._all_pages(
                    JobQuery(scope=JobQueryScope.CHILDREN, parent_job_id=job_id),
                    page_size,
                    deadline_s,
                )
            except (IrisInvalidArgument, IrisUnimplemented):
                self._children_query = ChildrenQuery.ID_PREFIX
            else:
                self._children_query = ChildrenQuery.CHILDREN_SCOPE
                return [job for job in jobs if is_direct_child(job_id, job)]
        query = JobQuery(scope=JobQueryScope.ALL, job_id_prefix=job_id.rstrip("/") + "/")
        jobs = await self._all_pages(query, page_size, deadline_s)
        return [job for job in jobs if is_direct_child(job_id, job)]

    async def _all_pages(
        self, query: JobQuery, page_size: int, deadline_s: float | None
    ) -> list[JobStatus]:
        jobs: list[JobStatus] = []
        for _ in range(MAX_PAGES):
            page = query.model_copy(update={"offset": len(jobs), "limit": page_size})
            response = await self._call(
                connect.LIST_JOBS,
                ListJobsRequest(query=page),
                ListJobsResponse,
                deadline_s=deadline_s,
            )
            jobs += response.jobs
            if not response.has_more or not response.jobs:
                return jobs
        raise IrisProtocolError(
            f"{connect.LIST_JOBS} at {self._base_url}: still has_more after {MAX_PAGES} pages"
        )

    async def list_tasks(self, job_id: str, *, deadline_s: float | None = None) -> list[TaskStatus]:
        """The job's own tasks (not its children's). Raises JobNotFound."""
        response = await self._call(
            connect.LIST_TASKS,
            ListTasksRequest(job_id=job_id),
            ListTasksResponse,
            deadline_s=deadline_s,
            job_id=job_id,
        )
        return response.tasks

    async def terminate_job(self, job_id: str, *, deadline_s: float | None = None) -> None:
        """Terminate the job and its descendants. Raises JobNotFound when it is not known:
        the caller decides whether that means "already gone"."""
        await self._call(
            connect.TERMINATE_JOB,
            TerminateJobRequest(job_id=job_id),
            Empty,
            deadline_s=deadline_s,
            job_id=job_id,
        )

    async def launch_job(
        self, request: LaunchJobRequest, *, deadline_s: float | None = None
    ) -> str:
        """Launch `request` as it is (every field it carries is sent); the new job's id.
        Raises IrisAlreadyExists with the request's name."""
        response = await self._call(
            connect.LAUNCH_JOB, request, LaunchJobResponse, deadline_s=deadline_s, name=request.name
        )
        return response.job_id

    # ------------------------------------------------------------- logs

    async def task_logs(
        self,
        id_: str,
        *,
        attempt_id: int = -1,
        since_ms: int = 0,
        cursor: int = 0,
        max_lines: int = 0,
        tail: bool = False,
        min_level: str = "",
        substring: str = "",
        include_children: bool = False,
        deadline_s: float | None = None,
    ) -> LogPage:
        """Log lines of a task (`/user/job/0`) or of a job's tasks. attempt_id -1 is every
        attempt. max_lines 0 is the server's default (10000 for GetTaskLogs, 1000 for
        FetchLogs)."""
        start = LOG_ROUTES.index(self._log_route) if self._log_route else 0
        last: IrisUnimplemented | None = None
        for route in LOG_ROUTES[start:]:
            try:
                if route is LogRoute.GET_TASK_LOGS:
                    page = await self._get_task_logs(
                        GetTaskLogsRequest(
                            id=id_,
                            include_children=include_children,
                            since_ms=since_ms,
                            max_total_lines=max_lines,
                            substring=substring,
                            attempt_id=attempt_id,
                            min_level=min_level,
                            cursor=cursor,
                            tail=tail,
                        ),
                        deadline_s,
                    )
                else:
                    source, scope = fetch_logs_source(id_, attempt_id, include_children)
                    request = FetchLogsRequest(
                        source=source,
                        match_scope=scope,
                        since_ms=since_ms,
                        cursor=cursor,
                        substring=substring,
                        max_lines=max_lines,
                        tail=tail,
                        min_level=min_level,
                    )
                    page = await self._fetch_logs(route, request, deadline_s)
            except IrisUnimplemented as exc:
                last = exc
                continue
            self._log_route = route
            # A server with nothing new may answer cursor 0; the caller's position stands.
            return page.model_copy(update={"cursor": max(page.cursor, cursor)})
        assert last is not None
        raise last

    async def _get_task_logs(
        self, request: GetTaskLogsRequest, deadline_s: float | None
    ) -> LogPage:
        response = await self._call(
            connect.GET_TASK_LOGS, request, GetTaskLogsResponse, deadline_s=deadline_s
        )
        entries = [entry for batch in response.task_logs for entry in batch.logs]
        errors = {batch.task_id: batch.error for batch in response.task_logs if batch.error}
        return LogPage(
            entries=entries,
            cursor=response.cursor,
            truncated=response.truncated,
            route=LogRoute.GET_TASK_LOGS,
            errors=errors,
        )

    async def _fetch_logs(
        self, route: LogRoute, request: FetchLogsRequest, deadline_s: float | None
    ) -> LogPage:
        response = await self._call(
            route.value, request, FetchLogsResponse, deadline_s=deadline_s, base_url=self._log_url
        )
        limit = request.max_lines or 1000
        return LogPage(
            entries=response.entries,
            cursor=response.cursor,
            truncated=len(response.entries) >= limit,
            route=route,
        )

    # ------------------------------------------------------------- inside the container

    async def profile_threads(
        self, task_id: str, duration_s: int = 1, *, deadline_s: float | None = None
    ) -> str:
        """A py-spy thread dump of the task's current attempt, as text. Raises
        IrisRemoteFailure when the worker could not profile it."""
        request = ProfileTaskRequest(
            target=task_id,
            duration_seconds=duration_s,
            profile_type=ProfileType(threads=ThreadsProfile()),
        )
        response = await self._call(
            connect.PROFILE_TASK,
            request,
            ProfileTaskResponse,
            deadline_s=deadline_s or self._timeout + duration_s,
        )
        if response.error:
            raise IrisRemoteFailure(
                f"{connect.PROFILE_TASK} at {self._base_url} for {task_id}: "
                f"{self._scrubbed(response.error)}"
            )
        return response.text

    async def exec_in_container(
        self,
        task_id: str,
        command: list[str],
        timeout_s: int = 30,
        *,
        deadline_s: float | None = None,
    ) -> ExecResult:
        """Run `command` in the task's container; the command's own failure (a non-zero exit,
        or `error` when it could not start) is in the result, not raised."""
        response = await self._call(
            connect.EXEC_IN_CONTAINER,
            ExecInContainerRequest(task_id=task_id, command=command, timeout_seconds=timeout_s),
            ExecInContainerResponse,
            deadline_s=deadline_s or max(self._timeout, timeout_s + EXEC_GRACE_S),
        )
        return ExecResult(
            exit_code=response.exit_code,
            stdout=response.stdout,
            stderr=response.stderr,
            error=self._scrubbed(response.error),
        )

    # ------------------------------------------------------------- transport

    def _scrubbed(self, text: str) -> str:
        return self._token.scrub(text) if self._token is not None else text

    def _headers(self, timeout: float) -> dict[str, str]:
        headers = {
            "Content-Type": connect.CONTENT_TYPE,
            connect.PROTOCOL_VERSION_HEADER: connect.PROTOCOL_VERSION,
            connect.TIMEOUT_HEADER: str(max(1, int(timeout * 1000))),
        }
        if self._token is not None:
            try:
                headers.update(self._token.headers())
            except IrisTokenError as exc:
                raise IrisAuthError(str(exc)) from None
        return headers

    async def _call(
        self,
        path: str,
        request: WireMessage,
        response_cls: type[R],
        *,
        deadline_s: float | None,
        job_id: str = "",
        name: str = "",
        base_url: str | None = None,
    ) -> R:
        seconds = deadline_s or self._timeout
        target = base_url or self._base_url
        body = json.dumps(to_wire(request), separators=(",", ":"))
        try:
            answer = await self._http.post(
                target + path,
                content=body.encode("utf-8"),
                headers=self._headers(seconds),
                timeout=seconds,
            )
        except httpx.TimeoutException as exc:
            raise IrisTimedOut(
                f"{path} at {target}: no answer within {seconds:g}s ({type(exc).__name__})",
                code=Code.DEADLINE_EXCEEDED,
            ) from None
        except httpx.TransportError as exc:
            reason = self._scrubbed(str(exc)) or type(exc).__name__
            raise IrisUnavailable(f"{path} at {target}: {reason}", code=Code.UNAVAILABLE) from None
        if answer.status_code != 200:
            raise self._error(answer, path, target, job_id=job_id, name=name)
        try:
            return from_wire(response_cls, answer.json())
        except (ValueError, ValidationError) as exc:
            # ValidationError's text quotes the input: keep only its first line.
            first = self._scrubbed(str(exc)).splitlines()[0][:200] if str(exc) else ""
            raise IrisProtocolError(
                f"{path} at {target}: the answer is not a {response_cls.__name__}: {first}"
            ) from None

    def _error(
        self, answer: httpx.Response, path: str, target: str, *, job_id: str, name: str
    ) -> IrisError:
        body = _connect_error_body(answer)
        if body is None:
            code = connect.code_of_http_status(answer.status_code)
            message = ""
            details = None
        else:
            code = body.connect_code
            message = self._scrubbed(body.message)
            found = body.error_details()
            details = (
                ErrorDetails(
                    exception_type=self._scrubbed(found.exception_type),
                    message=self._scrubbed(found.message),
                )
                if found is not None
                else None
            )
        return iris_error(
            code,
            message,
            method=path,
            target=target,
            http_status=answer.status_code,
            details=details,
            job_id=job_id,
            name=name,
            token_present=self._token is not None and self._token.present,
        )


def _connect_error_body(answer: httpx.Response) -> ConnectErrorBody | None:
    """The Connect error in a failed answer, or None when the body is something else (a
    proxy's page, a server without the route)."""
    if "json" not in answer.headers.get("content-type", ""):
        return None
    try:
        data: Any = answer.json()
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("code"), str):
        return None
    try:
        return ConnectErrorBody.model_validate(data)
    except ValidationError:
        return None
