"""Control API under /_emulator/ (JSON, no auth): runners, faults, state, reset.

Errors are {"error": "..."}; validation errors name the offending field and list it under
"fields".
"""

from __future__ import annotations

from aiohttp import web
from pydantic import Field

from emulators.control_json import BadRequest, Body, answer, error, fault_routes, parse
from emulators.github.api import EMULATOR_KEY
from emulators.github.state import DEFAULT_LABELS, Fault, RunnerStatus

PREFIX = "/_emulator"


class NewRunner(Body):
    scope: str
    name: str = Field(min_length=1)
    labels: list[str] = Field(default_factory=lambda: list(DEFAULT_LABELS))
    status: RunnerStatus = "online"
    busy: bool = False
    os: str = "Linux"


class RunnerPatch(Body):
    busy: bool | None = None
    status: RunnerStatus | None = None


def _runner_id(request: web.Request) -> int:
    raw = request.match_info["runner_id"]
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(error(400, f"invalid field runner_id: {raw!r}")) from None


async def reset(request: web.Request) -> web.Response:
    request.app[EMULATOR_KEY].reset()
    return web.json_response({"reset": True})


async def add_runner(request: web.Request) -> web.Response:
    body = await parse(request, NewRunner)
    emu = request.app[EMULATOR_KEY]
    runner_id = emu.add_runner(**body.model_dump())
    return web.json_response({"id": runner_id, "runner": emu.runner(runner_id)}, status=201)


async def patch_runner(request: web.Request) -> web.Response:
    runner_id = _runner_id(request)
    body = await parse(request, RunnerPatch)
    emu = request.app[EMULATOR_KEY]
    emu.runner(runner_id)  # 404 before changing anything
    if body.busy is not None:
        emu.set_busy(runner_id, body.busy)
    if body.status is not None:
        emu.set_status(runner_id, body.status)
    return web.json_response({"runner": emu.runner(runner_id)})


async def delete_runner(request: web.Request) -> web.Response:
    runner_id = _runner_id(request)
    request.app[EMULATOR_KEY].set_gone(runner_id)
    return web.json_response({"deleted": runner_id})


async def control_not_found(request: web.Request) -> web.Response:
    return error(404, f"no control route {request.method} {request.path}")


def routes() -> list[web.RouteDef]:
    return [
        web.get(f"{PREFIX}/healthz", answer(lambda _: {"status": "ok"})),
        web.get(f"{PREFIX}/state", answer(lambda request: request.app[EMULATOR_KEY].state())),
        web.get(
            f"{PREFIX}/requests",
            answer(lambda request: {"requests": request.app[EMULATOR_KEY].requests}),
        ),
        web.post(f"{PREFIX}/reset", reset),
        web.post(f"{PREFIX}/runners", add_runner),
        web.patch(f"{PREFIX}/runners/{{runner_id}}", patch_runner),
        web.delete(f"{PREFIX}/runners/{{runner_id}}", delete_runner),
        *fault_routes(f"{PREFIX}/faults", Fault, lambda request: request.app[EMULATOR_KEY].faults),
        web.route("*", f"{PREFIX}/{{tail:.*}}", control_not_found),
    ]
