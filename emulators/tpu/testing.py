"""Helpers for driving a TpuEmulator with the real client in tests.

The pytest fixtures built on these live in tests/emulator_fixtures.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.tpu_v2 import TpuAsyncClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport
from google.cloud.tpu_v2.types import cloud_tpu
from google.protobuf import duration_pb2

from emulators.lifecycle import cancelled
from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator

PROJECT = "proj"
ZONE = "us-central2-b"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
# A prefix of its own so these tests never share addresses with other suites' emulators.
TEST_IP_PREFIX = "127.29"

# Slow enough that nothing moves on its own during a test: tests drive time with advance().
STEPPED = Scenario(assign_after=10, active_after=10, ips_after=5, delete_duration=3)


def qr_name(qr_id: str) -> str:
    return f"{PARENT}/queuedResources/{qr_id}"


def node_name(node_id: str) -> str:
    return f"{PARENT}/nodes/{node_id}"


def free_port() -> int:
    # Bound on the wildcard address so the VMs' (ip, port) cannot clash with anyone else.
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def node_body(
    accelerator_type: str = "v4-16",
    labels: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
) -> cloud_tpu.Node:
    return cloud_tpu.Node(
        accelerator_type=accelerator_type,
        runtime_version="tpu-ubuntu2204-base",
        labels=labels or {},
        metadata=metadata or {},
    )


def qr_body(
    node_id: str | None = None,
    *,
    multislice: tuple[str, int] | None = None,
    accelerator_type: str = "v4-16",
    labels: dict[str, str] | None = None,
    metadata: dict[str, str] | None = None,
    valid_until_seconds: float | None = None,
) -> cloud_tpu.QueuedResource:
    spec = cloud_tpu.QueuedResource.Tpu.NodeSpec(
        parent=PARENT, node=node_body(accelerator_type, labels, metadata)
    )
    if multislice is not None:
        prefix, count = multislice
        spec.multislice_params = cloud_tpu.QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_id_prefix=prefix, node_count=count
        )
    else:
        spec.node_id = node_id or "node"
    qr = cloud_tpu.QueuedResource(tpu=cloud_tpu.QueuedResource.Tpu(node_spec=[spec]))
    if valid_until_seconds is not None:
        qr.queueing_policy = cloud_tpu.QueuedResource.QueueingPolicy(
            valid_until_duration=duration_pb2.Duration(seconds=int(valid_until_seconds))
        )
    return qr


async def create_qr(client: TpuAsyncClient, qr_id: str, request_id: str = "", **body: Any) -> Any:
    body.setdefault("node_id", qr_id)
    if "multislice" in body:
        body.pop("node_id")
    request = cloud_tpu.CreateQueuedResourceRequest(
        parent=PARENT,
        queued_resource_id=qr_id,
        queued_resource=qr_body(**body),
        request_id=request_id,
    )
    return await client.create_queued_resource(request=request, timeout=5)


async def qr_state(client: TpuAsyncClient, qr_id: str) -> str:
    qr = await client.get_queued_resource(name=qr_name(qr_id), timeout=5)
    return qr.state.state.name


async def wait_op(op: Any, limit: float = 5.0) -> Any:
    """Poll an operation quickly (the client's own poller starts at one second)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not await op.done():
        if loop.time() > deadline:
            raise TimeoutError(f"operation {op.operation.name} not done in {limit}s")
        await asyncio.sleep(0.02)
    return await op.result()


async def wait_until(
    predicate: Callable[[], bool], limit: float = 5.0, what: str = "condition"
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"{what} not reached in {limit}s")
        await asyncio.sleep(0.02)


def make_config(**overrides: Any) -> EmulatorConfig:
    values: dict[str, Any] = {
        "ip_prefix": TEST_IP_PREFIX,
        "vm_health_port": free_port(),
        "default_scenario": STEPPED,
        "tick_seconds": 0.05,
    }
    return EmulatorConfig(**{**values, **overrides})


def client_for(emu: TpuEmulator | str) -> tuple[TpuAsyncClient, grpc.aio.Channel]:
    """The real client on an insecure channel to an emulator (or a "host:port" target)."""
    target = emu if isinstance(emu, str) else emu.grpc_target
    channel = grpc.aio.insecure_channel(target)
    return TpuAsyncClient(transport=TpuGrpcAsyncIOTransport(channel=channel)), channel


if TYPE_CHECKING:
    from temporalio.testing import WorkflowEnvironment

log = logging.getLogger("emulators.tpu")


class ServerClock:
    """Moves an emulator's clock forward by whatever time the test server skips.

    Skipped hours exist only on the server; the emulated cloud must see them too for a
    scenario such as "assigned after four hours" to play out. Only the skipped part is
    added (server time gained minus real time passed since the first sync), since the
    emulator's own clock already runs in real time. What was added is kept as a running
    total against that one starting point, so the server's millisecond rounding cannot pile
    up (adding each positive step and dropping each negative one would run the clock fast),
    and syncs that overlap add a skip once. Following the skip rather than the absolute
    server time keeps this working after a test moved the emulator's clock ahead on its own.

    `sync` runs before every gRPC call the emulator answers as well as in the background:
    a call made just after the server jumped to a deadline must see the jump, and a poll
    loop alone may lose that race on a busy machine. The VMs' health ports and the control
    API are not covered: a test that needs them in step runs on the dev server.
    """

    def __init__(self, env: WorkflowEnvironment, emulator: TpuEmulator) -> None:
        self._env = env
        self._emulator = emulator
        self._start: tuple[datetime, float] | None = None
        self._added = 0.0

    async def sync(self) -> None:
        server = await self._env.get_current_time()
        real = asyncio.get_running_loop().time()
        if self._start is None:
            self._start = server, real
            return
        start_server, start_real = self._start
        skipped = (server - start_server).total_seconds() - (real - start_real)
        # Read after the await: a sync that fetched earlier and finishes later sees a
        # smaller total and adds nothing.
        if skipped > self._added:
            self._emulator.advance(skipped - self._added)
            self._added = skipped

    async def follow(self, every: float = 0.005) -> None:
        # Imported here, as WorkflowEnvironment is: the emulator itself never loads temporalio.
        from temporalio.service import RPCError

        while True:
            await asyncio.sleep(every)
            try:
                await self.sync()
            except RPCError as exc:
                # The server is gone (the test is tearing down): nothing left to follow.
                log.info("the emulator stopped following the test server's clock: %s", exc)
                return


@contextlib.asynccontextmanager
async def clock_following(
    env: WorkflowEnvironment, emulator: TpuEmulator, poll_every: float = 0.005
) -> AsyncIterator[None]:
    """The emulator's clock follows the test server's for the duration of the block: one
    clock per emulator at a time, since two would each add every skip."""
    if emulator.service.before_call is not None:
        raise RuntimeError("this emulator's clock already follows a test server")
    clock = ServerClock(env, emulator)
    await clock.sync()
    emulator.service.before_call = clock.sync
    task = asyncio.create_task(clock.follow(poll_every), name="emulator-follows-server-clock")
    try:
        yield
    finally:
        emulator.service.before_call = None
        await cancelled(task)
