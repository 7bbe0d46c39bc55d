"""Control API under /control/... on the emulator's port: for tests and the demo.

Every error is JSON {"error": "..."}: 400 names the bad field, 404 the unknown job or
scenario. Routes and bodies: docs/iris-emulator.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import Field

from emulators.control_json import Body, answer, parse
from emulators.iris.config import check_log_routes

if TYPE_CHECKING:
    from emulators.iris.emulator import IrisEmulator


class _CreateJob(Body):
    name: str = Field(min_length=1)
    user: str = Field(default="alice", min_length=1)
    scenario: str = "healthy"
    seed: int | None = None
    # Knobs of the scenario to change for this job (workers, event_at, log_format, ...).
    overrides: dict[str, Any] = Field(default_factory=dict)
    # The LaunchJobRequest GetJobStatus will return; default: just the name.
    request: dict[str, Any] | None = None


class _NextScenario(Body):
    scenario: str
    overrides: dict[str, Any] = Field(default_factory=dict)


class _Faults(Body):
    mode: Literal["hang", "unavailable", "off"]
    seconds: float | None = Field(default=None, gt=0)  # wall seconds; None: until changed
    methods: list[str] | None = None


class _FastForward(Body):
    seconds: float = Field(ge=0)


class _LogRoutes(Body):
    # Of LOG_ROUTES: get_task_logs, fetch_logs, proxy.
    routes: list[str]


Route = web.RouteDef


def control_routes(emu: IrisEmulator) -> list[Route]:
    async def scenarios(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "default": emu.controller.next_scenario.name,
                "scenarios": [s.model_dump(mode="json") for s in emu.scenarios.values()],
            }
        )

    async def create_job(request: web.Request) -> web.Response:
        body = await parse(request, _CreateJob)
        job = emu.create_job(**body.model_dump())
        return web.json_response(emu.job_json(job), status=201)

    async def next_scenario(request: web.Request) -> web.Response:
        body = await parse(request, _NextScenario)
        chosen = emu.set_next_scenario(body.scenario, body.overrides)
        return web.json_response({"next_scenario": chosen.name})

    async def faults(request: web.Request) -> web.Response:
        body = await parse(request, _Faults)
        emu.set_fault(None if body.mode == "off" else body.mode, body.seconds, body.methods)
        return web.json_response(emu.fault_json())

    async def fast_forward(request: web.Request) -> web.Response:
        body = await parse(request, _FastForward)
        emu.fast_forward(body.seconds)
        return web.json_response({"scenario_now": emu.controller.clock.now()})

    async def log_routes(request: web.Request) -> web.Response:
        body = await parse(request, _LogRoutes)
        emu.config.log_routes = check_log_routes(body.routes)  # a ValueError answers 400
        return web.json_response({"log_routes": list(emu.config.log_routes)})

    return [
        web.get("/control/state", answer(lambda _: emu.state())),
        web.get("/control/scenarios", scenarios),
        web.post("/control/jobs", create_job),
        web.post("/control/next-scenario", next_scenario),
        web.post("/control/faults", faults),
        web.post("/control/clock/fast-forward", fast_forward),
        web.post("/control/log-routes", log_routes),
        web.get("/control/actions", answer(lambda _: {"actions": emu.actions_json()})),
    ]
