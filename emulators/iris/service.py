"""The Connect-JSON face of the emulator: ControllerService and LogService.FetchLogs.

Each handler parses the request into wire/iris's model, asks the Controller, and answers
with the response model's protobuf JSON (camelCase, enum names, int64 as strings). Failures
are Connect error bodies with the status Connect's table gives each code.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ValidationError

from emulators.iris.config import SCENARIO_ENV
from emulators.iris.dumps import dump_for
from emulators.iris.launch import launch_refusal, status_request
from emulators.iris.logs import Line, level_rank
from emulators.iris.state import Controller, IrisError, JobView, RootJob, TaskView
from emulators.iris.timeline import TaskMoment
from keeper.wire.iris import messages as msg
from keeper.wire.iris.codec import from_wire, to_wire
from keeper.wire.iris.connect import (
    CONTROLLER_SERVICE,
    FINELOG_LOG_SERVICE,
    HTTP_STATUS,
    LOG_SERVER_PROXY,
    LOG_SERVICE,
    TIMEOUT_HEADER,
    Code,
    ConnectErrorBody,
    ErrorDetails,
)
from keeper.wire.iris.enums import (
    JobQueryScope,
    JobSortField,
    JobState,
    LogLevel,
    MatchScope,
    SortDirection,
    TaskState,
)

if TYPE_CHECKING:
    from emulators.iris.emulator import IrisEmulator


def connect_error(code: str, message: str, details: ErrorDetails | None = None) -> web.Response:
    parsed = Code.parse(code)
    body = ConnectErrorBody.of(parsed, message, details).to_json()
    return web.json_response(body, status=HTTP_STATUS[parsed])


def iris_error_response(method: str, err: IrisError) -> web.Response:
    """An IrisError as the controller answers it. One standing for a Python exception in a
    handler (`exception_type` set) is what iris's interceptor makes of it: `internal`, the
    message prefixed `RPC <method>: `, the exception's type in ErrorDetails."""
    if not err.exception_type:
        return connect_error(err.code, err.message)
    message = f"RPC {method}: {err.message}"
    details = ErrorDetails(exception_type=err.exception_type, message=message)
    return connect_error(err.code, message, details=details)


@dataclass(frozen=True)
class Caller:
    user: str
    # iris's role for the caller: without auth everyone is an admin; a token's user is not.
    role: str = "admin"

    @property
    def admin(self) -> bool:
        return self.role == "admin"


# iris.cluster.types' JobName parser, whose ValueError the controller answers `internal`.
CANONICAL = "Job name must use canonical '/<user>/<job>[...]' format"


def parse_job_name(name: str) -> list[str]:
    """The components of a canonical job name (`/<user>/<job>[/...]`), or IrisError as the
    controller refuses the name: a ValueError in its handler, so `internal`."""
    parts = name[1:].split("/") if name.startswith("/") else []
    if len(parts) < 2:
        raise IrisError("internal", f"{CANONICAL}: {name}", "builtins.ValueError")
    if any(not part.strip() for part in parts):
        raise IrisError(
            "internal",
            f"Job name contains empty or whitespace-only component: {name}",
            "builtins.ValueError",
        )
    return parts


# ----------------------------------------------------------------- wire building


def _ts(root: RootJob, t: float | None) -> msg.Timestamp | None:
    return None if t is None else msg.Timestamp(epoch_ms=int(root.wall_of(t) * 1000))


# The earlier attempts ListTasks shows beside the current one: the latest of each of these
# states (the controller's listing reads no more).
_LISTED_FAILURES = frozenset({"FAILED", "WORKER_FAILED"})


def _listed(m: TaskMoment) -> list[TaskMoment]:
    """The ended attempts ListTasks returns: the current one (a task PENDING for its retry
    still points at the attempt that ended), and of the earlier ones the latest FAILED and
    the latest WORKER_FAILED, oldest first. GetTaskStatus returns them all."""
    latest = {h.state: h for h in m.history if h.state in _LISTED_FAILURES}
    kept = {h.attempt: h for h in latest.values()}
    kept.update({h.attempt: h for h in m.history if h.attempt == m.attempt})
    return [kept[attempt] for attempt in sorted(kept)]


def task_status(root: RootJob, task: TaskView, listing: bool = False) -> msg.TaskStatus:
    """A task as GetTaskStatus shows it (every attempt), or, `listing`, as ListTasks does:
    its current attempt and only the latest FAILED and WORKER_FAILED of the earlier ones."""
    m = task.moment
    earlier = _listed(m) if listing else m.history
    # The current attempt is listed once the task left PENDING.
    shown = [*earlier, m] if m.state != "PENDING" else earlier
    attempts = [
        msg.TaskAttempt(
            attempt_id=h.attempt,
            worker_id=task.host,
            state=TaskState[h.state],
            exit_code=h.exit_code or 0,
            error=h.error,
            started_at=_ts(root, h.started),
            finished_at=_ts(root, h.finished),
        )
        for h in shown
    ]
    fields: dict[str, Any] = {}
    if m.state != "PENDING":
        fields["worker_id"] = task.host
        fields["worker_address"] = f"{task.host}.iris.internal:10001"
    if m.started is not None:
        fields["started_at"] = _ts(root, m.started)
    if m.finished is not None:
        fields["finished_at"] = _ts(root, m.finished)
    if m.exit_code is not None:
        fields["exit_code"] = m.exit_code
    if m.error:
        fields["error"] = m.error
    return msg.TaskStatus(
        task_id=task.task_id,
        state=TaskState[m.state],
        current_attempt_id=m.attempt,
        attempts=attempts,
        container_id=f"iris-{abs(hash((task.task_id, m.attempt))) % 16**12:012x}",
        **fields,
    )


_PREEMPTION_ENDS = frozenset({"PREEMPTED", "WORKER_FAILED", "KILLED"})


def attempt_counts(view: JobView) -> tuple[int, int]:
    """(failure_count, preemption_count) of a job, as the controller derives them from the
    attempts: those that ended FAILED, and those that had started and ended PREEMPTED,
    WORKER_FAILED or KILLED (a live attempt stopped from outside, a user's TerminateJob
    among them, is a preemption)."""
    failures = preemptions = 0
    for task in view.tasks:
        m = task.moment
        ended = [*m.history, m] if m.finished is not None else list(m.history)
        failures += sum(1 for a in ended if a.state == "FAILED")
        preemptions += sum(
            1 for a in ended if a.state in _PREEMPTION_ENDS and a.started is not None
        )
    return failures, preemptions


_ENDED_BADLY = frozenset({"FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE"})


def job_status(root: RootJob, view: JobView) -> msg.JobStatus:
    """A JobStatus as the controller writes it: `taskStateCounts` keyed by the lowercase
    state, `tasks` never filled (ListTasks lists them)."""
    counts: dict[str, int] = {}
    for task in view.tasks:
        key = task.moment.state.lower()
        counts[key] = counts.get(key, 0) + 1
    state = view.state
    starts = [t.moment.started for t in view.tasks if t.moment.started is not None]
    ends = [t.moment.finished for t in view.tasks if t.moment.finished is not None]
    errors = [t.moment.error for t in view.tasks if t.moment.error]
    fields: dict[str, Any] = {}
    if starts:
        fields["started_at"] = _ts(root, min(starts))
    if (state == "SUCCEEDED" or state in _ENDED_BADLY) and ends:
        fields["finished_at"] = _ts(root, max(ends))
    if errors and state in _ENDED_BADLY:
        fields["error"] = errors[0]
    if view.parent:
        fields["parent_job_id"] = view.parent
    failures, preemptions = attempt_counts(view)
    return msg.JobStatus(
        job_id=view.job_id,
        state=JobState[state],
        name=view.name,
        submitted_at=_ts(root, view.submitted),
        task_state_counts=counts,
        task_count=len(view.tasks),
        completed_count=sum(1 for t in view.tasks if t.moment.state == "SUCCEEDED"),
        has_children=view.has_children,
        failure_count=failures,
        preemption_count=preemptions,
        submitting_user=root.user,
        **fields,
    )


def log_entry(root: RootJob, line: Line) -> dict[str, Any]:
    entry = msg.LogEntry(
        timestamp=msg.Timestamp(epoch_ms=int(root.wall_of(line.t) * 1000)),
        source=line.source,
        data=line.data,
        attempt_id=line.attempt_id,
        level=LogLevel[line.level],
        key=f"{line.task_id}:{line.attempt_id}",
        seq=line.id,
    )
    wire = to_wire(entry)
    if root.scenario.level_style == "string":
        # The older logging.proto: level is a plain string.
        wire["level"] = line.level
    return wire


# ----------------------------------------------------------------- the handlers


class Service:
    def __init__(self, emulator: IrisEmulator) -> None:
        self.emu = emulator

    @property
    def ctl(self) -> Controller:
        return self.emu.controller

    # --- controller methods

    async def list_jobs(self, req: msg.ListJobsRequest, caller: Caller) -> BaseModel:
        """As the controller pages: a limit of 0, below 0 or above 500 reads as 500, an
        offset above 5000 is refused, an unknown state_filter matches nothing."""
        q = req.query or msg.JobQuery()
        limit = q.limit if 0 < q.limit <= msg.LIST_JOBS_MAX_LIMIT else msg.LIST_JOBS_MAX_LIMIT
        offset = max(q.offset, 0)
        if offset > msg.LIST_JOBS_MAX_OFFSET:
            raise IrisError("invalid_argument", msg.list_jobs_offset_refusal(offset))
        wanted_state = q.state_filter.lower()
        if wanted_state and wanted_state not in msg.LIST_JOBS_STATE_FILTERS:
            return msg.ListJobsResponse(total_count=0, has_more=False)
        if q.scope == JobQueryScope.CHILDREN and not q.parent_job_id:
            raise IrisError(
                "invalid_argument", "query.parent_job_id is required for JOB_QUERY_SCOPE_CHILDREN"
            )
        name_like = _like(f"%{q.name_filter.lower()}%") if q.name_filter else None
        prefix = q.job_id_prefix.lower()
        rows: list[tuple[RootJob, JobView]] = []
        for root, view in self.ctl.all_jobs():
            if q.scope == JobQueryScope.ROOTS and view.parent:
                continue
            if q.scope == JobQueryScope.CHILDREN and view.parent != q.parent_job_id:
                continue
            if name_like is not None and not name_like.fullmatch(view.job_id.lower()):
                continue
            if wanted_state and view.state.lower() != wanted_state:
                continue
            if prefix and not view.job_id.lower().startswith(prefix):
                continue
            rows.append((root, view))
        field = q.sort_field if q.sort_field != JobSortField.UNSPECIFIED else JobSortField.DATE
        descending = (
            q.sort_direction == SortDirection.DESC
            if q.sort_direction != SortDirection.UNSPECIFIED
            else field == JobSortField.DATE
        )
        rows.sort(key=lambda rv: (_sort_key(field, *rv), rv[1].job_id), reverse=descending)
        page = rows[offset : offset + limit]
        # A repeated field has no presence: an empty page has no `jobs` at all.
        jobs = {"jobs": [job_status(root, view) for root, view in page]} if page else {}
        return msg.ListJobsResponse(
            total_count=len(rows), has_more=offset + limit < len(rows), **jobs
        )

    async def get_job_status(self, req: msg.GetJobStatusRequest, caller: Caller) -> BaseModel:
        root, view = self.ctl.find_job(req.job_id)
        fields: dict[str, Any] = {}
        if view.job_id == root.job_id:
            fields["request"] = msg.LaunchJobRequest.model_validate(status_request(root.stored))
        return msg.GetJobStatusResponse(job=job_status(root, view), **fields)

    async def get_job_state(self, req: msg.GetJobStateRequest, caller: Caller) -> BaseModel:
        states: dict[str, JobState] = {}
        for job_id in req.job_ids:
            try:
                _, view = self.ctl.find_job(job_id)
            except IrisError:
                continue
            states[job_id] = JobState[view.state]
        return msg.GetJobStateResponse(states=states)

    async def list_tasks(self, req: msg.ListTasksRequest, caller: Caller) -> BaseModel:
        """A job's tasks, as the controller lists them: nothing (no not_found) for a job it
        does not know."""
        if not req.job_id:
            raise IrisError("invalid_argument", "job_id is required")
        parse_job_name(req.job_id)
        try:
            root, view = self.ctl.find_job(req.job_id)
        except IrisError as err:
            if err.code != "not_found":
                raise
            return msg.ListTasksResponse()
        return msg.ListTasksResponse(tasks=[task_status(root, t, listing=True) for t in view.tasks])

    async def get_task_status(self, req: msg.GetTaskStatusRequest, caller: Caller) -> BaseModel:
        root, task = self.ctl.find_task(req.task_id)
        return msg.GetTaskStatusResponse(task=task_status(root, task))

    async def terminate_job(self, req: msg.TerminateJobRequest, caller: Caller) -> BaseModel:
        try:
            killed = self.ctl.terminate(req.job_id)
        except IrisError as err:
            self.ctl.record("TerminateJob", req.job_id, caller.user, outcome=err.code)
            raise
        self.ctl.record("TerminateJob", req.job_id, caller.user, outcome="ok", killed=killed)
        return msg.Empty()

    async def get_current_user(self, req: msg.Empty, caller: Caller) -> dict[str, Any]:
        return {"userId": caller.user, "role": caller.role}

    async def launch_job(self, req: msg.LaunchJobRequest, caller: Caller) -> BaseModel:
        """As the controller: only a canonical `/<user>/<job>` (a bare name is a ValueError
        in its handler, `internal`); a caller who is not an admin launches a root job under
        its own user whatever the name says."""
        raw = to_wire(req)
        name = req.name
        if not name:
            raise IrisError("invalid_argument", "Job name is required")
        try:
            parts = parse_job_name(name)
        except IrisError as err:
            self.ctl.record("LaunchJob", name, caller.user, outcome=err.code, request=raw)
            raise
        if len(parts) != 2:
            raise IrisError("invalid_argument", f"the emulator launches root jobs only: {name}")
        job_id = name if caller.admin else f"/{caller.user}/{parts[1]}"
        env = req.environment.env_vars if req.environment else {}
        scenario = self.ctl.next_scenario
        if SCENARIO_ENV in env:
            try:
                scenario = self.emu.scenario(env[SCENARIO_ENV])
            except LookupError as exc:
                raise IrisError("invalid_argument", str(exc)) from None
        try:
            self.ctl.launch(job_id, caller.user, raw, scenario)
        except IrisError as err:
            self.ctl.record("LaunchJob", job_id, caller.user, outcome=err.code, request=raw)
            raise
        self.ctl.record(
            "LaunchJob", job_id, caller.user, outcome="ok", scenario=scenario.name, request=raw
        )
        return msg.LaunchJobResponse(job_id=job_id)

    async def profile_task(self, req: msg.ProfileTaskRequest, caller: Caller) -> BaseModel:
        root, task = self.ctl.find_task(req.target)
        moment = root.moment(self.ctl.now_t(root))
        if not moment.reachable:
            return msg.ProfileTaskResponse(
                error=f"failed to reach worker {task.host}: connection refused"
            )
        if task.moment.state != "RUNNING":
            return msg.ProfileTaskResponse(
                error=f"task {task.task_id} is not running ({task.moment.state})"
            )
        kind = req.profile_type
        if kind is None or kind.threads is None:
            return msg.ProfileTaskResponse(error="the emulator serves thread dumps only")
        text = dump_for(task.moment.dump, task.dump_name)
        return msg.ProfileTaskResponse(profile_data=text.encode())

    async def exec_in_container(self, req: msg.ExecInContainerRequest, caller: Caller) -> BaseModel:
        code, out, err, error = self.ctl.exec_in(req.task_id, list(req.command))
        fields: dict[str, Any] = {"error": error} if error else {}
        if not error:
            fields.update(exit_code=code, stdout=out, stderr=err)
        return msg.ExecInContainerResponse(**fields)

    async def get_task_logs(self, req: msg.GetTaskLogsRequest, caller: Caller) -> dict[str, Any]:
        target = req.id.rstrip("/")
        is_task = target.rsplit("/", 1)[-1].isdigit()
        root = self.ctl.root_of(target)
        if is_task:
            self.ctl.find_task(target)
        else:
            self.ctl.find_job(target)

        def keep(line: Line) -> bool:
            if is_task:
                mine = line.task_id == target
            else:
                below = req.include_children and line.task_id.startswith(target + "/")
                mine = line.task_id.rsplit("/", 1)[0] == target or below
            if not mine or req.attempt_id not in (-1, line.attempt_id):
                return False
            return _common_filters(line, req.substring, req.min_level)

        limit = req.max_total_lines or 10_000
        lines = self.ctl.lines(
            root,
            keep,
            after_id=req.cursor or None,
            since_t=root.t_of_wall(req.since_ms / 1000) if req.since_ms else None,
            limit=limit,
            tail=req.tail,
        )
        body: dict[str, Any] = {
            "taskLogs": [{"taskId": req.id, "logs": [log_entry(root, line) for line in lines]}],
            "truncated": len(lines) >= limit,
            "cursor": str(max([line.id for line in lines], default=req.cursor)),
        }
        if req.include_children:
            t = self.ctl.now_t(root)
            body["childJobStatuses"] = [
                to_wire(job_status(root, view))
                for view in root.jobs(t)
                if view.job_id.startswith(target + "/")
            ]
        return body

    async def fetch_logs(self, req: msg.FetchLogsRequest, caller: Caller) -> dict[str, Any]:
        scope = req.match_scope
        source = req.source

        pattern: re.Pattern[str] | None = None
        if scope not in (MatchScope.EXACT, MatchScope.PREFIX):
            try:
                pattern = re.compile(source)
            except re.error:
                raise IrisError("invalid_argument", f"bad regex {source!r}") from None

        def matches(key: str) -> bool:
            if scope == MatchScope.EXACT:
                return key == source
            if scope == MatchScope.PREFIX:
                return key.startswith(source)
            assert pattern is not None
            return pattern.fullmatch(key) is not None

        def keep(line: Line) -> bool:
            key = f"{line.task_id}:{line.attempt_id}"
            return matches(key) and _common_filters(line, req.substring, req.min_level)

        # Every task of a root job is named under it, so a source whose matches all start
        # outside it matches none of its lines: its log is not played at all, as iris's store
        # finds keys by its index rather than by reading every job's lines.
        starts = source if pattern is None else literal_prefix(source)

        def may_hold(root: RootJob) -> bool:
            under = f"{root.job_id}/"
            return starts.startswith(under) or under.startswith(starts)

        limit = req.max_lines or 1000
        found: list[tuple[RootJob, Line]] = []
        for root in [r for r in self.ctl.jobs.values() if may_hold(r)]:
            lines = self.ctl.lines(
                root,
                keep,
                after_id=req.cursor or None,
                since_t=root.t_of_wall(req.since_ms / 1000) if req.since_ms else None,
                limit=limit,
                tail=req.tail,
            )
            found.extend((root, line) for line in lines)
        found.sort(key=lambda rl: (rl[0].wall_of(rl[1].t), rl[1].id))
        found = found[-limit:] if req.tail else found[:limit]
        return {
            "entries": [log_entry(root, line) for root, line in found],
            "cursor": str(max([line.id for _, line in found], default=req.cursor)),
        }


_SPECIAL = frozenset(".^$*+?{}[]|()")


def literal_prefix(pattern: str) -> str:
    """Text that every full match of the regex `pattern` starts with: its leading literal
    characters (escaped punctuation included, as re.escape writes it). Empty when a `|` may
    offer another start; a literal that a quantifier makes optional is not counted."""
    if "|" in pattern:
        return ""
    out: list[str] = []
    at = 0
    while at < len(pattern):
        char = pattern[at]
        if char == "\\" and at + 1 < len(pattern) and not pattern[at + 1].isalnum():
            out.append(pattern[at + 1])
            at += 2
        elif char == "\\" or char in _SPECIAL:
            break
        else:
            out.append(char)
            at += 1
    if at < len(pattern) and pattern[at] in "*?{" and out:
        out.pop()
    return "".join(out)


def _like(pattern: str) -> re.Pattern[str]:
    """SQL LIKE as iris's name_filter uses it: `%` any run, `_` any one character."""
    parts = (".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL)


def _sort_key(field: JobSortField, root: RootJob, view: JobView) -> float | str:
    if field == JobSortField.NAME:
        return view.job_id.lower()
    if field == JobSortField.STATE:
        return float(JobState[view.state].value)
    if field in (JobSortField.FAILURES, JobSortField.PREEMPTIONS):
        failures, preemptions = attempt_counts(view)
        return float(failures if field == JobSortField.FAILURES else preemptions)
    return root.launched_scene + view.submitted


def _common_filters(line: Line, substring: str, min_level: str) -> bool:
    if substring and substring not in line.data:
        return False
    return not (min_level and level_rank(line.level) < level_rank(min_level))


# method -> (request model, the Service method that answers it)
CONTROLLER_METHODS: dict[str, tuple[type[BaseModel], str]] = {
    "ListJobs": (msg.ListJobsRequest, "list_jobs"),
    "GetJobStatus": (msg.GetJobStatusRequest, "get_job_status"),
    "GetJobState": (msg.GetJobStateRequest, "get_job_state"),
    "ListTasks": (msg.ListTasksRequest, "list_tasks"),
    "GetTaskStatus": (msg.GetTaskStatusRequest, "get_task_status"),
    "TerminateJob": (msg.TerminateJobRequest, "terminate_job"),
    "LaunchJob": (msg.LaunchJobRequest, "launch_job"),
    "ProfileTask": (msg.ProfileTaskRequest, "profile_task"),
    "ExecInContainer": (msg.ExecInContainerRequest, "exec_in_container"),
    "GetTaskLogs": (msg.GetTaskLogsRequest, "get_task_logs"),
    "GetCurrentUser": (msg.Empty, "get_current_user"),
}
LOG_METHODS: dict[str, tuple[type[BaseModel], str]] = {
    "FetchLogs": (msg.FetchLogsRequest, "fetch_logs"),
}
# The log service at the controller's own paths (the `fetch_logs` route, older controllers)
# answers under iris's package and under finelog's, as the two servers did.
SERVICES = {
    CONTROLLER_SERVICE: CONTROLLER_METHODS,
    LOG_SERVICE: LOG_METHODS,
    FINELOG_LOG_SERVICE: LOG_METHODS,
}


def _offered(emulator: IrisEmulator, svc: str, method: str, proxied: bool) -> bool:
    """Whether the configured log routes (config.log_routes) serve this method."""
    routes = emulator.config.log_routes
    if proxied:
        return "proxy" in routes
    if svc in (LOG_SERVICE, FINELOG_LOG_SERVICE):
        return "fetch_logs" in routes
    return method != "GetTaskLogs" or "get_task_logs" in routes


def _absent(svc: str) -> web.Response:
    """What the controller answers for a route it does not have: its Connect app's 404 with
    no body for a ControllerService method it lacks (GetTaskLogs), the web server's plain
    "Not Found" for any other path (a LogService at the controller's own paths)."""
    if svc == CONTROLLER_SERVICE:
        return web.Response(status=404)
    return web.Response(status=404, text="Not Found")


def routes(emulator: IrisEmulator) -> list[web.RouteDef]:
    service = Service(emulator)

    async def rpc(request: web.Request) -> web.StreamResponse:
        svc, method = request.match_info["service"], request.match_info["method"]
        proxied = request.path.startswith(LOG_SERVER_PROXY + "/")
        entry = SERVICES.get(svc, {}).get(method)
        if proxied and svc != FINELOG_LOG_SERVICE:
            entry = None
        if entry is None or not _offered(emulator, svc, method, proxied):
            return _absent(svc)
        user = emulator.authenticate(request)
        if user is None:
            return connect_error("unauthenticated", "missing or invalid bearer token")
        # A fault stands for the controller failing: its proxy to the log server goes with it.
        refused = await emulator.faults.apply(emulator, method, _deadline(request))
        if refused is not None:
            return refused
        model, attr = entry
        try:
            raw = await request.read()
            body = json.loads(raw) if raw.strip() else {}
        except (json.JSONDecodeError, ValueError) as exc:
            return connect_error("invalid_argument", f"bad {method} request: {exc}")
        if method == "LaunchJob" and isinstance(body, dict):
            # The controller's JSON parser refuses a field it does not know (`reservation`
            # among them) before anything else: Connect `unknown`, HTTP 500.
            refusal = launch_refusal(body)
            if refusal is not None:
                name = body.get("name") if isinstance(body.get("name"), str) else ""
                emulator.controller.record(
                    "LaunchJob", name, user, outcome="unknown", request=body, error=refusal
                )
                return connect_error("unknown", refusal)
        try:
            parsed = from_wire(model, body)
        except (ValidationError, ValueError, TypeError) as exc:
            return connect_error("invalid_argument", f"bad {method} request: {exc}")
        emulator.controller.settle_all()
        caller = Caller(user, "user" if emulator.config.tokens else "admin")
        try:
            answer = await getattr(service, attr)(parsed, caller)
        except IrisError as err:
            return iris_error_response(method, err)
        payload = answer if isinstance(answer, dict) else to_wire(answer)
        return web.json_response(payload)

    return [
        web.post("/{service:[a-z.]+[A-Za-z]+}/{method}", rpc),
        web.post(LOG_SERVER_PROXY + "/{service:[a-z.]+[A-Za-z]+}/{method}", rpc),
    ]


class Faults:
    """Controller RPCs that hang or answer unavailable: set through the control API, or by
    a job whose scenario (rpc-timeouts) is in its stretch."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.until_wall: float | None = None
        self.methods: frozenset[str] | None = None

    def set(self, mode: str | None, until_wall: float | None, methods: list[str] | None) -> None:
        self.mode = mode
        self.until_wall = until_wall
        self.methods = frozenset(methods) if methods else None

    def current(self, emulator: IrisEmulator, method: str) -> str | None:
        wall = emulator.controller.clock.wall.now()
        live = self.mode and (self.until_wall is None or wall < self.until_wall)
        if live and (self.methods is None or method in self.methods):
            return self.mode
        ctl = emulator.controller
        for root in ctl.jobs.values():
            fault = root.moment(ctl.now_t(root)).rpc_fault
            if fault is not None:
                return fault
        return None

    async def apply(
        self, emulator: IrisEmulator, method: str, client_deadline: float | None
    ) -> web.Response | None:
        """None to go on; otherwise the answer. A hang lasts while the fault does, up to
        `hang_limit`, or until the client's Connect-Timeout-Ms: then deadline_exceeded."""
        loop = asyncio.get_running_loop()
        limit = loop.time() + emulator.config.hang_limit
        deadline = None if client_deadline is None else loop.time() + client_deadline
        while True:
            mode = self.current(emulator, method)
            if mode == "unavailable":
                return connect_error("unavailable", "controller unavailable: connection reset")
            if mode != "hang" or loop.time() >= limit:
                return None
            if deadline is not None and loop.time() >= deadline:
                return connect_error("deadline_exceeded", f"{method} exceeded its deadline")
            await asyncio.sleep(0.05)


def _deadline(request: web.Request) -> float | None:
    """The client's deadline in seconds, from the Connect-Timeout-Ms header."""
    raw = request.headers.get(TIMEOUT_HEADER, "").strip()
    return int(raw) / 1000 if raw.isdigit() else None
