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
| launch_job    | a bare name as `/<GetCurrentUser>/name` | the bare name (older controllers)     |

Whatever the server does with the query, list_children keeps only the job's direct children.
It pages within ListJobs' caps (500 a page, offsets up to 5000, so 5,500 jobs an ordering):
a bigger family is read one state_filter at a time, each from both ends of its name order; a
refused offset is never taken for a scope the controller does not know.
"""

from __future__ import annotations

import json
import re
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from keeper.runtime.watch.credentials import IrisToken, IrisTokenError
from keeper.runtime.watch.http1_post import Http1Post
from keeper.runtime.watch.iris_errors import (
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
from keeper.runtime.watch.iris_http import Answer, NoAnswer, Post
from keeper.wire.iris import connect
from keeper.wire.iris.codec import WireMessage, from_wire, number, to_wire
from keeper.wire.iris.connect import Code, ConnectErrorBody, ErrorDetails
from keeper.wire.iris.enums import JobQueryScope, JobSortField, MatchScope, SortDirection
from keeper.wire.iris.messages import (
    LIST_JOBS_MAX_LIMIT,
    LIST_JOBS_MAX_OFFSET,
    LIST_JOBS_STATE_FILTERS,
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
PAGE_SIZE = LIST_JOBS_MAX_LIMIT  # the most ListJobs returns per page (500)
# The deepest offset ListJobs takes (5000): one ordering of one query reaches 5,500 jobs.
MAX_OFFSET = LIST_JOBS_MAX_OFFSET
# A server that keeps saying has_more with ever new pages is broken; stop rather than spin.
MAX_PAGES = 200
# ExecInContainer and ProfileTask run for their own duration before answering.
EXEC_GRACE_S = 10.0

R = TypeVar("R", bound=WireMessage)

# iris.job.GetCurrentUser: who the controller takes the caller for (its request is empty).
GET_CURRENT_USER = connect.controller_path("GetCurrentUser")
# How iris's protobuf JSON parser refuses a field it does not know (Connect `unknown`, HTTP
# 500): `Message type "..." has no field named "fooBar" at "LaunchJobRequest"`.
UNKNOWN_FIELD = "has no field named"


class CurrentUser(WireMessage):
    """iris.job.GetCurrentUserResponse."""

    user_id: str = number(1, "")
    role: str = number(2, "")


class ChildrenQuery(StrEnum):
    CHILDREN_SCOPE = "scope CHILDREN"
    ID_PREFIX = "job_id_prefix"


class ChildListing(list[JobStatus]):
    """The direct children list_children read (a list), and how many it could not read:
    `unseen` jobs the controller counted under the query and no page showed (0: every one).
    """

    def __init__(self, jobs: list[JobStatus], *, total: int, unseen: int = 0) -> None:
        super().__init__(jobs)
        self.total = total
        self.unseen = unseen

    @property
    def complete(self) -> bool:
        return self.unseen == 0

    def describe(self) -> str:
        """What the listing covers, in words: `sees 5,500 of 12,345 children`."""
        if self.complete:
            return f"sees all {len(self):,} children"
        return f"sees {len(self):,} of {self.total:,} children"


def _offset_refused(err: IrisError) -> bool:
    """The controller's refusal of an offset past its cap (INVALID_ARGUMENT, like a scope it
    does not know, but not that)."""
    text = str(err)
    return "MAX_LIST_JOBS_OFFSET" in text or "offset" in text.lower()


class LogRoute(StrEnum):
    """In the order they are tried: oldest controllers first, so each finds its own quickly."""

    GET_TASK_LOGS = connect.GET_TASK_LOGS
    FETCH_LOGS = connect.FETCH_LOGS
    FINELOG_FETCH_LOGS = connect.FINELOG_FETCH_LOGS
    PROXIED_FETCH_LOGS = connect.PROXIED_FETCH_LOGS


LOG_ROUTES = tuple(LogRoute)


class LogPage(BaseModel):
    """One read of a task's or job's log, whichever method served it."""

    model_config = ConfigDict(frozen=True)

    entries: list[LogEntry] = Field(default_factory=list)
    # Pass back as `cursor` to read only what came after this page.
    cursor: int = 0
    route: LogRoute


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


# iris's rule: an id whose last component is numeric names a task.
_TASK_ID = re.compile(r"/\d+$")


@dataclass
class _Paging:
    """One listing's reads: their page size and deadline, and the jobs they found so far."""

    page_size: int
    deadline_s: float | None
    found: dict[str, JobStatus] = field(default_factory=dict)

    def add(self, jobs: list[JobStatus]) -> None:
        for job in jobs:
            self.found.setdefault(job.job_id, job)


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
    if _TASK_ID.search(id_):
        if attempt_id >= 0:
            return f"{id_}:{attempt_id}", MatchScope.EXACT
        return f"{id_}:", MatchScope.PREFIX
    job = id_.rstrip("/")
    if include_children:
        return f"{job}/", MatchScope.PREFIX
    attempt = str(attempt_id) if attempt_id >= 0 else ".*"
    return rf"{re.escape(job)}/\d+:{attempt}", MatchScope.REGEX


class IrisController(AbstractAsyncContextManager["IrisController"]):
    """The iris controller at `base_url` (`https://host[:port]`). One instance per controller;
    use `async with` or call `aclose()`."""

    def __init__(
        self,
        base_url: str,
        *,
        token: IrisToken | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        post: Post | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r} must be an http:// or https:// URL")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        # Asks for and decodes gzip and deflate; iris compresses responses only when asked.
        # `post`: another way to make the calls (a test's); closing this client leaves it.
        self._own_post: Http1Post | None = None
        if post is None:
            post = self._own_post = Http1Post()
        self._post: Post = post
        self._children_query: ChildrenQuery | None = None
        self._log_route: LogRoute | None = None
        # The caller's user (GetCurrentUser); "" when the controller has no such method.
        self._user: str | None = None

    def __repr__(self) -> str:
        return f"IrisController(base_url={self._base_url!r}, token={self._token!r})"

    @property
    def log_route(self) -> LogRoute | None:
        """The log method that last worked (None until a log read succeeded)."""
        return self._log_route

    @property
    def children_query(self) -> ChildrenQuery | None:
        return self._children_query

    async def aclose(self) -> None:
        if self._own_post is not None:
            await self._own_post.aclose()

    async def __aexit__(self, *exc_info: object) -> None:
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
    ) -> ChildListing:
        """The direct child jobs of `job_id`, paged as the module says; any the pages did not
        show are counted in the listing's `unseen` (ChildListing.describe says so)."""
        paging = _Paging(max(1, min(page_size, PAGE_SIZE)), deadline_s)
        if self._children_query is not ChildrenQuery.ID_PREFIX:
            query = JobQuery(scope=JobQueryScope.CHILDREN, parent_job_id=job_id)
            try:
                first = await self._list_page(query, 0, paging)
            except IrisUnimplemented:
                self._children_query = ChildrenQuery.ID_PREFIX
            except IrisInvalidArgument as err:
                if _offset_refused(err):
                    raise  # the paging, not the scope: never a reason to give the scope up
                self._children_query = ChildrenQuery.ID_PREFIX
            else:
                self._children_query = ChildrenQuery.CHILDREN_SCOPE
                return await self._children(job_id, query, first, paging)
        query = JobQuery(scope=JobQueryScope.ALL, job_id_prefix=job_id.rstrip("/") + "/")
        first = await self._list_page(query, 0, paging)
        return await self._children(job_id, query, first, paging)

    async def _children(
        self, job_id: str, query: JobQuery, first: ListJobsResponse, paging: _Paging
    ) -> ChildListing:
        counted = await self._collect(query, first, paging)
        unseen = max(0, counted - len(paging.found))
        direct = [job for job in paging.found.values() if is_direct_child(job_id, job)]
        return ChildListing(direct, total=len(direct) + unseen, unseen=unseen)

    async def _collect(self, query: JobQuery, first: ListJobsResponse, paging: _Paging) -> int:
        """Adds the jobs `query` matches to `paging`; how many the controller counts."""
        paging.add(first.jobs)
        if not first.has_more or not first.jobs:
            return max(first.total_count, len(paging.found))
        reach = (MAX_OFFSET // paging.page_size + 1) * paging.page_size
        if not first.total_count or first.total_count <= reach:
            more = await self._pages(query, len(first.jobs), paging)
            # A controller that gives no count and still has more: at least one unseen.
            return max(first.total_count, len(paging.found) + int(more))
        for state in LIST_JOBS_STATE_FILTERS:
            await self._both_ends(query.model_copy(update={"state_filter": state}), paging)
        return first.total_count

    async def _both_ends(self, query: JobQuery, paging: _Paging) -> None:
        """The jobs of `query` by name, first to last as far as offsets reach, then last to
        first for the ones that were beyond."""
        ascending = query.model_copy(
            update={"sort_field": JobSortField.NAME, "sort_direction": SortDirection.ASC}
        )
        first = await self._list_page(ascending, 0, paging)
        paging.add(first.jobs)
        if not first.has_more or not first.jobs:
            return
        seen = {job.job_id for job in first.jobs}
        if not await self._pages(ascending, len(first.jobs), paging, seen):
            return
        descending = ascending.model_copy(update={"sort_direction": SortDirection.DESC})
        left = first.total_count - len(seen) if first.total_count else None
        await self._pages(descending, 0, paging, want=left)

    async def _pages(
        self,
        query: JobQuery,
        offset: int,
        paging: _Paging,
        seen: set[str] | None = None,
        want: int | None = None,
    ) -> bool:
        """Pages of `query` from `offset` into `paging` (and their ids into `seen`), until the
        last page, `want` jobs read, or the deepest offset; whether the query had more."""
        read = 0
        for _ in range(MAX_PAGES):
            if offset > MAX_OFFSET or (want is not None and read >= want):
                return True
            try:
                page = await self._list_page(query, offset, paging)
            except IrisInvalidArgument as err:
                if _offset_refused(err):
                    return True  # a controller whose cap is lower: the rest is not reachable
                raise
            paging.add(page.jobs)
            if seen is not None:
                seen.update(job.job_id for job in page.jobs)
            if not page.has_more or not page.jobs:
                return False
            offset += len(page.jobs)
            read += len(page.jobs)
        return True

    async def _list_page(self, query: JobQuery, offset: int, paging: _Paging) -> ListJobsResponse:
        page = query.model_copy(update={"offset": offset, "limit": paging.page_size})
        return await self._call(
            connect.LIST_JOBS,
            ListJobsRequest(query=page),
            ListJobsResponse,
            deadline_s=paging.deadline_s,
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
        Raises IrisAlreadyExists with the request's name.

        A bare name (`tokenize`) is sent as the caller's root job, `/<user>/tokenize`, with
        the user GetCurrentUser names: iris takes only a canonical `/<user>/<job>` (a bare
        one fails INTERNAL), and puts an authenticated caller's own user in front anyway. A
        controller without GetCurrentUser gets the name as given."""
        if request.name and not request.name.startswith("/"):
            user = await self.current_user(deadline_s=deadline_s)
            if user:
                request = request.model_copy(update={"name": f"/{user}/{request.name}"})
        response = await self._call(
            connect.LAUNCH_JOB, request, LaunchJobResponse, deadline_s=deadline_s, name=request.name
        )
        return response.job_id

    async def current_user(self, *, deadline_s: float | None = None) -> str | None:
        """The caller's user as the controller knows it (`anonymous` without auth), or None
        from a controller without GetCurrentUser. Asked once per client."""
        if self._user is None:
            try:
                found = await self._call(
                    GET_CURRENT_USER, Empty(), CurrentUser, deadline_s=deadline_s
                )
            except IrisUnimplemented:
                found = CurrentUser()
            except IrisTimedOut as err:
                # Nothing was launched yet: not a launch that may have happened.
                raise IrisUnavailable(str(err), code=err.code) from None
            self._user = found.user_id
        return self._user or None

    # ------------------------------------------------------------- logs

    async def task_logs(
        self,
        id_: str,
        *,
        attempt_id: int = -1,
        cursor: int = 0,
        max_lines: int = 0,
        tail: bool = False,
        min_level: str = "",
        deadline_s: float | None = None,
    ) -> LogPage:
        """Log lines of a task (`/user/job/0`) or of a job's tasks. attempt_id -1 is every
        attempt. max_lines 0 is the server's default (10000 for GetTaskLogs, 1000 for
        FetchLogs)."""
        routes = LOG_ROUTES[LOG_ROUTES.index(self._log_route) if self._log_route else 0 :]
        for route in routes:
            try:
                if route is LogRoute.GET_TASK_LOGS:
                    request = GetTaskLogsRequest(
                        id=id_,
                        include_children=False,
                        since_ms=0,
                        max_total_lines=max_lines,
                        substring="",
                        attempt_id=attempt_id,
                        min_level=min_level,
                        cursor=cursor,
                        tail=tail,
                    )
                    got = await self._call(
                        route.value, request, GetTaskLogsResponse, deadline_s=deadline_s
                    )
                    entries, at = [e for batch in got.task_logs for e in batch.logs], got.cursor
                else:
                    source, scope = fetch_logs_source(id_, attempt_id, include_children=False)
                    fetch = FetchLogsRequest(
                        source=source,
                        match_scope=scope,
                        since_ms=0,
                        cursor=cursor,
                        substring="",
                        max_lines=max_lines,
                        tail=tail,
                        min_level=min_level,
                    )
                    fetched = await self._call(
                        route.value, fetch, FetchLogsResponse, deadline_s=deadline_s
                    )
                    entries, at = fetched.entries, fetched.cursor
            except IrisUnimplemented:
                if route is routes[-1]:
                    raise
                continue
            self._log_route = route
            # A server with nothing new may answer cursor 0; the caller's position stands.
            return LogPage(entries=entries, cursor=max(at, cursor), route=route)
        raise AssertionError("the last route answers or raises")

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
    ) -> R:
        seconds = deadline_s or self._timeout
        target = self._base_url
        body = json.dumps(to_wire(request), separators=(",", ":"))
        try:
            answer = await self._post(
                target + path, body.encode("utf-8"), self._headers(seconds), seconds
            )
        except NoAnswer as exc:
            if exc.timed_out:
                raise IrisTimedOut(
                    f"{path} at {target}: {exc}", code=Code.DEADLINE_EXCEEDED
                ) from None
            reason = self._scrubbed(str(exc))
            raise IrisUnavailable(f"{path} at {target}: {reason}", code=Code.UNAVAILABLE) from None
        if answer.status != 200:
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
        self, answer: Answer, path: str, target: str, *, job_id: str, name: str
    ) -> IrisError:
        code, message = connect.code_of_http_status(answer.status), ""
        details: ErrorDetails | None = None
        body = _connect_error_body(answer)
        if body is not None:
            code, message = body.connect_code, self._scrubbed(body.message)
            found = body.error_details()
            if found is not None:
                details = ErrorDetails(
                    exception_type=self._scrubbed(found.exception_type),
                    message=self._scrubbed(found.message),
                )
            if code is Code.UNKNOWN and UNKNOWN_FIELD in message:
                # iris's JSON parser refusing a field it does not know: the request itself is
                # wrong, and sending it again would only be refused again.
                code = Code.INVALID_ARGUMENT
        return iris_error(
            code,
            message,
            method=path,
            target=target,
            http_status=answer.status,
            details=details,
            job_id=job_id,
            name=name,
            token_present=self._token is not None and self._token.present,
        )


def _connect_error_body(answer: Answer) -> ConnectErrorBody | None:
    """The Connect error in a failed answer, or None when the body is something else (a
    proxy's page, a server without the route)."""
    if "json" not in answer.content_type:
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
