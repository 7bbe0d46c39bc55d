"""Health checks for the dev stack's components. Each answers (healthy, detail)."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.runtime import Runtime

from keeper.runtime.dev_ports import dial_host, split_address
from keeper.runtime.sdk_logs import sdk_telemetry
from keeper.runtime.settings import Settings
from keeper.runtime.temporal_client import connect_options
from keeper.workers.versioning import current_build_id, make_current

CONNECT_TIMEOUT = 3.0
RPC_TIMEOUT = 3.0
HTTP_TIMEOUT = 2.0
MAKE_CURRENT_IDENTITY = "keeper-dev up"


@dataclass(frozen=True)
class Poller:
    identity: str
    last_access: datetime | None
    # The Worker Deployment version it polls as; None for an unversioned worker.
    version: WorkerDeploymentVersion | None = None


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0][:200]


class Probes:
    """Holds one Temporal client across checks so polling does not reconnect each time."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: Client | None = None
        self._runtime: Runtime | None = None

    async def client(self) -> Client:
        if self._client is None:
            if self._runtime is None:
                self._runtime = Runtime(telemetry=sdk_telemetry(), worker_heartbeat_interval=None)
            self._client = await asyncio.wait_for(
                Client.connect(**connect_options(self.settings.temporal), runtime=self._runtime),
                timeout=CONNECT_TIMEOUT,
            )
        return self._client

    def close(self) -> None:
        """Drops the client and its runtime's threads before the interpreter shuts down."""
        self._client = None
        self._runtime = None
        gc.collect()

    async def temporal_grpc(self) -> Health:
        temporal = self.settings.temporal
        try:
            client = await self.client()
            serving = await client.service_client.check_health(
                timeout=timedelta(seconds=RPC_TIMEOUT)
            )
        except Exception as err:
            self._client = None
            if isinstance(err, TimeoutError):
                return Health(False, f"gRPC {temporal.address}: no answer")
            return Health(False, f"gRPC {temporal.address}: {_first_line(err)}")
        if not serving:
            return Health(False, f"gRPC {temporal.address}: the frontend is not serving yet")
        return Health(True, f"gRPC {temporal.address} namespace {temporal.namespace}")

    async def http_ok(self, url: str, *, want_200: bool) -> Health:
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
                response = await http.get(url)
        except httpx.HTTPError as err:
            return Health(False, f"{url}: {_first_line(err)}")
        if (want_200 and response.status_code != 200) or response.status_code >= 500:
            return Health(False, f"{url}: HTTP {response.status_code}")
        return Health(True, f"{url}: HTTP {response.status_code}")

    async def temporal_ui(self) -> Health:
        host = dial_host(split_address(self.settings.temporal.address)[0])
        return await self.http_ok(
            f"http://{host}:{self.settings.temporal.ui_port}/", want_200=False
        )

    async def emulator(self) -> Health:
        emu = self.settings.emulator
        return await self.http_ok(f"http://{emu.host}:{emu.control_port}/healthz", want_200=True)

    async def github_emulator(self) -> Health:
        base = self.settings.runners.github.api_url.rstrip("/")
        return await self.http_ok(f"{base}/_emulator/healthz", want_200=True)

    async def _json(self, url: str) -> tuple[Health, Any]:
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
                response = await http.get(url)
        except httpx.HTTPError as err:
            return Health(False, f"{url}: {_first_line(err)}"), None
        if response.status_code != 200:
            return Health(False, f"{url}: HTTP {response.status_code}"), None
        try:
            return Health(True, f"{url}: HTTP 200"), response.json()
        except ValueError:
            return Health(False, f"{url}: not JSON"), None

    async def spur_emulator(self) -> Health:
        """Healthy once the control API answers and every agent has registered (through
        the tap, which forwards RegisterAgent to the emulator's controller)."""
        emu = self.settings.emulator
        host = dial_host(emu.host)
        health, state = await self._json(f"http://{host}:{emu.spur_control_port}/state")
        if not health.ok:
            return health
        agents = state.get("agents", []) if isinstance(state, dict) else []
        registered = [a for a in agents if a.get("registered")]
        what = (
            f"controller {host}:{emu.spur_controller_port}, {len(registered)} of "
            f"{len(agents)} agents registered"
        )
        if len(registered) < len(agents):
            return Health(False, f"{what} (through {self.settings.reclaim.tap_address})")
        return Health(True, what)

    async def iris_emulator(self) -> Health:
        """Healthy once the control API answers."""
        emu = self.settings.emulator
        url = f"http://{dial_host(emu.host)}:{emu.iris_port}/control/state"
        health, state = await self._json(url)
        if not health.ok:
            return health
        jobs = state.get("jobs", []) if isinstance(state, dict) else []
        return Health(
            True, f"controller http://{dial_host(emu.host)}:{emu.iris_port}, {len(jobs)} jobs"
        )

    async def reclaim_tap(self) -> Health:
        """The tap process answers on its HTTP intake once the tap, the intake and the
        intake's controller client are up."""
        host, port = split_address(self.settings.reclaim.intake_address, "reclaim.intake_address")
        health, body = await self._json(f"http://{dial_host(host)}:{port}/healthz")
        if not health.ok:
            return health
        counters = body.get("intake", {}) if isinstance(body, dict) else {}
        reports = counters.get("reports")
        return Health(
            True,
            f"tap {self.settings.reclaim.tap_address}, intake {dial_host(host)}:{port}"
            + (f", {reports} reports received" if reports is not None else "")
            + f", mode {self.settings.reclaim.mode.value}",
        )

    async def workflow_pollers(self, task_queue: str) -> tuple[str | None, list[Poller]]:
        """The task queue's workflow pollers, or why they could not be listed."""
        temporal = self.settings.temporal
        request = DescribeTaskQueueRequest(
            namespace=temporal.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
        try:
            client = await self.client()
            response = await client.workflow_service.describe_task_queue(
                request, timeout=timedelta(seconds=RPC_TIMEOUT)
            )
        except Exception as err:
            self._client = None
            return f"task queue {task_queue}: {_first_line(err)}", []
        pollers = [
            Poller(
                identity=p.identity,
                last_access=(
                    p.last_access_time.ToDatetime(tzinfo=UTC)
                    if p.HasField("last_access_time")
                    else None
                ),
                version=WorkerDeploymentVersion(
                    p.deployment_options.deployment_name, p.deployment_options.build_id
                )
                if p.deployment_options.build_id
                else None,
            )
            for p in response.pollers
        ]
        return None, pollers

    async def current_build(self, deployment_name: str) -> tuple[str | None, str | None]:
        """The build id current in the deployment (None: unversioned), or why it is unknown."""
        try:
            client = await self.client()
            current = await current_build_id(
                client, deployment_name, rpc_timeout=timedelta(seconds=RPC_TIMEOUT)
            )
        except Exception as err:
            self._client = None
            return f"worker deployment {deployment_name}: {_first_line(err)}", None
        return None, current

    async def make_current(self, version: WorkerDeploymentVersion) -> str | None:
        """Makes the version current; None on success, else why not (yet)."""
        try:
            client = await self.client()
            await make_current(
                client,
                version,
                MAKE_CURRENT_IDENTITY,
                rpc_timeout=timedelta(seconds=RPC_TIMEOUT),
            )
        except Exception as err:
            self._client = None
            return _first_line(err)
        return None


def own_pollers(pid: int, started_at: datetime | None, pollers: list[Poller]) -> list[Poller]:
    """The pollers of this worker process: its default identity is `PID@host`, and failing
    that, a poller seen since the process started (entries of dead workers linger)."""
    mine = [p for p in pollers if p.identity.startswith(f"{pid}@")]
    if not mine and started_at is not None:
        mine = [p for p in pollers if p.last_access is not None and p.last_access >= started_at]
    return mine


def worker_health(task_queue: str, mine: list[Poller], pollers: list[Poller]) -> Health:
    """Healthy when one of the task queue's pollers is this worker (`own_pollers`)."""
    if mine:
        return Health(True, f"polling task queue {task_queue} as {mine[0].identity}")
    if pollers:
        others = ", ".join(p.identity for p in pollers[:3])
        return Health(False, f"not polling task queue {task_queue} yet (other pollers: {others})")
    return Health(False, f"not polling task queue {task_queue} yet")
