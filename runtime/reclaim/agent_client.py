"""Cancels sent straight to a spur agent (`slurm.SlurmAgent/CancelJob`) by its address.

The agent answers Empty whatever it did, even for an id it does not hold, so the only outcomes
worth telling apart are the failures: a call that timed out may have acted (the agent got the
request and is still killing, or answered too late), while one that could not connect did not.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import OrderedDict

import grpc

from keeper.runtime.reclaim.credentials import SpurToken
from keeper.runtime.reclaim.spur_errors import DETAILS_LIMIT, SpurError, details_of
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

# spurctld's CANCEL_RPC_TIMEOUT; the agent answers long before its 5 s SIGKILL delay.
DEFAULT_CANCEL_TIMEOUT_S = 5.0
DEFAULT_AGENT_PORT = 6818  # spurd's default; a registration with port 0 means this
DEFAULT_MAX_CHANNELS = 256


class AgentCancelError(SpurError):
    """A cancel did not get its Empty answer. `address` is the agent's host:port."""

    def __init__(self, message: str, *, address: str, code: grpc.StatusCode | None) -> None:
        super().__init__(message, code=code)
        self.address = address


class AgentCancelTimedOut(AgentCancelError):
    """The deadline passed: the agent may or may not have acted on the cancel."""


class AgentUnreachable(AgentCancelError):
    """No connection to the agent: the cancel was not delivered."""


class AgentDenied(AgentCancelError):
    """The agent refused the caller (a verified identity that is not spurctld)."""


def agent_address(address: str, port: int) -> str:
    """host:port for gRPC, IPv6 literals bracketed; port 0 is spur's default agent port."""
    if not address:
        raise ValueError("the agent address is empty")
    if not 0 <= port < 65536:
        raise ValueError(f"port {port} is out of range")
    host = address.strip("[]")
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a hostname
    return f"{host}:{port or DEFAULT_AGENT_PORT}"


class SpurAgents:
    """Cancels on any agent. Channels are cached per address, least recently used evicted."""

    def __init__(
        self,
        *,
        token: SpurToken | None = None,
        timeout: float = DEFAULT_CANCEL_TIMEOUT_S,
        max_channels: int = DEFAULT_MAX_CHANNELS,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_channels < 1:
            raise ValueError(f"max_channels must be at least 1, got {max_channels}")
        self._token = token
        self._timeout = timeout
        self._max_channels = max_channels
        self._channels: OrderedDict[str, grpc.aio.Channel] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"SpurAgents(timeout={self._timeout}, channels={len(self._channels)})"

    @property
    def cached(self) -> tuple[str, ...]:
        """The addresses with an open channel, least recently used first."""
        return tuple(self._channels)

    async def cancel_job(self, address: str, port: int, job_id: int, signal: int) -> None:
        """Ask the agent to cancel `job_id`: signal 0 is spur's graceful cancel (release an
        allocation-only job, else SIGTERM then SIGKILL after 5 s); >0 sends that signal once."""
        target = agent_address(address, port)
        channel = self._channel(target)
        request = slurm_pb2.AgentCancelJobRequest(job_id=job_id, signal=signal)
        metadata = self._token.metadata() if self._token is not None else None
        try:
            await slurm_pb2_grpc.SlurmAgentStub(channel).CancelJob(
                request, timeout=self._timeout, metadata=metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, target, job_id) from None

    def _error(self, exc: grpc.aio.AioRpcError, target: str, job_id: int) -> AgentCancelError:
        code = exc.code()
        details = details_of(exc, self._token)[:DETAILS_LIMIT]
        message = f"cancel of job {job_id} on agent {target}: {code.name}: {details}"
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return AgentCancelTimedOut(
                f"{message} (no answer within {self._timeout}s; it may have acted)",
                address=target,
                code=code,
            )
        if code is grpc.StatusCode.UNAVAILABLE:
            return AgentUnreachable(message, address=target, code=code)
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            where = self._token.setting if self._token is not None else "no token was sent"
            return AgentDenied(f"{message} ({where})", address=target, code=code)
        return AgentCancelError(message, address=target, code=code)

    def _channel(self, target: str) -> grpc.aio.Channel:
        channel = self._channels.get(target)
        if channel is not None:
            self._channels.move_to_end(target)
            return channel
        channel = grpc.aio.insecure_channel(target)
        self._channels[target] = channel
        while len(self._channels) > self._max_channels:
            _, evicted = self._channels.popitem(last=False)
            # A grace of one call's deadline lets a cancel still in flight on it finish.
            task = asyncio.get_running_loop().create_task(evicted.close(grace=self._timeout))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return channel

    async def aclose(self) -> None:
        channels, self._channels = list(self._channels.values()), OrderedDict()
        for channel in channels:
            await channel.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def __aenter__(self) -> SpurAgents:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
