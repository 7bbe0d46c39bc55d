"""TpuEmulator: wires the state machine, the gRPC API, the VM fleet and the control API."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import grpc
from aiohttp import web

from emulators.clock import EmulatorClock, iso, to_datetime
from emulators.faults import FaultBook
from emulators.lifecycle import Served, cancelled, every, serve_until_signal, start_site
from emulators.tpu.config import EmulatorConfig
from emulators.tpu.control import make_app
from emulators.tpu.faults import Fault
from emulators.tpu.fleet import Fleet
from emulators.tpu.grpc_service import TpuService
from emulators.tpu.scenario import Scenario, ScenarioBook, ScenarioFile, load_scenario_file
from emulators.tpu.state import World

log = logging.getLogger("emulators.tpu")


class TpuEmulator(Served):
    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.config = config or EmulatorConfig()
        path = self.config.scenario_path()
        loaded = ScenarioFile() if path is None else load_scenario_file(path)
        # The file is the more specific source, so its `default:` wins when present.
        self.scenarios = ScenarioBook(loaded.default or self.config.default_scenario, loaded.slices)
        self.clock = EmulatorClock()
        self.world = World(
            self.clock,
            self.scenarios,
            ip_prefix=self.config.ip_prefix,
            vm_health_port=self.config.vm_health_port,
            vm_health_path=self.config.vm_health_path,
        )
        self.faults: FaultBook[Fault] = FaultBook("count")
        self.calls: Counter[str] = Counter()
        self.fleet = Fleet(self.world, self.registration_url, self.config.phone_home_concurrency)
        self.service = TpuService(
            self.world, self.faults, self.calls, self.refresh, self.config.max_page_size
        )
        self._grpc_server: grpc.aio.Server | None = None
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._grpc_port: int | None = None
        self._control_port: int | None = None

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(tuple(self.service.handlers()))
        self._grpc_port = server.add_insecure_port(f"{self.config.host}:{self.config.grpc_port}")
        await server.start()
        self._grpc_server = server
        site = await start_site(make_app(self), self.config.host, self.config.control_port)
        self._runner, self._control_port = site
        # Without this, VMs would only boot and phone home when somebody reads the API.
        self._ticker = every(self.config.tick_seconds, self.refresh, log, "emulator tick")
        log.info("TPU emulator: gRPC on %s, control API on %s", self.grpc_target, self.control_url)

    async def stop(self) -> None:
        await cancelled(self._ticker)
        self._ticker = None
        await self.fleet.stop_all()
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=0.2)
            self._grpc_server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------- addresses

    @property
    def grpc_target(self) -> str:
        if self._grpc_port is None:
            raise RuntimeError("emulator not started")
        return f"{self.config.host}:{self._grpc_port}"

    @property
    def control_url(self) -> str:
        if self._control_port is None:
            raise RuntimeError("emulator not started")
        return f"http://{self.config.host}:{self._control_port}"

    def registration_url(self) -> str:
        return self.config.registration_url or f"{self.control_url}/register"

    # ------------------------------------------------------------- driving it

    def refresh(self) -> None:
        """Apply every transition that is due and let the VM fleet act on it."""
        self.world.evaluate()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # called outside the loop: the ticker will start the VMs
        self.fleet.sync()

    def set_scenario(self, key: str, scenario: Scenario) -> None:
        self.scenarios.set(key, scenario)
        self.refresh()

    def set_default_scenario(self, scenario: Scenario) -> None:
        self.scenarios.default = scenario
        self.refresh()

    def remove_scenario(self, key: str) -> bool:
        return self.scenarios.remove(key)

    def inject_fault(
        self,
        method: str,
        code: str,
        count: int = 1,
        slice: str | None = None,
        when: str = "before",
    ) -> Fault:
        fault = Fault(method=method, code=code, count=count, slice=slice, when=when)
        self.faults.add(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def now(self) -> datetime:
        return to_datetime(self.clock.now())

    def advance(self, seconds: float) -> datetime:
        self.clock.advance(seconds)
        self.refresh()
        return self.now()

    def set_now(self, when: datetime) -> datetime:
        if when.tzinfo is None:
            raise ValueError("set_now needs a timezone-aware datetime")
        return self.advance(when.timestamp() - self.clock.now())

    def reset(self) -> None:
        """Forget every resource, operation, registration, call count and fault."""
        self.fleet.close_all()
        self.world.clear()
        self.faults.clear()
        self.calls.clear()
        self.scenarios.reset()

    # ------------------------------------------------------------- inspection

    def state(self) -> dict[str, Any]:
        self.refresh()
        world = self.world
        return {
            "now": iso(self.clock.now()),
            "grpc_target": self.grpc_target if self._grpc_port else None,
            "queued_resources": [qr.to_json() for qr in world.all_qrs],
            "nodes": [node.to_json() for node in world.all_nodes],
            "vms": world.vms_json(),
            "registrations": list(world.registrations),
            "calls": dict(self.calls),
            "faults": self.faults.to_json(),
            "scenarios": self.scenarios.to_json(),
            "operations": len(world.ops),
        }

    def leaks(
        self, handed_over: Iterable[str] = frozenset(), *, include_stopped_vms: bool = False
    ) -> list[str]:
        """Live QRs and nodes nobody took over, and running VMs that phoned home for them.

        A node or VM counts as handed over when its node id or its QR id is in
        `handed_over`. With include_stopped_vms, VMs that registered and were deleted since
        are reported too (every phone-home of an unowned slice).
        """
        self.refresh()
        return self.world.leaks(handed_over, include_stopped_vms)

    def record_registration(self, payload: dict[str, Any], source_ip: str | None) -> int:
        """Phone-home endpoint logic; returns the HTTP status to answer with."""
        vm = self.world.vm_at(source_ip) if source_ip else None
        entry = {
            **payload,
            "source_ip": source_ip,
            "source_matches": source_ip == payload.get("ip"),
            "at": iso(self.clock.now()),
        }
        if vm is not None and vm.stopped_at is not None:
            # A deleted VM cannot talk; the request raced its deletion.
            return 410
        self.world.registrations.append(entry)
        return 200


async def serve(config: EmulatorConfig) -> None:
    await serve_until_signal(TpuEmulator(config), log, "TPU emulator")
