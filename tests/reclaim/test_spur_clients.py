"""keeper's spur clients over real loopback gRPC: the token, leader redirects, deadlines and
typed errors of SpurController, and SpurAgents' cancel outcomes."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from keeper.runtime.reclaim.agent_client import (
    AgentCancelTimedOut,
    AgentUnreachable,
    SpurAgents,
    agent_address,
)
from keeper.runtime.reclaim.controller_client import SpurController
from keeper.runtime.reclaim.credentials import SpurToken, SpurTokenError
from keeper.runtime.reclaim.spur_errors import (
    SpurDenied,
    SpurRedirectLoop,
    SpurRejected,
    SpurTimedOut,
    SpurUnavailable,
)
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

TOKEN = "eyJhbGciOiJIUzI1NiJ9.keeper-test-token.sig"


class Controller(slurm_pb2_grpc.SlurmControllerServicer):
    """One replica. `redirect_to` makes it a follower naming that leader; `fail` aborts every
    call with a status whose details echo the caller's authorization header."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, dict[str, Any]]] = []
        self.redirect_to: str | None = None
        self.redirect_in_headers = False
        self.fail: grpc.StatusCode | None = None
        self.slow = False

    async def _answer(self, name: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        metadata = dict(context.invocation_metadata() or ())
        self.calls.append((name, request, metadata))
        if self.slow:
            await asyncio.sleep(30)
        if self.redirect_to is not None:
            leader = (("x-spur-leader", self.redirect_to),)
            if self.redirect_in_headers:
                await context.send_initial_metadata(leader)
            else:
                context.set_trailing_metadata(leader)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not the Raft leader")
        if self.fail is not None:
            await context.abort(self.fail, f"rejected {metadata.get('authorization', '')}")

    async def GetJobs(
        self, request: slurm_pb2.GetJobsRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.GetJobsResponse:
        await self._answer("GetJobs", request, context)
        jobs = [slurm_pb2.JobInfo(job_id=j) for j in request.job_ids]
        return slurm_pb2.GetJobsResponse(jobs=jobs)

    async def GetJob(
        self, request: slurm_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.JobInfo:
        await self._answer("GetJob", request, context)
        if request.job_id != 7:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} not found")
        return slurm_pb2.JobInfo(job_id=7, name="train", state=slurm_pb2.JOB_RUNNING)

    async def GetNodes(
        self, request: slurm_pb2.GetNodesRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.GetNodesResponse:
        await self._answer("GetNodes", request, context)
        return slurm_pb2.GetNodesResponse(nodes=[slurm_pb2.NodeInfo(name="n1")])

    async def DrainNode(
        self, request: slurm_pb2.DrainNodeRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.DrainNodeResponse:
        await self._answer("DrainNode", request, context)
        return slurm_pb2.DrainNodeResponse(actual_state="draining", running_jobs=2)

    async def UpdateNode(
        self, request: slurm_pb2.UpdateNodeRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        await self._answer("UpdateNode", request, context)
        if request.HasField("state") and request.state not in slurm_pb2.NodeState.values():
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid node state")
        return empty_pb2.Empty()

    async def Ping(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.PingResponse:
        await self._answer("Ping", request, context)
        return slurm_pb2.PingResponse(hostname="ctld-1")


class Agent(slurm_pb2_grpc.SlurmAgentServicer):
    def __init__(self) -> None:
        self.cancels: list[tuple[slurm_pb2.AgentCancelJobRequest, dict[str, Any]]] = []
        self.slow = False

    async def CancelJob(
        self, request: slurm_pb2.AgentCancelJobRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        self.cancels.append((request, dict(context.invocation_metadata() or ())))
        if self.slow:
            await asyncio.sleep(30)
        return empty_pb2.Empty()


Serve = Callable[[Any], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[grpc.aio.Server] = []

    async def start(servicer: Any) -> str:
        server = grpc.aio.server()
        if isinstance(servicer, Agent):
            slurm_pb2_grpc.add_SlurmAgentServicer_to_server(servicer, server)
        else:
            slurm_pb2_grpc.add_SlurmControllerServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        await server.stop(None)


def _dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _token(value: str = TOKEN) -> SpurToken:
    return SpurToken(environ={"KEEPER_SPUR_TOKEN": value})


# ------------------------------------------------------------- the token


async def test_the_token_is_sent_as_a_bearer_header(serve: Serve) -> None:
    controller = Controller()
    async with SpurController(await serve(controller), token=_token(), timeout=5) as client:
        jobs = await client.get_jobs(
            states=[slurm_pb2.JOB_RUNNING], job_ids=[3, 4], nodes=["n1"], user=""
        )
    assert [j.job_id for j in jobs] == [3, 4]
    ((name, request, metadata),) = controller.calls
    assert name == "GetJobs" and list(request.nodes) == ["n1"]
    assert list(request.states) == [slurm_pb2.JOB_RUNNING]
    assert metadata["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("token", [None, SpurToken(environ={}), SpurToken(environ={"X": "y"})])
async def test_without_a_token_no_authorization_header_is_sent(
    serve: Serve, token: SpurToken | None
) -> None:
    controller = Controller()
    async with SpurController(await serve(controller), token=token, timeout=5) as client:
        await client.ping()
    assert "authorization" not in controller.calls[0][2]


async def test_a_token_file_is_read_again_when_it_changes(serve: Serve, tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-token-value\n")
    controller = Controller()
    async with SpurController(
        await serve(controller), token=SpurToken(path=path), timeout=5
    ) as client:
        await client.ping()
        path.write_text("the-rotated-token-value\n")
        await client.ping()
    sent = [metadata["authorization"] for _, _, metadata in controller.calls]
    assert sent == ["Bearer first-token-value", "Bearer the-rotated-token-value"]


@pytest.mark.parametrize("bad", ["secret-part other", "secret-part\nline2", "secret-part\x00"])
def test_a_token_that_cannot_be_a_header_is_refused_without_showing_it(bad: str) -> None:
    with pytest.raises(SpurTokenError) as caught:
        _token(bad)
    assert "secret-part" not in str(caught.value)
    assert "KEEPER_SPUR_TOKEN" in str(caught.value)


def test_a_token_file_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpurTokenError, match=r"spur token file .* cannot be read"):
        SpurToken(path=tmp_path / "missing")


def test_the_token_never_shows_in_a_repr(tmp_path: Path) -> None:
    assert TOKEN not in repr(_token()) and TOKEN not in str(_token())
    client = SpurController("127.0.0.1:1", token=_token())
    assert TOKEN not in repr(client)


# ------------------------------------------------------------- leader redirects


async def test_a_redirect_is_followed_and_the_leader_remembered(serve: Serve) -> None:
    follower, leader = Controller(), Controller()
    leader_address = await serve(leader)
    follower.redirect_to = leader_address
    async with SpurController(await serve(follower), token=_token(), timeout=5) as client:
        answer = await client.drain_node("n1", "stale allocation")
        await client.update_node("n1", reason="reclaiming")
        assert client.leader == leader_address
    assert (answer.actual_state, answer.running_jobs) == ("draining", 2)
    assert [name for name, _, _ in follower.calls] == ["DrainNode"]
    assert [name for name, _, _ in leader.calls] == ["DrainNode", "UpdateNode"]
    assert leader.calls[0][2]["authorization"] == f"Bearer {TOKEN}"
    update = leader.calls[1][1]
    assert update.reason == "reclaiming" and not update.HasField("state")


async def test_a_leader_that_stops_answering_is_forgotten(serve: Serve) -> None:
    follower, leader = Controller(), Controller()
    server = grpc.aio.server()
    slurm_pb2_grpc.add_SlurmControllerServicer_to_server(leader, server)
    follower.redirect_to = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    async with SpurController(await serve(follower), timeout=5) as client:
        await client.ping()
        assert client.leader == follower.redirect_to
        await server.stop(None)
        with pytest.raises(SpurUnavailable):
            await client.ping()
        assert client.leader is None
        follower.redirect_to = None  # the follower was elected
        assert (await client.ping()).hostname == "ctld-1"
    assert len(follower.calls) == 2


async def test_a_redirect_in_the_response_headers_is_followed_too(serve: Serve) -> None:
    follower, leader = Controller(), Controller()
    follower.redirect_to = await serve(leader)
    follower.redirect_in_headers = True
    async with SpurController(await serve(follower), timeout=5) as client:
        assert (await client.ping()).hostname == "ctld-1"
    assert len(leader.calls) == 1


async def test_a_redirect_loop_is_an_error(serve: Serve) -> None:
    a, b = Controller(), Controller()
    a_address, b_address = await serve(a), await serve(b)
    a.redirect_to, b.redirect_to = b_address, a_address
    async with SpurController(a_address, timeout=5) as client:
        with pytest.raises(SpurRedirectLoop) as caught:
            await client.get_nodes()
    assert (len(a.calls), len(b.calls)) == (1, 1)
    assert f"{a_address} -> {b_address} -> {a_address}" in str(caught.value)


async def test_redirects_stop_after_the_hop_limit(serve: Serve) -> None:
    chain = [Controller() for _ in range(3)]
    addresses = [await serve(c) for c in chain]
    chain[0].redirect_to, chain[1].redirect_to = addresses[1], addresses[2]
    async with SpurController(addresses[0], timeout=5, max_hops=1) as client:
        with pytest.raises(SpurUnavailable, match="still redirected after 1 hops"):
            await client.get_nodes()
    assert [len(c.calls) for c in chain] == [1, 1, 0]


# ------------------------------------------------------------- deadlines and errors


async def test_the_deadline_bounds_a_call_to_a_slow_controller(serve: Serve) -> None:
    controller = Controller()
    controller.slow = True
    async with SpurController(await serve(controller), timeout=0.2) as client:
        started = time.monotonic()
        with pytest.raises(SpurTimedOut):
            await client.get_jobs()
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "code", [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED]
)
async def test_a_refused_token_is_denied_naming_the_setting_not_the_token(
    serve: Serve, code: grpc.StatusCode
) -> None:
    controller = Controller()
    controller.fail = code
    async with SpurController(await serve(controller), token=_token(), timeout=5) as client:
        with pytest.raises(SpurDenied) as caught:
            await client.drain_node("n1", "x")
    assert caught.value.code is code
    assert "KEEPER_SPUR_TOKEN" in str(caught.value)
    assert "keeper-test-token" not in str(caught.value)


async def test_an_invalid_request_is_rejected(serve: Serve) -> None:
    async with SpurController(await serve(Controller()), timeout=5) as client:
        with pytest.raises(SpurRejected, match="invalid node state"):
            await client.update_node("n1", state=99)  # type: ignore[arg-type]


async def test_get_job_answers_none_for_a_job_the_controller_does_not_know(serve: Serve) -> None:
    async with SpurController(await serve(Controller()), timeout=5) as client:
        job = await client.get_job(7)
        assert job is not None and job.name == "train"
        assert await client.get_job(8) is None


async def test_an_unreachable_controller_is_unavailable() -> None:
    async with SpurController(f"127.0.0.1:{_dead_port()}", token=_token(), timeout=5) as client:
        with pytest.raises(SpurUnavailable) as caught:
            await client.ping()
    assert not isinstance(caught.value, SpurTimedOut)
    assert TOKEN not in str(caught.value)


# ------------------------------------------------------------- agents


def test_an_agent_address_takes_the_default_port_and_brackets_an_ipv6_host() -> None:
    assert agent_address("10.0.0.5", 0) == "10.0.0.5:6818"
    assert agent_address("fd00::5", 7000) == "[fd00::5]:7000"
    assert agent_address("node-1.example", 6818) == "node-1.example:6818"


async def test_a_cancel_reaches_the_agent_with_the_token(serve: Serve) -> None:
    agent = Agent()
    host, port = (await serve(agent)).rsplit(":", 1)
    async with SpurAgents(token=_token(), timeout=5) as agents:
        await agents.cancel_job(host, int(port), job_id=41, signal=0)
    ((request, metadata),) = agent.cancels
    assert (request.job_id, request.signal) == (41, 0)
    assert metadata["authorization"] == f"Bearer {TOKEN}"


async def test_a_cancel_without_an_answer_times_out_and_may_have_acted(serve: Serve) -> None:
    agent = Agent()
    agent.slow = True
    host, port = (await serve(agent)).rsplit(":", 1)
    async with SpurAgents(timeout=0.2) as agents:
        with pytest.raises(AgentCancelTimedOut, match="may have acted"):
            await agents.cancel_job(host, int(port), job_id=41, signal=9)
    assert len(agent.cancels) == 1


async def test_a_cancel_to_an_agent_not_listening_is_unreachable() -> None:
    async with SpurAgents(timeout=5) as agents:
        with pytest.raises(AgentUnreachable) as caught:
            await agents.cancel_job("127.0.0.1", _dead_port(), job_id=41, signal=0)
    assert not isinstance(caught.value, AgentCancelTimedOut)


async def test_the_channel_cache_is_bounded(serve: Serve) -> None:
    first, second = Agent(), Agent()
    a, b = await serve(first), await serve(second)
    async with SpurAgents(timeout=5, max_channels=1) as agents:
        for address in (a, b, b):
            host, port = address.rsplit(":", 1)
            await agents.cancel_job(host, int(port), job_id=1, signal=0)
        assert agents.cached == (b,)
    assert (len(first.cancels), len(second.cancels)) == (1, 2)
