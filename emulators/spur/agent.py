"""One node agent: its own SlurmAgent gRPC server, and the heartbeat it sends the controller.

The agent dials whatever controller address it was given (the emulator's controller, or a
proxy in front of it), registers, then beats every interval; a NOT_FOUND heartbeat makes it
register again, which is the only way spur ever asks an agent to re-register.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import empty_pb2

from emulators.clock import Clock
from emulators.spur.config import SpurEmulatorConfig
from emulators.spur.holdings import AgentState, CancelRecord
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

log = logging.getLogger("emulators.spur")


class AgentDown(RuntimeError):
    """The agent is switched off (the `down` knob): it sends nothing."""


class Agent(slurm_pb2_grpc.SlurmAgentServicer):
    def __init__(
        self,
        state: AgentState,
        config: SpurEmulatorConfig,
        port: int,
        clock: Clock,
        controller_address: Callable[[], str],
        live_here: Callable[[int, str], bool],
    ) -> None:
        self.state = state
        # Host, kill grace, heartbeat interval, RPC deadline and token; it listens on `port`.
        self.config = config
        self._listen_port = port
        self.clock = clock
        self.controller_address = controller_address
        # (job_id, controller node name) -> the controller has that run active there.
        self.live_here = live_here
        self.registered = False
        self.beats: list[dict[str, Any]] = []
        # Completion reports sent (ReportJobStatus), and what the controller answered.
        self.reports: list[dict[str, Any]] = []
        self._server: grpc.aio.Server | None = None
        self._port: int | None = None
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.Task[None] | None = None
        self._timers: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        server = grpc.aio.server()
        slurm_pb2_grpc.add_SlurmAgentServicer_to_server(self, server)
        self._port = server.add_insecure_port(f"{self.config.host}:{self._listen_port}")
        await server.start()
        self._server = server
        # spurd registers at startup, before its first heartbeat.
        with contextlib.suppress(grpc.aio.AioRpcError, AgentDown):
            await self.register()
        interval = self.config.heartbeat_interval
        if interval:
            self._loop = asyncio.create_task(self._beat_forever(interval), name=self.state.node)

    async def stop(self) -> None:
        tasks = [t for t in (self._loop, *self._timers) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._loop = None
        self._timers.clear()
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        if self._server is not None:
            await self._server.stop(grace=0)
            self._server = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("agent not started")
        return self._port

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.port}"

    # ------------------------------------------------------------- talking to the controller

    def _stub(self) -> slurm_pb2_grpc.SlurmControllerStub:
        # One channel for the agent's life: the controller address is fixed at start.
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.controller_address())
        return slurm_pb2_grpc.SlurmControllerStub(self._channel)

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        token = self.config.token
        return (("authorization", f"Bearer {token}"),) if token else ()

    async def register(self) -> None:
        if self.state.knobs.down:
            raise AgentDown(f"agent {self.state.node} is down")
        state = self.state
        gpus = [slurm_pb2.GpuResource(device_id=i, gpu_type="mi300x") for i in range(state.gpus)]
        request = slurm_pb2.RegisterAgentRequest(
            hostname=state.hostname,
            resources=slurm_pb2.ResourceSet(cpus=state.cpus, memory_mb=state.memory_mb, gpus=gpus),
            version="spur-emulator",
            address=self.config.host,
            port=self.port,
        )
        await self._stub().RegisterAgent(
            request, metadata=self._metadata(), timeout=self.config.agent_rpc_timeout
        )
        self.registered = True

    async def beat_now(self) -> list[int]:
        """Send one heartbeat now; returns the job ids it carried."""
        if self.state.knobs.down:
            raise AgentDown(f"agent {self.state.node} is down")
        if not self.registered:
            await self.register()
        sent = self.state.reported()
        request = slurm_pb2.HeartbeatRequest(
            hostname=self.state.hostname,
            cpu_load=100,
            free_memory_mb=self.state.memory_mb // 2,
            # Only job_id, like spurd: state stays JOB_PENDING and exit_code 0.
            running_jobs=[slurm_pb2.RunningJobStatus(job_id=job_id) for job_id in sent],
        )
        outcome = "ok"
        try:
            await self._stub().Heartbeat(
                request, metadata=self._metadata(), timeout=self.config.agent_rpc_timeout
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                self._record_beat(sent, exc.code().name)
                raise
            outcome = "not_found"
            self.registered = False
            await self.register()
        self._record_beat(sent, outcome)
        return sent

    def _record_beat(self, sent: list[int], outcome: str) -> None:
        self.beats.append({"at": self.clock.now(), "running_jobs": sent, "outcome": outcome})
        del self.beats[:-50]  # the recent ones are what anybody looks at

    async def _beat_forever(self, interval: float) -> None:
        # spurd's tokio interval: the first tick fires at once.
        while True:
            if not self.state.knobs.down:
                try:
                    await self.beat_now()
                except (grpc.aio.AioRpcError, AgentDown) as exc:
                    log.warning("agent %s: heartbeat failed: %s", self.state.node, exc)
            await asyncio.sleep(interval)

    async def restart(self, keep_holdings: bool) -> None:
        """A new spurd process: new start time, holdings kept or lost, registers again."""
        self.state.restart(self.clock.now(), keep_holdings)
        self.registered = False
        if not self.state.knobs.down:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self.register()

    # ------------------------------------------------------------- SlurmAgent

    async def CancelJob(self, request: Any, context: Any) -> empty_pb2.Empty:
        knobs = self.state.knobs
        delay = knobs.cancel_delay
        act = delay <= 0 or knobs.cancel_acts
        live = self.live_here(request.job_id, self.state.node)
        record = self.state.receive_cancel(
            request.job_id, request.signal, live, self.clock.now(), act=act
        )
        if record.action in ("sigterm", "signal"):
            self._later(self.config.kill_grace, record)
        elif record.action == "sigkill":
            self._spawn(self.report_finished(record), f"{self.state.node}-report-{record.job_id}")
        if delay > 0:
            # Longer than the caller's deadline: the caller sees DEADLINE_EXCEEDED.
            await asyncio.sleep(delay)
        return empty_pb2.Empty()

    def _later(self, grace: float, record: CancelRecord) -> None:
        async def fire() -> None:
            await asyncio.sleep(grace)
            if self.state.after_grace(record) in ("sigkill", "terminated"):
                await self.report_finished(record)

        self._spawn(fire(), f"{self.state.node}-kill-{record.job_id}")

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def report_finished(self, record: CancelRecord) -> None:
        """spurd's monitor loop: the process is reaped and gone from the running map, then
        the completion goes to the controller. A signalled process reports COMPLETED with
        exit code 0 and the signal (spur's validator ties state to exit code; the controller
        derives the outcome from the signal). The reporting node is the agent's own host
        name; the run attempt is the one it launched."""
        if self.state.knobs.down or not self.state.knobs.reports:
            return
        signal = 9 if record.action in ("sigkill", "sigterm") else 15
        request = slurm_pb2.ReportJobStatusRequest(
            job_id=record.job_id,
            state=slurm_pb2.JOB_COMPLETED,
            exit_code=0,
            message="exit_code=0",
            reporting_node=self.state.hostname,
            signal=signal,
            run_attempt=record.run_attempt or 0,
        )
        outcome = "ok"
        try:
            await self._stub().ReportJobStatus(
                request, metadata=self._metadata(), timeout=self.config.agent_rpc_timeout
            )
        except grpc.aio.AioRpcError as exc:
            # spurd logs and gives up on a non-retryable answer (NOT_FOUND for a job the
            # controller lost, INVALID_ARGUMENT for one it moved elsewhere).
            outcome = exc.code().name
        self.reports.append(
            {"at": self.clock.now(), "job_id": record.job_id, "signal": signal,
             "outcome": outcome}
        )  # fmt: skip
        del self.reports[:-50]

    def pending_kills(self) -> int:
        return len(self._timers)
