"""Control API (aiohttp) for tests and the demo: state, scenarios, faults, clock, phone-home.

Every error is JSON {"error": "..."}; validation errors name the offending field and are
also listed under "fields".
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web
from pydantic import BaseModel, Field

from emulators.control_json import Body, answer, error, error_middleware, fault_routes, parse
from emulators.tpu.faults import Fault
from emulators.tpu.scenario import Scenario

if TYPE_CHECKING:
    from emulators.tpu.emulator import TpuEmulator

EMULATOR_KEY: web.AppKey[TpuEmulator] = web.AppKey("emulator")


class _Advance(Body):
    seconds: float = Field(ge=0)


class _SetNow(Body):
    now: datetime


class _Registration(BaseModel):
    qr: str | None = None
    node: str
    vm_index: int
    ip: str


def _emu(request: web.Request) -> TpuEmulator:
    return request.app[EMULATOR_KEY]


async def put_scenario(request: web.Request) -> web.Response:
    scenario = await parse(request, Scenario)
    key = request.match_info["id"]
    if key == "_default":
        _emu(request).set_default_scenario(scenario)
    else:
        _emu(request).set_scenario(key, scenario)
    return web.json_response({"id": key, "scenario": scenario.model_dump(mode="json")})


async def delete_scenario(request: web.Request) -> web.Response:
    if not _emu(request).remove_scenario(request.match_info["id"]):
        return error(404, f"no scenario for {request.match_info['id']}")
    return web.json_response({"deleted": request.match_info["id"]})


async def advance_clock(request: web.Request) -> web.Response:
    body = await parse(request, _Advance)
    now = _emu(request).advance(body.seconds)
    return web.json_response({"now": now.isoformat()})


async def set_clock(request: web.Request) -> web.Response:
    body = await parse(request, _SetNow)
    if body.now.tzinfo is None:
        return error(400, "invalid field now: needs a timezone", fields=["now"])
    now = _emu(request).set_now(body.now)
    return web.json_response({"now": now.isoformat()})


async def register(request: web.Request) -> web.Response:
    body = await parse(request, _Registration)
    status = _emu(request).record_registration(body.model_dump(), request.remote)
    if status != 200:
        return error(status, "this VM has been deleted")
    return web.json_response({"registered": True})


async def reset(request: web.Request) -> web.Response:
    _emu(request).reset()
    return web.json_response({"reset": True})


async def get_leaks(request: web.Request) -> web.Response:
    raw = request.query.get("handed_over", "")
    handed_over = {item for item in raw.split(",") if item}
    return web.json_response({"leaks": _emu(request).leaks(handed_over)})


def make_app(emulator: TpuEmulator) -> web.Application:
    app = web.Application(middlewares=[error_middleware()])
    app[EMULATOR_KEY] = emulator
    app.add_routes(
        [
            web.get("/state", answer(lambda request: _emu(request).state())),
            web.get("/healthz", answer(lambda _: {"status": "ok"})),
            web.get("/leaks", get_leaks),
            web.get("/scenarios", answer(lambda request: _emu(request).scenarios.to_json())),
            web.put("/scenarios/{id}", put_scenario),
            web.delete("/scenarios/{id}", delete_scenario),
            *fault_routes("/faults", Fault, lambda request: _emu(request).faults),
            web.post("/clock/advance", advance_clock),
            web.post("/clock/set", set_clock),
            web.post("/register", register),
            web.post("/reset", reset),
        ]
    )
    return app
