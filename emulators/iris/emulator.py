"""IrisEmulator: the controller's Connect-JSON API and the control API on one aiohttp port."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from emulators.clock import Clock, EmulatorClock
from emulators.control_json import BadRequest, error, error_middleware
from emulators.iris.clock import ScenarioClock
from emulators.iris.config import IrisEmulatorConfig
from emulators.iris.control import control_routes
from emulators.iris.scenarios import SCENARIOS, Scenario, load_scenario_file, variant
from emulators.iris.service import Faults, routes
from emulators.iris.state import Controller, IrisError, RootJob
from emulators.lifecycle import Served, cancelled, every, serve_until_signal, start_site

log = logging.getLogger("emulators.iris")


class UnknownScenario(LookupError):
    """No scenario of that name: the control API answers 404."""


class IrisEmulator(Served):
    def __init__(self, config: IrisEmulatorConfig | None = None, wall: Clock | None = None):
        self.config = config or IrisEmulatorConfig()
        self.scenarios: dict[str, Scenario] = dict(SCENARIOS)
        default = self.config.default_scenario
        if self.config.scenario_file:
            self.scenarios, file_default = load_scenario_file(self.config.scenario_file)
            default = file_default or default
        self.clock = ScenarioClock(wall or EmulatorClock(), self.config.speed)
        self.controller = Controller(self.clock, self.scenario(default))
        self.faults = Faults()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._settler: asyncio.Task[None] | None = None

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        errors = error_middleware({UnknownScenario: 404, IrisError: 404})
        app = web.Application(middlewares=[errors])
        app.add_routes([*control_routes(self), *routes(self)])
        # A client that gives up (its deadline) cancels the hanging handler, as on a real server.
        site = await start_site(app, self.config.host, self.config.port, handler_cancellation=True)
        self._runner, self._port = site
        if self.config.settle_interval > 0:
            # CPU rates change when the scenario's turn comes; crediting often keeps the
            # counters true even when nobody reads them for a while.
            settle = self.controller.settle_all
            self._settler = every(self.config.settle_interval, settle, log, "CPU settle")
        log.info("iris emulator: controller and control API on %s", self.url)

    async def stop(self) -> None:
        await cancelled(self._settler)
        self._settler = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("emulator not started")
        return f"http://{self.config.host}:{self._port}"

    # ------------------------------------------------------------- scenarios and jobs

    def scenario(self, name: str | None, overrides: Mapping[str, Any] | None = None) -> Scenario:
        chosen = self.scenarios.get(name or "")
        if chosen is None:
            raise UnknownScenario(
                f"no scenario {name!r}; known: {', '.join(sorted(self.scenarios))}"
            )
        if overrides:
            try:
                return variant(chosen, chosen.name, overrides)
            except ValueError as exc:
                raise BadRequest(error(400, f"invalid field overrides: {exc}")) from None
        return chosen

    def set_next_scenario(self, name: str, overrides: Mapping[str, Any] | None = None) -> Scenario:
        self.controller.next_scenario = self.scenario(name, overrides)
        return self.controller.next_scenario

    def create_job(
        self,
        name: str,
        user: str = "alice",
        scenario: str = "healthy",
        seed: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        request: dict[str, Any] | None = None,
    ) -> RootJob:
        """A job as if LaunchJob had been called, without an entry in the action log."""
        job_id = name if name.startswith("/") else f"/{user}/{name}"
        chosen = self.scenario(scenario, overrides)
        body = request if request is not None else {"name": job_id}
        try:
            return self.controller.launch(job_id, user, body, chosen, seed)
        except IrisError as err:
            raise BadRequest(error(409, err.message)) from None

    def fast_forward(self, seconds: float) -> None:
        """Skip scenario time; CPU counters (wall time) do not move."""
        self.controller.settle_all()
        self.clock.fast_forward(seconds)
        self.controller.settle_all()

    def set_fault(self, mode: str | None, seconds: float | None, methods: list[str] | None) -> None:
        until = None if seconds is None else self.clock.wall.now() + seconds
        self.faults.set(mode, until, methods)

    # ------------------------------------------------------------- auth

    def authenticate(self, request: web.Request) -> str | None:
        """The caller's user, or None when auth is on and the token is missing or bad."""
        tokens = self.config.tokens
        if not tokens:
            return self.config.default_user
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            token = request.cookies.get("iris_session", "")
        return tokens.get(token.strip())

    # ------------------------------------------------------------- inspection

    def fault_json(self) -> dict[str, Any]:
        return {
            "mode": self.faults.mode,
            "until_wall": self.faults.until_wall,
            "methods": sorted(self.faults.methods) if self.faults.methods else None,
        }

    def actions_json(self) -> list[dict[str, Any]]:
        return [
            {"at": a.at_wall, "method": a.method, "job_id": a.job_id, "user": a.user, **a.detail}
            for a in self.controller.actions
        ]

    def job_json(self, job: RootJob) -> dict[str, Any]:
        t = self.controller.now_t(job)
        return {
            "job_id": job.job_id,
            "user": job.user,
            "scenario": job.scenario.name,
            "seed": job.seed,
            "t": t,
            "terminated": dict(job.terminated),
            "children": [
                {
                    "job_id": view.job_id,
                    "state": view.state,
                    "tasks": [
                        {
                            "task_id": task.task_id,
                            "state": task.moment.state,
                            "worker_id": task.host,
                            "attempt": task.moment.attempt,
                            "cores": task.moment.cores,
                            "dump": task.moment.dump,
                        }
                        for task in view.tasks
                    ],
                }
                for view in job.jobs(t)
            ],
        }

    def state(self) -> dict[str, Any]:
        return {
            "url": self.url if self._port is not None else None,
            "speed": self.clock.speed,
            "scenario_now": self.clock.now(),
            "skipped": self.clock.skipped,
            "wall_now": self.clock.wall.now(),
            "next_scenario": self.controller.next_scenario.name,
            "log_routes": list(self.config.log_routes),
            "auth": bool(self.config.tokens),
            "faults": self.fault_json(),
            "jobs": [self.job_json(job) for job in self.controller.jobs.values()],
            "actions": self.actions_json(),
        }


async def start_emulator(
    config: IrisEmulatorConfig | None = None, wall: Clock | None = None
) -> IrisEmulator:
    """An started emulator (stop it with `await emulator.stop()`, or use `async with`)."""
    emulator = IrisEmulator(config, wall)
    await emulator.start()
    return emulator


async def serve(config: IrisEmulatorConfig) -> None:
    await serve_until_signal(IrisEmulator(config), log, "iris emulator")
