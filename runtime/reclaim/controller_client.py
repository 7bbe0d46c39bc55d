"""An async client of spur's `slurm.SlurmController`, the calls job reclaim makes.

Every call carries a deadline and the token metadata, and follows spur's Raft leader redirect:
a follower that cannot forward a write answers UNAVAILABLE with `x-spur-leader: host:port`.
The client dials that address and retries within the same deadline, a bounded number of hops,
and keeps calling the leader it found until that leader stops answering.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import Message

from keeper.runtime.reclaim.credentials import SpurToken
from keeper.runtime.reclaim.spur_errors import (
    SpurNotFound,
    SpurRedirectLoop,
    SpurTimedOut,
    SpurUnavailable,
    spur_error,
)
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

LEADER_HEADER = "x-spur-leader"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_HOPS = 3


def leader_of(exc: grpc.aio.AioRpcError) -> str | None:
    """The `x-spur-leader` address an UNAVAILABLE answer names, from its trailers or headers."""
    if exc.code() is not grpc.StatusCode.UNAVAILABLE:
        return None
    for metadata in (exc.trailing_metadata(), exc.initial_metadata()):
        for key, value in metadata or ():
            if key == LEADER_HEADER and isinstance(value, str) and _is_address(value.strip()):
                return value.strip()
    return None


def _is_address(value: str) -> bool:
    # host:port or [v6]:port; anything else (empty, a URL, a bare host) is not dialled.
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536 and "/" not in value)


class SpurController:
    """The controller at `target` ("host:port"). Use `async with` or call `aclose()`."""

    def __init__(
        self,
        target: str,
        *,
        token: SpurToken | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_hops: int = DEFAULT_MAX_HOPS,
    ) -> None:
        if not _is_address(target):
            raise ValueError(f"target {target!r} must be host:port")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_hops < 0:
            raise ValueError(f"max_hops must be zero or more, got {max_hops}")
        self._target = target
        self._token = token
        self._timeout = timeout
        self._max_hops = max_hops
        self._leader: str | None = None
        # The configured controller plus the leaders found; a cluster has a handful of replicas.
        self._channels: dict[str, tuple[grpc.aio.Channel, slurm_pb2_grpc.SlurmControllerStub]] = {}

    def __repr__(self) -> str:
        return (
            f"SpurController(target={self._target!r}, leader={self._leader!r}, "
            f"timeout={self._timeout})"
        )

    @property
    def leader(self) -> str | None:
        """The leader a redirect named, which later calls go to first."""
        return self._leader

    async def aclose(self) -> None:
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()

    async def __aenter__(self) -> SpurController:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------- calls

    async def get_jobs(
        self,
        *,
        states: Iterable[slurm_pb2.JobState.ValueType] = (),
        job_ids: Iterable[int] = (),
        nodes: Iterable[str] = (),
        user: str = "",
    ) -> list[slurm_pb2.JobInfo]:
        """Jobs matching every filter given. user="" lists every user's jobs, but only for an
        anonymous caller: spur replaces `user` with a verified caller's own name."""
        request = slurm_pb2.GetJobsRequest(
            states=list(states), job_ids=list(job_ids), nodes=list(nodes), user=user
        )
        response = await self._call("GetJobs", request)
        return list(response.jobs)

    async def get_job(self, job_id: int) -> slurm_pb2.JobInfo | None:
        """The job, or None when the controller does not know it (never stored or evicted)."""
        try:
            return await self._call("GetJob", slurm_pb2.GetJobRequest(job_id=job_id))
        except SpurNotFound:
            return None

    async def get_nodes(self) -> list[slurm_pb2.NodeInfo]:
        response = await self._call("GetNodes", slurm_pb2.GetNodesRequest())
        return list(response.nodes)

    async def drain_node(self, name: str, reason: str) -> slurm_pb2.DrainNodeResponse:
        return await self._call("DrainNode", slurm_pb2.DrainNodeRequest(name=name, reason=reason))

    async def update_node(
        self,
        name: str,
        *,
        state: slurm_pb2.NodeState.ValueType | None = None,
        reason: str | None = None,
    ) -> None:
        """Set the node's state and/or reason; a field left None is left unchanged."""
        request = slurm_pb2.UpdateNodeRequest(name=name)
        if state is not None:
            request.state = state
        if reason is not None:
            request.reason = reason
        await self._call("UpdateNode", request)

    async def ping(self) -> slurm_pb2.PingResponse:
        return await self._call("Ping", empty_pb2.Empty())

    # ------------------------------------------------------------- plumbing

    def _stub(self, address: str) -> slurm_pb2_grpc.SlurmControllerStub:
        entry = self._channels.get(address)
        if entry is None:
            channel = grpc.aio.insecure_channel(address)
            entry = (channel, slurm_pb2_grpc.SlurmControllerStub(channel))
            self._channels[address] = entry
        return entry[1]

    async def _call(self, what: str, request: Message) -> Any:
        """The answer of the method named `what`, from the leader once a redirect named one.
        One deadline for the whole call, redirects included: a caller's timeout means "by
        then", not "per replica"."""
        deadline = time.monotonic() + self._timeout
        address = self._leader or self._target
        tried: list[str] = []
        metadata = self._token.metadata() if self._token is not None else None
        while True:
            tried.append(address)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SpurTimedOut(
                    f"{what}: deadline of {self._timeout}s passed after trying {', '.join(tried)}",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            try:
                method = getattr(self._stub(address), what)
                result = await method(request, timeout=remaining, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                leader = leader_of(exc)
                if leader is None:
                    if exc.code() is grpc.StatusCode.UNAVAILABLE and address == self._leader:
                        # The remembered leader is gone; the next call asks the configured
                        # controller again, which names the new one.
                        self._leader = None
                    raise spur_error(exc, what=what, target=address, token=self._token) from None
                if leader in tried:
                    raise SpurRedirectLoop(
                        f"{what}: leader redirects loop: {' -> '.join([*tried, leader])}",
                        code=exc.code(),
                    ) from None
                if len(tried) > self._max_hops:
                    raise SpurUnavailable(
                        f"{what}: still redirected after {self._max_hops} hops: "
                        f"{' -> '.join([*tried, leader])}",
                        code=exc.code(),
                    ) from None
                address = leader
                continue
            if address != self._target or self._leader is not None:
                self._leader = address if address != self._target else None
            return result
