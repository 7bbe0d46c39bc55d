"""The heartbeat tap: a byte-exact pass-through to the controller, with a side copy of
RegisterAgent and Heartbeat for an observer that can never slow or change the forwarding."""

from __future__ import annotations

import asyncio
import socket
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from keeper.runtime.reclaim.tap import HEARTBEAT, REGISTER_AGENT, HeartbeatTap, TapEvent
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

LEADER = "10.0.0.2:6817"


class Upstream(slurm_pb2_grpc.SlurmControllerServicer):
    """A controller that knows node "n1", records the raw request bytes and metadata it got,
    and answers unknown methods with their request reversed."""

    def __init__(self) -> None:
        self.raw: dict[str, list[bytes]] = defaultdict(list)
        self.metadata: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.remaining: list[float | None] = []
        self.redirect = False
        self.slow = False

    async def Heartbeat(
        self, request: slurm_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.HeartbeatResponse:
        self.metadata["Heartbeat"].append(dict(context.invocation_metadata() or ()))
        self.remaining.append(context.time_remaining())
        if self.slow:
            await asyncio.sleep(30)
        if self.redirect:
            context.set_trailing_metadata((("x-spur-leader", LEADER),))
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not the Raft leader")
        if request.hostname != "n1":
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"node {request.hostname} not found — is the node registered?",
            )
        await context.send_initial_metadata((("x-up-initial", "i"),))
        context.set_trailing_metadata((("x-up-trailing", "t"), ("x-up-bin", b"\x00\xff")))
        return slurm_pb2.HeartbeatResponse()

    async def RegisterAgent(
        self, request: slurm_pb2.RegisterAgentRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.RegisterAgentResponse:
        return slurm_pb2.RegisterAgentResponse(accepted=True, message="registered")

    async def Ping(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.PingResponse:
        return slurm_pb2.PingResponse(hostname="ctld", version="0.1")


class _Capture:
    # Stands in for a server to receive the generated handler table, so each request
    # deserializer can be wrapped to record the bytes that arrived.
    handlers: dict[str, grpc.RpcMethodHandler]

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.handlers = handlers


class _Echo(grpc.GenericRpcHandler):
    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        async def repeat(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            for n in range(3):
                yield request + bytes([n])

        if details.method.endswith("/Watch"):  # type: ignore[attr-defined]
            return grpc.unary_stream_rpc_method_handler(repeat)

        async def reverse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return request[::-1]

        return grpc.unary_unary_rpc_method_handler(reverse)


def _recording(name: str, deserialize: Callable[[bytes], Any], upstream: Upstream) -> Any:
    def record(payload: bytes) -> Any:
        upstream.raw[name].append(payload)
        return deserialize(payload)

    return record


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, int]]:
    servicer = Upstream()
    capture = _Capture()
    slurm_pb2_grpc.add_SlurmControllerServicer_to_server(servicer, capture)  # type: ignore[arg-type]
    wrapped = {
        name: handler._replace(  # type: ignore[attr-defined]
            request_deserializer=_recording(name, handler.request_deserializer, servicer)
        )
        for name, handler in capture.handlers.items()
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("slurm.SlurmController", wrapped), _Echo())
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, port
    await server.stop(None)


class Events:
    def __init__(self) -> None:
        self.seen: list[TapEvent] = []
        self.arrived = asyncio.Condition()

    async def __call__(self, event: TapEvent) -> None:
        async with self.arrived:
            self.seen.append(event)
            self.arrived.notify_all()

    async def wait(self, count: int) -> list[TapEvent]:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.seen) >= count), 5)
        return self.seen


@pytest.fixture
async def tap_for(
    upstream: tuple[Upstream, int],
) -> AsyncIterator[Callable[..., Any]]:
    started: list[tuple[HeartbeatTap, grpc.aio.Channel]] = []

    async def make(
        observer: Any = None, *, target: str | None = None, queue_size: int = 64
    ) -> tuple[HeartbeatTap, grpc.aio.Channel]:
        tap = HeartbeatTap(
            target or f"127.0.0.1:{upstream[1]}",
            observer or Events(),
            host="127.0.0.1",
            queue_size=queue_size,
        )
        await tap.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{tap.port}")
        started.append((tap, channel))
        return tap, channel

    yield make
    for tap, channel in started:
        await channel.close()
        await tap.stop(None)


def _beat(hostname: str = "n1", jobs: tuple[int, ...] = (41, 42)) -> slurm_pb2.HeartbeatRequest:
    return slurm_pb2.HeartbeatRequest(
        hostname=hostname,
        cpu_load=250,
        free_memory_mb=64_000,
        running_jobs=[slurm_pb2.RunningJobStatus(job_id=j) for j in jobs],
        node_token="node-token-value",
    )


def _undeclared_field(number: int, value: int) -> bytes:
    # A varint field the proto does not declare, as a newer agent might send.
    assert value < 128 and number < 16
    return bytes([number << 3, value])


async def test_request_bytes_arrive_unchanged_and_the_observer_sees_them_decoded(
    upstream: tuple[Upstream, int], tap_for: Callable[..., Any]
) -> None:
    servicer, _ = upstream
    events = Events()
    tap, channel = await tap_for(events)
    payload = _beat().SerializeToString() + _undeclared_field(15, 7)
    answer = await channel.unary_unary(HEARTBEAT)(payload, timeout=5)
    assert answer == slurm_pb2.HeartbeatResponse().SerializeToString()
    assert servicer.raw["Heartbeat"] == [payload]

    (event,) = await events.wait(1)
    assert event.method == HEARTBEAT
    assert isinstance(event.message, slurm_pb2.HeartbeatRequest)
    assert event.message.hostname == "n1"
    assert [j.job_id for j in event.message.running_jobs] == [41, 42]
    assert event.status is grpc.StatusCode.OK
    assert event.peer.startswith("ipv4:127.0.0.1:")
    assert "node-token-value" not in repr(event)
    assert tap.counters.forwarded == 1 and tap.counters.observed == 1


async def test_register_agent_is_observed_and_its_answer_returned(
    tap_for: Callable[..., Any],
) -> None:
    events = Events()
    _, channel = await tap_for(events)
    stub = slurm_pb2_grpc.SlurmControllerStub(channel)
    request = slurm_pb2.RegisterAgentRequest(hostname="n1", address="10.1.0.5", port=6818)
    answer = await stub.RegisterAgent(request, timeout=5)
    assert answer.accepted and answer.message == "registered"
    (event,) = await events.wait(1)
    assert event.method == REGISTER_AGENT
    assert event.message == request


async def test_metadata_goes_up_and_headers_and_trailers_come_back(
    upstream: tuple[Upstream, int], tap_for: Callable[..., Any]
) -> None:
    servicer, _ = upstream
    _, channel = await tap_for()
    call = channel.unary_unary(HEARTBEAT)(
        _beat().SerializeToString(),
        timeout=5,
        metadata=(("authorization", "Bearer agent-jwt"), ("x-agent", "a1"), ("x-t-bin", b"\x01")),
    )
    await call
    sent = servicer.metadata["Heartbeat"][0]
    assert sent["authorization"] == "Bearer agent-jwt"
    assert sent["x-agent"] == "a1" and sent["x-t-bin"] == b"\x01"
    assert ("x-up-initial", "i") in tuple(await call.initial_metadata())
    trailers = tuple(await call.trailing_metadata())
    assert ("x-up-trailing", "t") in trailers and ("x-up-bin", b"\x00\xff") in trailers


async def test_not_found_reaches_the_agent_with_its_details_and_is_observed(
    tap_for: Callable[..., Any],
) -> None:
    events = Events()
    _, channel = await tap_for(events)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await slurm_pb2_grpc.SlurmControllerStub(channel).Heartbeat(_beat("n9"), timeout=5)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == "node n9 not found — is the node registered?"
    (event,) = await events.wait(1)
    assert event.status is grpc.StatusCode.NOT_FOUND


async def test_a_leader_redirect_reaches_the_agent_unchanged(
    upstream: tuple[Upstream, int], tap_for: Callable[..., Any]
) -> None:
    upstream[0].redirect = True
    _, channel = await tap_for()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await slurm_pb2_grpc.SlurmControllerStub(channel).Heartbeat(_beat(), timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "not the Raft leader"
    assert ("x-spur-leader", LEADER) in tuple(caught.value.trailing_metadata())


@pytest.mark.parametrize("method", ["/slurm.SlurmController/Future", "/other.Thing/Do"])
async def test_methods_the_proto_does_not_declare_are_forwarded(
    method: str, tap_for: Callable[..., Any]
) -> None:
    tap, channel = await tap_for()
    assert await channel.unary_unary(method)(b"\x01\x02\x03", timeout=5) == b"\x03\x02\x01"
    assert tap.counters.forwarded == 1 and tap.counters.observed == 0


async def test_a_streaming_method_the_proto_does_not_declare_is_forwarded(
    tap_for: Callable[..., Any],
) -> None:
    tap, channel = await tap_for()
    call = channel.unary_stream("/slurm.SlurmController/Watch")(b"w", timeout=5)
    assert [m async for m in call] == [b"w\x00", b"w\x01", b"w\x02"]
    assert tap.counters.forwarded == 1


async def test_the_callers_deadline_is_the_upstream_deadline(
    upstream: tuple[Upstream, int], tap_for: Callable[..., Any]
) -> None:
    upstream[0].slow = True
    _, channel = await tap_for()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await slurm_pb2_grpc.SlurmControllerStub(channel).Heartbeat(_beat(), timeout=0.3)
    assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    (remaining,) = upstream[0].remaining
    # The deadline travels as a timeout in the grpc-timeout header, rounded by each hop's
    # clock: a few milliseconds either way, never the upstream's own default.
    assert remaining is not None and remaining <= 0.3 + 0.005


async def test_a_raising_observer_is_counted_and_forwarding_goes_on(
    tap_for: Callable[..., Any],
) -> None:
    async def broken(event: TapEvent) -> None:
        raise RuntimeError("observer bug")

    tap, channel = await tap_for(broken)
    stub = slurm_pb2_grpc.SlurmControllerStub(channel)
    for _ in range(3):
        await stub.Heartbeat(_beat(), timeout=5)
    await tap.drained()
    assert tap.counters.observer_errors == 3 and tap.counters.observed == 3
    assert tap.counters.forwarded == 3


async def test_a_full_queue_drops_events_and_forwarding_goes_on(
    tap_for: Callable[..., Any],
) -> None:
    release = asyncio.Event()

    async def stuck(event: TapEvent) -> None:
        await release.wait()

    tap, channel = await tap_for(stuck, queue_size=1)
    stub = slurm_pb2_grpc.SlurmControllerStub(channel)
    for _ in range(5):
        await stub.Heartbeat(_beat(), timeout=5)
    # One event is with the observer and one waits in the queue; the other three are dropped.
    assert tap.counters.forwarded == 5
    assert tap.counters.dropped >= 3
    release.set()


async def test_a_request_that_does_not_decode_is_counted_and_still_forwarded(
    upstream: tuple[Upstream, int], tap_for: Callable[..., Any]
) -> None:
    tap, channel = await tap_for()
    garbage = b"\x0a\xff\xff"  # field 1, a length past the end of the message
    with pytest.raises(grpc.aio.AioRpcError):
        await channel.unary_unary(HEARTBEAT)(garbage, timeout=5)
    await tap.drained()
    assert tap.counters.decode_errors == 1
    assert upstream[0].raw["Heartbeat"] == [garbage]
    assert tap.counters.forwarded == 1 and tap.counters.observed == 0


async def test_upstream_down_answers_unavailable(tap_for: Callable[..., Any]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    _, channel = await tap_for(target=f"127.0.0.1:{dead}")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await slurm_pb2_grpc.SlurmControllerStub(channel).Ping(empty_pb2.Empty(), timeout=5)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
