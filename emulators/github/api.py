"""The GitHub REST endpoints the emulator serves: list, get and delete self-hosted runners
for repository, organisation and enterprise scopes."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from yarl import URL

from emulators.github.state import Fault, Runner

if TYPE_CHECKING:
    from emulators.github.server import GitHubEmulator

EMULATOR_KEY: web.AppKey[GitHubEmulator] = web.AppKey("github_emulator")
DOCS_URL = "https://docs.github.com/rest/actions/self-hosted-runners"
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100
RATE_LIMIT = 5000
RATE_LIMIT_WAIT_S = 60.0
_JOB_STILL_RUNNING_TYPE = (
    "GitHub.DistributedTask.WebApi.TaskAgentJobStillRunningException, GitHub.DistributedTask.WebApi"
)
_DEFAULT_MESSAGES = {
    401: "Bad credentials",
    403: "Resource not accessible by integration",
    404: "Not Found",
    429: "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again.",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
}


def github_error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(
        {"message": message, "documentation_url": DOCS_URL}, status=status, headers=headers
    )


def _busy_message(name: str) -> str:
    return f'Bad request - Runner "{name}" is still running a job"'


def _scope_of(request: web.Request) -> str:
    info = request.match_info
    if "enterprise" in info:
        return f"enterprise:{info['enterprise']}"
    if "org" in info:
        return f"org:{info['org']}"
    return f"repo:{info['owner']}/{info['repo']}"


def _emu(request: web.Request) -> GitHubEmulator:
    return request.app[EMULATOR_KEY]


def _authorized(request: web.Request, token: str) -> bool:
    # GitHub takes both the "Bearer" and the older "token" scheme.
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() in ("bearer", "token") and value.strip() == token


def _fault_response(fault: Fault, runner: Runner | None, runner_id: int | None) -> web.Response:
    headers: dict[str, str] = {}
    if fault.rate_limited:
        wait = fault.retry_after if fault.retry_after is not None else RATE_LIMIT_WAIT_S
        headers.update(
            {
                "x-ratelimit-limit": str(RATE_LIMIT),
                "x-ratelimit-remaining": "0",
                "x-ratelimit-used": str(RATE_LIMIT),
                "x-ratelimit-reset": str(math.ceil(time.time() + wait)),
            }
        )
    elif fault.retry_after is not None:
        headers["retry-after"] = f"{fault.retry_after:g}"
    name = runner.name if runner is not None else str(runner_id or "")
    if fault.status == 400 and fault.message is None:
        # The scale-set (Actions service) flavour of "busy": a .NET exception envelope.
        body: dict[str, Any] = {
            "$id": "1",
            "innerException": None,
            "message": f"Runner {name} is still running a job.",
            "typeName": _JOB_STILL_RUNNING_TYPE,
            "typeKey": "JobStillRunningException",
            "errorCode": 0,
            "eventId": 3000,
        }
        return web.json_response(body, status=400, headers=headers)
    if fault.message is not None:
        message = fault.message
    elif fault.status == 422:
        message = _busy_message(name)
    elif fault.rate_limited:
        message = "API rate limit exceeded for installation."
    else:
        fallback = "Server Error" if fault.status >= 500 else "Error"
        message = _DEFAULT_MESSAGES.get(fault.status, fallback)
    return github_error(fault.status, message, headers)


def _check(request: web.Request, runner_id: int | None) -> web.Response | None:
    """The 401 or injected fault that replaces this request's answer, if any."""
    emu = _emu(request)
    if not _authorized(request, emu.token):
        return github_error(401, "Bad credentials")
    scope = _scope_of(request)
    fault = emu.faults.take(request.method, scope, runner_id)
    if fault is None:
        return None
    runner = emu.runners.find(scope, runner_id) if runner_id is not None else None
    return _fault_response(fault, runner, runner_id)


def _int_query(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        return default


def _link_header(url: URL, page: int, last: int, per_page: int) -> str | None:
    def at(number: int) -> str:
        return str(url.update_query({"per_page": str(per_page), "page": str(number)}))

    links: list[str] = []
    if page < last:
        links += [f'<{at(page + 1)}>; rel="next"', f'<{at(last)}>; rel="last"']
    if page > 1:
        links += [f'<{at(page - 1)}>; rel="prev"', f'<{at(1)}>; rel="first"']
    return ", ".join(links) or None


async def list_runners(request: web.Request) -> web.Response:
    denied = _check(request, None)
    if denied is not None:
        return denied
    emu = _emu(request)
    runners = emu.runners.in_scope(_scope_of(request))
    per_page = min(max(_int_query(request, "per_page", DEFAULT_PER_PAGE), 1), MAX_PER_PAGE)
    page = max(_int_query(request, "page", 1), 1)
    last = max(math.ceil(len(runners) / per_page), 1)
    chunk = runners[(page - 1) * per_page : page * per_page]
    body = {"total_count": len(runners), "runners": [emu.runners.api_json(r) for r in chunk]}
    link = _link_header(request.url, page, last, per_page)
    return web.json_response(body, headers={"Link": link} if link else None)


def _runner_or_answer(request: web.Request) -> Runner | web.Response:
    """The runner a get or delete names, or the answer that ends the request first."""
    runner_id = int(request.match_info["runner_id"])  # the route's pattern is digits
    denied = _check(request, runner_id)
    if denied is not None:
        return denied
    runner = _emu(request).runners.find(_scope_of(request), runner_id)
    if runner is None:
        return github_error(404, "Not Found")
    return runner


async def get_runner(request: web.Request) -> web.Response:
    runner = _runner_or_answer(request)
    if isinstance(runner, web.Response):
        return runner
    return web.json_response(_emu(request).runners.api_json(runner))


async def delete_runner(request: web.Request) -> web.Response:
    runner = _runner_or_answer(request)
    if isinstance(runner, web.Response):
        return runner
    if runner.busy:
        return github_error(422, _busy_message(runner.name))
    _emu(request).runners.remove(runner.id)
    return web.Response(status=204)


async def not_found(request: web.Request) -> web.Response:
    return github_error(404, "Not Found")


def routes() -> list[web.RouteDef]:
    defs: list[web.RouteDef] = []
    for prefix in ("/repos/{owner}/{repo}", "/orgs/{org}", "/enterprises/{enterprise}"):
        base = f"{prefix}/actions/runners"
        one = base + r"/{runner_id:\d+}"
        defs += [
            web.get(base, list_runners),
            web.get(one, get_runner),
            web.delete(one, delete_runner),
        ]
    return defs


@web.middleware
async def record_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    """Log every GitHub API request with the status it got; control calls are not logged."""
    if request.path.startswith("/_emulator"):
        return await handler(request)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _emu(request).log.record(request.method, request.path, request.query_string, exc.status)
        raise
    _emu(request).log.record(request.method, request.path, request.query_string, response.status)
    return response
