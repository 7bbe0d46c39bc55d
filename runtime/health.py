"""The worker's health endpoint, for a container's probes (worker.health_address).

| path | 200 when | otherwise |
|---|---|---|
| `GET /healthz` | the process and its event loop answer | no answer (liveness) |
| `GET /readyz` | Temporal answers and every family's Worker runs | 503 and why (readiness) |

Both answer JSON. The check of Temporal is the frontend's gRPC health service, bounded by
READY_CHECK_TIMEOUT, so a probe never waits on a hung connection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from aiohttp import web
from temporalio.client import Client
from temporalio.worker import Worker

from keeper.runtime.dev_ports import split_address

log = logging.getLogger("keeper.health")

# Below a Kubernetes probe's default timeout (1 s is its floor; deploy/k8s sets 5 s).
READY_CHECK_TIMEOUT = timedelta(seconds=3)


@dataclass
class Readiness:
    """What /readyz reports: set by the worker as it connects, starts and stops."""

    client: Client | None = None
    workers: Sequence[Worker] = field(default_factory=list)
    stopping: bool = False

    async def check(self) -> tuple[bool, dict[str, object]]:
        if self.stopping:
            return False, {"status": "stopping"}
        if self.client is None or not self.workers:
            return False, {"status": "starting"}
        not_running = [w.task_queue for w in self.workers if not w.is_running or w.is_shutdown]
        if not_running:
            return False, {"status": "not running", "task_queues": not_running}
        try:
            temporal_ok = await self.client.service_client.check_health(timeout=READY_CHECK_TIMEOUT)
        except Exception as err:  # any failure to answer is "not ready", never a crash
            log.warning("readiness: Temporal health check failed: %s", type(err).__name__)
            temporal_ok = False
        if not temporal_ok:
            return False, {"status": "temporal unreachable"}
        return True, {"status": "ok", "task_queues": [w.task_queue for w in self.workers]}


class HealthServer:
    """Serves /healthz and /readyz on `address` (HOST:PORT; port 0 picks a free one)."""

    def __init__(self, address: str, readiness: Readiness) -> None:
        self._host, self._port = split_address(address, "worker.health_address")
        self._readiness = readiness
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def __aenter__(self) -> HealthServer:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        self.port = int(self._runner.addresses[0][1])
        log.info("health endpoint on %s:%s (/healthz, /readyz)", self._host, self.port)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _request: web.Request) -> web.Response:
        # Answered on the worker's own event loop: a blocked loop answers nothing.
        return web.json_response({"status": "ok"})

    async def _readyz(self, _request: web.Request) -> web.Response:
        ready, body = await self._readiness.check()
        return web.json_response(body, status=200 if ready else 503)


@contextlib.asynccontextmanager
async def serve_health(address: str, readiness: Readiness) -> AsyncIterator[HealthServer | None]:
    """The endpoint for as long as the block runs; none when `address` is ""."""
    if not address:
        yield None
        return
    async with HealthServer(address, readiness) as server:
        yield server
