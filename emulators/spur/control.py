"""Control API (aiohttp) for tests and the demo: state, jobs, controller life, agent knobs.

Every error is JSON {"error": "..."}: 400 names the bad field, 404 the unknown job or node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import Field

from emulators.control_json import BadRequest, Body, Handler, answer, error, error_middleware, parse
from emulators.spur.agent import AgentDown
from emulators.spur.config import AgentSpec
from emulators.spur.state import Job, NotFound

if TYPE_CHECKING:
    from emulators.spur.emulator import SpurEmulator

EMULATOR_KEY: web.AppKey[SpurEmulator] = web.AppKey("spur_emulator")


class _Submit(Body):
    name: str = "job"
    user: str = "alice"
    array_size: int = Field(default=0, ge=0)
    nodes: list[str] | None = None
    commit: bool = True
    kind: Literal["process", "allocation"] = "process"


class _Dispatch(Body):
    nodes: list[str] = Field(min_length=1)
    commit: bool = True
    kind: Literal["process", "allocation"] = "process"


class _Complete(Body):
    state: str = "COMPLETED"
    leak: bool = False


class _Requeue(Body):
    nodes: list[str] | None = None
    commit: bool = True
    leak: bool = False


class _WrongEviction(Body):
    nodes: list[str] = Field(min_length=1)
    commit: bool = True


class _Advance(Body):
    seconds: float = Field(ge=0)


class _AddAgent(Body):
    node: str = Field(min_length=1)
    hostname: str | None = None
    cpus: int = Field(default=64, ge=0)
    memory_mb: int = Field(default=512_000, ge=0)
    gpus: int = Field(default=8, ge=0)


class _Restart(Body):
    keep_holdings: bool = True


class _Contention(Body):
    mode: Literal["off", "empty", "partial"]
    omit: list[int] = Field(default_factory=list)


class _CancelTimeout(Body):
    seconds: float = Field(ge=0)
    acts: bool = True


class _Down(Body):
    down: bool = True


class _Reports(Body):
    reports: bool = True


class _Hold(Body):
    job_id: int = Field(ge=1)
    run_attempt: int = Field(default=1, ge=0)
    kind: Literal["process", "allocation"] = "process"


def _emu(request: web.Request) -> SpurEmulator:
    return request.app[EMULATOR_KEY]


def _job_id(request: web.Request) -> int:
    raw = request.match_info["job_id"]
    if not raw.isdigit():
        raise BadRequest(error(400, f"invalid field job_id: {raw!r} is not a number"))
    return int(raw)


def _job(job: Job) -> web.Response:
    return web.json_response(job.to_json())


async def submit(request: web.Request) -> web.Response:
    body = await parse(request, _Submit)
    jobs = _emu(request).submit(**body.model_dump())
    return web.json_response({"jobs": [job.to_json() for job in jobs]}, status=201)


async def dispatch(request: web.Request) -> web.Response:
    body = await parse(request, _Dispatch)
    return _job(_emu(request).dispatch(_job_id(request), **body.model_dump()))


async def commit(request: web.Request) -> web.Response:
    return _job(_emu(request).commit(_job_id(request)))


async def complete(request: web.Request) -> web.Response:
    body = await parse(request, _Complete)
    return _job(_emu(request).complete(_job_id(request), **body.model_dump()))


async def requeue(request: web.Request) -> web.Response:
    body = await parse(request, _Requeue)
    job_id = _job_id(request)
    return _job(_emu(request).requeue(job_id, body.nodes, commit=body.commit, leak=body.leak))


async def wrong_eviction(request: web.Request) -> web.Response:
    body = await parse(request, _WrongEviction)
    return _job(_emu(request).wrong_eviction(_job_id(request), body.nodes, commit=body.commit))


async def advance(request: web.Request) -> web.Response:
    body = await parse(request, _Advance)
    evicted = _emu(request).advance(body.seconds)
    return web.json_response({"evicted": evicted, "clock": _emu(request).state()["clock"]})


async def wipe(request: web.Request) -> web.Response:
    _emu(request).wipe()
    return web.json_response({"next_job_id": _emu(request).cluster.next_job_id})


async def reset(request: web.Request) -> web.Response:
    await _emu(request).reset()
    return web.json_response({"reset": True})


async def add_agent(request: web.Request) -> web.Response:
    body = await parse(request, _AddAgent)
    agent = await _emu(request).add_agent(AgentSpec(**body.model_dump()))
    return web.json_response({**agent.state.to_json(), "target": agent.target}, status=201)


def _node(request: web.Request) -> str:
    node = request.match_info["node"]
    _emu(request).agent(node)  # 404 before anything else
    return node


async def beat(request: web.Request) -> web.Response:
    sent = await _emu(request).beat_now(_node(request))
    return web.json_response({"running_jobs": sent})


async def restart(request: web.Request) -> web.Response:
    node = _node(request)
    body = await parse(request, _Restart)
    agent = await _emu(request).restart_agent(node, body.keep_holdings)
    return web.json_response(agent.state.to_json())


# An agent knob's route -> its body, and how the body turns the knob.
_KNOBS: dict[str, tuple[type[Body], Callable[[SpurEmulator, str, Any], None]]] = {
    "contention": (_Contention, lambda emu, node, b: emu.set_contention(node, b.mode, b.omit)),
    "cancel-timeout": (
        _CancelTimeout,
        lambda emu, node, b: emu.set_cancel_timeout(node, b.seconds, b.acts),
    ),
    "down": (_Down, lambda emu, node, b: emu.set_down(node, b.down)),
    "reports": (_Reports, lambda emu, node, b: emu.set_reports(node, b.reports)),
}


def _knob(model: type[Body], turn: Callable[[SpurEmulator, str, Any], None]) -> Handler:
    """A handler that turns one of a node's agent knobs and answers every knob's value."""

    async def handler(request: web.Request) -> web.Response:
        node = _node(request)
        turn(_emu(request), node, await parse(request, model))
        return web.json_response(_emu(request).agent(node).state.knobs.to_json())

    return handler


async def hold(request: web.Request) -> web.Response:
    node = _node(request)
    body = await parse(request, _Hold)
    _emu(request).hold(node, **body.model_dump())
    return web.json_response(_emu(request).agent(node).state.to_json())


def make_app(emulator: SpurEmulator) -> web.Application:
    app = web.Application(middlewares=[error_middleware({NotFound: 404, AgentDown: 409})])
    app[EMULATOR_KEY] = emulator
    app.add_routes(
        [
            web.get("/state", answer(lambda request: _emu(request).state())),
            web.post("/jobs", submit),
            web.post("/jobs/{job_id}/dispatch", dispatch),
            web.post("/jobs/{job_id}/commit", commit),
            web.post("/jobs/{job_id}/complete", complete),
            web.post("/jobs/{job_id}/requeue", requeue),
            web.post("/jobs/{job_id}/wrong-eviction", wrong_eviction),
            web.post("/clock/advance", advance),
            web.post("/evict", answer(lambda request: {"evicted": _emu(request).evict()})),
            web.post("/wipe", wipe),
            web.post("/reset", reset),
            web.post("/agents", add_agent),
            web.post("/agents/{node}/beat", beat),
            web.post("/agents/{node}/restart", restart),
            *(web.post(f"/agents/{{node}}/{name}", _knob(*knob)) for name, knob in _KNOBS.items()),
            web.post("/agents/{node}/hold", hold),
        ]
    )
    return app
