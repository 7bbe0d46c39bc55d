"""The heartbeat tap: a gRPC pass-through that spur agents use as their controller address.

Every RPC of every service is forwarded to the real controller as bytes: the request messages,
the caller's metadata and deadline go up; the upstream's headers, messages, trailers, status
code and details come back, so the agent cannot tell the tap from the controller (leader
redirects and NOT_FOUND "is the node registered?" included). Nothing is parsed on the way.

RegisterAgent, Heartbeat and ReportJobStatus requests are also copied, with the upstream's
final status, into a bounded queue. A task drains it, decodes each copy and hands a
`TapEvent` to the observer.
A full queue drops the event, a bad message or a raising observer is counted: the forwarded
call never waits for, or learns about, any of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import grpc
from google.protobuf.message import DecodeError, Message

from keeper.domain.common.secret_text import scrub
from keeper.wire.spur import slurm_pb2

log = logging.getLogger(__name__)

REGISTER_AGENT = "/slurm.SlurmController/RegisterAgent"
HEARTBEAT = "/slurm.SlurmController/Heartbeat"
# An agent's word that it reaped a job's process (spurd's monitor loop, after it removed the
# job from its running map): release evidence for job reclaim.
REPORT_JOB_STATUS = "/slurm.SlurmController/ReportJobStatus"
_OBSERVED: dict[str, type[Message]] = {
    REGISTER_AGENT: slurm_pb2.RegisterAgentRequest,
    HEARTBEAT: slurm_pb2.HeartbeatRequest,
    REPORT_JOB_STATUS: slurm_pb2.ReportJobStatusRequest,
}
DEFAULT_QUEUE_SIZE = 4096


# Methods the proto declares unary take the unary path; any other path, declared or not,
# streams. A method spur adds later is forwarded all the same, only less cheaply.
UNARY_METHODS = frozenset(
    f"/{service.full_name}/{method.name}"
    for service in slurm_pb2.DESCRIPTOR.services_by_name.values()
    for method in service.methods
    if not method.client_streaming and not method.server_streaming
)

# The transport sets these for each hop itself; passing them on would duplicate or contradict it.
_HOP_HEADERS = frozenset(
    {"content-type", "te", "user-agent", "host", "connection", "content-length", "trailer"}
)

ObservedRequest = (
    slurm_pb2.RegisterAgentRequest | slurm_pb2.HeartbeatRequest | slurm_pb2.ReportJobStatusRequest
)
Observer = Callable[["TapEvent"], Awaitable[None]]
_Metadata = tuple[tuple[str, str | bytes], ...]


@dataclass(frozen=True, slots=True, repr=False)
class TapEvent:
    """One observed request. `status` is what the upstream answered the agent."""

    method: str  # the full path: REGISTER_AGENT, HEARTBEAT or REPORT_JOB_STATUS
    message: ObservedRequest
    peer: str  # the agent's gRPC peer, e.g. "ipv4:10.0.0.7:40112"
    received_at: datetime  # UTC, when the tap received the call
    status: grpc.StatusCode

    def __repr__(self) -> str:
        # The message carries join and node tokens; a repr in a log line must not.
        m = self.message
        host = m.reporting_node if isinstance(m, slurm_pb2.ReportJobStatusRequest) else m.hostname
        return (
            f"TapEvent(method={self.method!r}, hostname={host!r}, "
            f"peer={self.peer!r}, received_at={self.received_at.isoformat()}, "
            f"status={self.status.name})"
        )


@dataclass(slots=True)
class TapCounters:
    forwarded: int = 0  # RPCs of any method answered to the caller, whatever the status
    observed: int = 0  # events handed to the observer (including those it raised on)
    dropped: int = 0  # events not queued because the queue was full
    observer_errors: int = 0  # observer calls that raised
    decode_errors: int = 0  # observed requests that did not parse


@dataclass(frozen=True, slots=True)
class _Copy:
    method: str
    payload: bytes
    peer: str
    received_at: datetime
    status: grpc.StatusCode


def _forwardable(metadata: _Metadata | None) -> _Metadata:
    return tuple(
        (key, value)
        for key, value in metadata or ()
        if not key.startswith((":", "grpc-")) and key not in _HOP_HEADERS
    )


class HeartbeatTap:
    """Listens on host:port (port 0 picks a free one; read `port` after `start()`) and forwards
    to the controller at `upstream` ("host:port")."""

    def __init__(
        self,
        upstream: str,
        observer: Observer,
        *,
        host: str = "[::]",
        port: int = 0,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self._upstream_target = upstream
        self._observer = observer
        self._host = host
        self._requested_port = port
        self._queue_size = queue_size
        self.counters = TapCounters()
        self._port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self._queue: asyncio.Queue[_Copy] | None = None
        self._drainer: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"HeartbeatTap(upstream={self._upstream_target!r}, port={self._port})"

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the tap is not started")
        return self._port

    @property
    def queued(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the tap is already started")
        # No size limit of the tap's own: the controller enforces its limits, and its answer
        # is the one the agent should get.
        unlimited = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        self._channel = grpc.aio.insecure_channel(self._upstream_target, options=unlimited)
        self._queue = asyncio.Queue(maxsize=self._queue_size)
        self._drainer = asyncio.get_running_loop().create_task(self._drain())
        server = grpc.aio.server(options=unlimited)
        server.add_generic_rpc_handlers((_PassThrough(self),))
        try:
            self._port = server.add_insecure_port(f"{self._host}:{self._requested_port}")
            await server.start()
        except BaseException:
            await self._close_rest()
            raise
        self._server = server

    async def stop(self, grace: float | None = 1.0) -> None:
        """Stop listening; calls in flight get `grace` seconds to finish. Queued events that
        were not yet delivered are discarded."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        await self._close_rest()

    async def _close_rest(self) -> None:
        drainer, self._drainer = self._drainer, None
        if drainer is not None:
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer
        self._queue = None  # what was still queued is discarded, and no drained() waits on it
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    # ------------------------------------------------------------- forwarding

    async def forward_unary(
        self, method: str, request: bytes, context: grpc.aio.ServicerContext
    ) -> bytes:
        """A method the proto declares unary: one message each way, the cheaper call shape."""
        received_at = datetime.now(UTC)
        assert self._channel is not None
        call = self._channel.unary_unary(method)(
            request,
            metadata=_forwardable(context.invocation_metadata()),
            timeout=context.time_remaining(),
        )
        try:
            await self._relay_headers(call, context)
            try:
                response: bytes | None = await call
            except grpc.aio.AioRpcError:
                response = None
            code = await call.code()
            trailers = _forwardable(await call.trailing_metadata())
            details = await call.details()
        finally:
            call.cancel()
        self.counters.forwarded += 1
        if method in _OBSERVED:
            self._offer(_Copy(method, request, context.peer(), received_at, code))
        if code is not grpc.StatusCode.OK or response is None:
            await context.abort(code, details or "", trailers)
        context.set_trailing_metadata(trailers)
        return response

    async def forward_stream(
        self, method: str, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Any other method: its shape is unknown, and stream-stream carries every shape."""
        assert self._channel is not None
        call = self._channel.stream_stream(method)(
            requests,
            metadata=_forwardable(context.invocation_metadata()),
            timeout=context.time_remaining(),
        )
        try:
            await self._relay_headers(call, context)
            with contextlib.suppress(grpc.aio.AioRpcError):
                async for response in call:
                    yield response
            code = await call.code()
            context.set_trailing_metadata(_forwardable(await call.trailing_metadata()))
            if code is not grpc.StatusCode.OK:
                context.set_code(code)
                context.set_details(await call.details())
        finally:
            # The agent went away or its deadline passed: the upstream call goes with it.
            call.cancel()
        self.counters.forwarded += 1

    @staticmethod
    async def _relay_headers(call: grpc.aio.Call, context: grpc.aio.ServicerContext) -> None:
        # Sent only when the upstream sent some: a Trailers-Only error (how tonic answers
        # most failures) must stay Trailers-Only for the agent.
        headers = _forwardable(await call.initial_metadata())
        if headers:
            await context.send_initial_metadata(headers)

    def _offer(self, copy: _Copy) -> None:
        assert self._queue is not None
        try:
            self._queue.put_nowait(copy)
        except asyncio.QueueFull:
            self.counters.dropped += 1

    async def drained(self) -> None:
        """Wait until every event queued so far has been handled (delivered, dropped as
        undecodable, or raised on by the observer)."""
        if self._queue is not None:
            await self._queue.join()

    async def _drain(self) -> None:
        assert self._queue is not None
        while True:
            copy = await self._queue.get()
            try:
                await self._deliver(copy)
            finally:
                self._queue.task_done()

    async def _deliver(self, copy: _Copy) -> None:
        message = _OBSERVED[copy.method]()
        try:
            message.ParseFromString(copy.payload)
        except DecodeError:
            self.counters.decode_errors += 1
            return
        event = TapEvent(copy.method, message, copy.peer, copy.received_at, copy.status)  # type: ignore[arg-type]
        self.counters.observed += 1
        try:
            await self._observer(event)
        except Exception as exc:  # any observer failure is counted, never fatal to the tap
            self.counters.observer_errors += 1
            tokens = [getattr(message, "node_token", ""), getattr(message, "join_token", "")]
            log.warning(
                "tap observer failed on %r: %s: %s",
                event,
                type(exc).__name__,
                scrub(str(exc), tokens),
            )


class _PassThrough(grpc.GenericRpcHandler):
    """Claims every method, with no (de)serializers so the messages stay bytes."""

    def __init__(self, tap: HeartbeatTap) -> None:
        self._tap = tap

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        # Partials of the tap's methods, not wrapper functions: grpc picks how to run a
        # handler by inspecting it, and an extra coroutine layer would cost every call.
        if method in UNARY_METHODS:
            return grpc.unary_unary_rpc_method_handler(
                functools.partial(self._tap.forward_unary, method)
            )
        return grpc.stream_stream_rpc_method_handler(
            functools.partial(self._tap.forward_stream, method)
        )
