"""One round of `/health` checks across a slice's VMs.

Every VM's probe starts at once, each with its own deadline (health.timeout, a total for the
connection and the answer's status line), so a round takes one probe timeout however many
VMs never answer. Only the process's open-file limit bounds the probes in flight
(domain/tpu/health_round.py); past it they go in waves, and the workflow derives the
round's time limit from the same bound.

A probe is a non-blocking socket driven by event-loop callbacks: it sends one GET and reads
the status line, nothing else. Per VM an HTTP client costs several times more (aiohttp about
0.7 ms on loopback, an asyncio protocol about 0.2 ms, these callbacks under 0.15 ms), and
at 4,096 VMs that is seconds of one core before the last probe has even started, each second
added to the round (bench/tpu_health_round.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import activity

from keeper.activities.heartbeat import heartbeating
from keeper.domain.tpu.models import HealthCheckInput, HealthReport, VmFailure
from keeper.domain.tpu.observation import VmEndpoint, bucket
from keeper.runtime.tracing import tracer
from keeper.runtime.waiting import waiting

# The longest status line read; an answer without one this short is not HTTP.
_STATUS_LINE_LIMIT = 1024


@dataclass
class RoundTally:
    """A round as it goes: what the activity's heartbeat reports."""

    total: int
    started: float = field(default_factory=time.monotonic)
    healthy: int = 0
    failing: list[VmFailure] = field(default_factory=list)

    def add(self, failure: VmFailure | None) -> None:
        if failure is None:
            self.healthy += 1
        else:
            self.failing.append(failure)

    def partial(self, shown: int) -> HealthReport:
        """The round so far: a VM that has not answered yet counts as not healthy."""
        return HealthReport(
            total=self.total,
            healthy=self.healthy,
            failing=self.failing[:shown],
            round_seconds=round(time.monotonic() - self.started, 3),
        )


def _status(line: bytes) -> int | None:
    fields = line.split(None, 2)
    if len(fields) >= 2 and fields[0].startswith(b"HTTP/") and fields[1].isdigit():
        return int(fields[1])
    return None


# connect_ex's answers for a connection under way on a non-blocking socket.
_UNDER_WAY = frozenset({0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN})
# Closing with a zero linger resets the connection: nothing lingers in TIME_WAIT here.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


class _Probe:
    """One VM's probe as callbacks on the event loop: a non-blocking connect, one request,
    the answer's status line, all within its own deadline. No task, future or transport per
    VM: at thousands of VMs those cost more than the probes."""

    __slots__ = ("_buffer", "_done", "_loop", "_request", "_sock", "_timer", "_watching", "vm")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        vm: VmEndpoint,
        request: bytes,
        done: Callable[[_Probe, VmFailure | None], None],
    ) -> None:
        self._loop = loop
        self.vm = vm
        self._request = request
        self._done: Callable[[_Probe, VmFailure | None], None] | None = done
        self._sock: socket.socket | None = None
        self._timer: asyncio.TimerHandle | None = None
        # The event the loop watches this socket for: "write", "read" or none. Calls take
        # the descriptor, not the socket: a socket's lookup formats its repr on every miss.
        self._watching: str | None = None
        self._buffer = b""

    def start(self, port: int, timeout: float) -> None:
        self._timer = self._loop.call_later(timeout, self._finish, f"no answer within {timeout:g}s")
        try:
            family = socket.AF_INET6 if ":" in self.vm.ip else socket.AF_INET
            self._sock = socket.socket(family, socket.SOCK_STREAM)
            self._sock.setblocking(False)
            code = self._sock.connect_ex((self.vm.ip, port))
        except OSError as err:
            self._finish(f"connection failed: {err.strerror or err}")
            return
        if code not in _UNDER_WAY:
            self._finish(f"connection failed: {os.strerror(code)}")
            return
        self._watch("write", self._connected)

    def _watch(
        self,
        event: str | None,
        step: Callable[[socket.socket], None] | None = None,
        fd: int | None = None,
    ) -> None:
        if fd is None:
            assert self._sock is not None
            fd = self._sock.fileno()
        if self._watching == "write":
            self._loop.remove_writer(fd)
        elif self._watching == "read":
            self._loop.remove_reader(fd)
        self._watching = event
        if event == "write":
            self._loop.add_writer(fd, self._guarded, step)
        elif event == "read":
            self._loop.add_reader(fd, self._guarded, step)

    def _guarded(self, step: Callable[[socket.socket], None]) -> None:
        # A callback that raised would leave the round waiting for this VM forever.
        if self._sock is None:
            return
        try:
            step(self._sock)
        except OSError as err:
            self._finish(f"connection failed: {err.strerror or err}")
        except Exception as err:
            self._finish(f"{type(err).__name__}: {err}")

    def _connected(self, sock: socket.socket) -> None:
        self._watch(None)
        code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            self._finish(f"connection failed: {os.strerror(code)}")
            return
        self._send(sock)

    def _send(self, sock: socket.socket) -> None:
        sent = sock.send(self._request)
        self._request = self._request[sent:]
        if self._request:
            self._watch("write", self._send)
            return
        self._watch("read", self._received)

    def _received(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(_STATUS_LINE_LIMIT)
        except BlockingIOError:
            return
        if not data:
            self._finish("connection failed: closed without an answer")
            return
        self._buffer += data
        line, found, _ = self._buffer.partition(b"\r\n")
        if not found and len(self._buffer) <= _STATUS_LINE_LIMIT:
            return
        status = _status(line)
        if status == 200:
            self._finish(None)
        else:
            self._finish(f"HTTP {status}" if status is not None else f"not HTTP: {line[:60]!r}")

    def _finish(self, reason: str | None) -> None:
        done, self._done = self._done, None
        if done is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        sock, self._sock = self._sock, None
        if sock is not None:
            self._watch(None, fd=sock.fileno())
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
            sock.close()
        vm = self.vm
        failure = None
        if reason is not None:
            failure = VmFailure(node=vm.node, index=vm.index, ip=vm.ip, reason=reason)
        done(self, failure)

    def cancel(self) -> None:
        self._finish("round cancelled")

    def drop(self) -> None:
        """A probe that never started: it holds no socket and no slot."""
        self._done = None


class HealthProber:
    """One per worker process: `concurrency` bounds the probes in flight across all of its
    rounds, since they share the process's open files; probes past it wait for a slot."""

    def __init__(self, concurrency: int = 64, timeout: timedelta = timedelta(seconds=2)) -> None:
        self.concurrency = concurrency
        self.timeout = timeout
        self._seconds = timeout.total_seconds()
        self._free = concurrency
        self._queued: deque[tuple[_Probe, int]] = deque()

    def _admit(self, probe: _Probe, port: int) -> None:
        if self._free > 0:
            self._free -= 1
            probe.start(port, self._seconds)
        else:
            self._queued.append((probe, port))

    def _release(self) -> None:
        if self._queued:
            probe, port = self._queued.popleft()
            probe.start(port, self._seconds)
        else:
            self._free += 1

    async def round(
        self, vms: list[VmEndpoint], port: int, path: str, tally: RoundTally | None = None
    ) -> HealthReport:
        tally = tally or RoundTally(total=len(vms))
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        results: dict[int, VmFailure | None] = {}
        finished = loop.create_future()
        probes: list[_Probe] = []

        def done(probe: _Probe, failure: VmFailure | None) -> None:
            results[id(probe)] = failure
            tally.add(failure)
            self._release()
            if len(results) == len(probes) and not finished.done():
                finished.set_result(None)

        with tracer().start_as_current_span("health.round", attributes={"vms": len(vms)}):
            for vm in vms:
                request = (
                    f"GET {path} HTTP/1.1\r\nHost: {vm.ip}:{port}\r\nUser-Agent: keeper\r\n"
                    "Accept: */*\r\nConnection: close\r\n\r\n"
                ).encode("latin-1")
                probes.append(_Probe(loop, vm, request, done))
            if not probes:
                finished.set_result(None)
            for probe in probes:
                self._admit(probe, port)
            try:
                await finished
            finally:
                # A cancelled round (its activity was) lets go of its sockets and slots.
                mine = {id(p) for p in probes}
                for probe, _ in self._queued:
                    if id(probe) in mine:
                        probe.drop()
                self._queued = deque(q for q in self._queued if id(q[0]) not in mine)
                for probe in probes:
                    probe.cancel()
        failing = [f for p in probes if (f := results.get(id(p))) is not None]
        return HealthReport(
            total=len(vms),
            healthy=len(vms) - len(failing),
            failing=failing,
            round_seconds=round(time.monotonic() - started, 3),
        )


# Failing VMs named in a retried health attempt's failure (its message and details) and in
# a round's heartbeat.
FAILING_IN_RETRY = 5


class HealthActivities:
    def __init__(self, prober: HealthProber) -> None:
        self._prober = prober

    @activity.defn(name="tpu.check_health")
    async def check_health(self, inp: HealthCheckInput) -> HealthReport:
        """Returns when every VM is healthy or the healthy count moved a visible step."""
        tally = RoundTally(total=len(inp.targets))
        # The round so far, for the UI's pending activity and for a workflow whose round
        # the server cuts short at the deadline.
        beats = functools.partial(tally.partial, FAILING_IN_RETRY)
        async with heartbeating(beats, unset=self._prober.timeout, at_start=False):
            report = await self._prober.round(inp.targets, inp.port, inp.path, tally)
        if report.all_healthy or bucket(report.healthy, report.total) != inp.last_bucket:
            return report
        # A retried attempt's failure is what the UI shows as the pending activity's last
        # failure, and the server drops one past its size limit ("Failure exceeds size
        # limit."), so it carries the counts and the first few failing VMs only; the
        # workflow's status query holds the full list of the last round it saw.
        shown = report.failing[:FAILING_IN_RETRY]
        failing = report.total - report.healthy
        raise waiting(
            f"{failing} more VM{'s' if failing != 1 else ''} to answer {inp.path} healthy",
            report.model_copy(update={"failing": shown}),
            seen=f"{report.healthy}/{report.total} VMs healthy, {failing} failing; "
            "first: " + ", ".join(f"{f.node}/{f.index} {f.ip} ({f.reason})" for f in shown),
        )
