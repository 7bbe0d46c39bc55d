"""Simulated VMs: one loopback address each, a tiny HTTP health endpoint, and phone-home.

A VM "boots" when its node's IPs are assigned, starts listening `health_after` seconds
later and then registers itself at the registration URL from its own address, the way a
real worker would. Deleting its node (or stopping the emulator) closes everything, and a
stopped VM never registers afterwards: that is exactly what keeper must rely on.

The HTTP side is a hand-written HTTP/1.1 responder on asyncio streams because 512 VMs must
cost little more than 512 listening sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

import httpx

from emulators.tpu import ips
from emulators.tpu.records import VmRecord
from emulators.tpu.state import World

log = logging.getLogger("emulators.tpu.fleet")

_PHONE_HOME_ATTEMPTS = 3
_PHONE_HOME_TIMEOUT = 5.0


@dataclass
class _Runtime:
    task: asyncio.Task[None] | None = None
    # While start_server runs the task must not be cancelled: a cancel landing inside it
    # would lose the already-bound listening socket. _boot closes the server itself.
    booting: bool = True
    server: asyncio.Server | None = None
    conns: set[asyncio.StreamWriter] = field(default_factory=set)


class Fleet:
    def __init__(
        self,
        world: World,
        registration_url: Callable[[], str],
        phone_home_concurrency: int,
    ) -> None:
        self.world = world
        self._registration_url = registration_url
        self._runtimes: dict[int, _Runtime] = {}
        self._phone_home_slots = asyncio.Semaphore(phone_home_concurrency)
        self._ssl: ssl.SSLContext | None = None

    # ------------------------------------------------------------- reconciliation

    def sync(self) -> None:
        """Act on what the last evaluation decided; never blocks."""
        self.sync_stops()
        now = self.world.clock.now()
        waiting: list[VmRecord] = []
        for vm in self.world.vms_to_boot:
            if vm.stopped_at is not None:
                continue
            sc = self.world.scenarios.get(vm.node.scenario_key)
            assert vm.ip_assigned_at is not None
            if vm.ip_assigned_at + sc.health_after > now:
                waiting.append(vm)
                continue
            runtime = self._runtimes.setdefault(id(vm), _Runtime())
            runtime.task = asyncio.get_running_loop().create_task(self._boot(vm, runtime))
        self.world.vms_to_boot = waiting

    def sync_stops(self) -> None:
        stopping, self.world.vms_to_stop = self.world.vms_to_stop, []
        for vm in stopping:
            self._stop(vm)

    def _stop(self, vm: VmRecord) -> None:
        runtime = self._runtimes.pop(id(vm), None)
        if runtime is not None:
            if runtime.task is not None and not runtime.task.done() and not runtime.booting:
                runtime.task.cancel()
            if runtime.server is not None:
                runtime.server.close()
            for writer in list(runtime.conns):
                writer.transport.abort()
        if vm.ip is not None:
            ips.release(vm.ip)

    def close_all(self) -> list[_Runtime]:
        """Close every VM at once (emulator reset or stop); they count as stopped from now."""
        runtimes = list(self._runtimes.values())
        self.sync_stops()
        now = self.world.clock.now()
        for vm in self.world.all_vms():
            if vm.ip is not None and vm.stopped_at is None:
                vm.stopped_at = now
                self._stop(vm)
        self.world.vms_to_boot = []
        return runtimes

    async def stop_all(self) -> None:
        runtimes = self.close_all()
        tasks = [r.task for r in runtimes if r.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        for runtime in runtimes:
            if runtime.server is not None:
                await runtime.server.wait_closed()

    def booting(self) -> int:
        """VMs whose boot has not finished: listening, then phoning home if they do."""
        return sum(1 for r in self._runtimes.values() if r.task is not None and not r.task.done())

    # ------------------------------------------------------------- boot and phone home

    async def _boot(self, vm: VmRecord, runtime: _Runtime) -> None:
        assert vm.ip is not None
        try:
            runtime.server = await asyncio.start_server(
                lambda r, w: self._serve(vm, runtime, r, w), host=vm.ip, port=vm.port
            )
        except OSError as exc:
            vm.error = f"cannot listen on {vm.ip}:{vm.port}: {exc}"
            log.warning("vm %s/%d: %s", vm.node.id, vm.index, vm.error)
            return
        finally:
            runtime.booting = False
        if vm.stopped_at is not None:
            # Deleted while binding: close what _stop could not reach.
            runtime.server.close()
            return
        vm.booted_at = self.world.clock.now()
        log.debug("vm %s/%d booted on %s:%d", vm.node.id, vm.index, vm.ip, vm.port)
        if self.world.scenarios.get(vm.node.scenario_key).phone_home:
            await self._phone_home(vm)

    async def _phone_home(self, vm: VmRecord) -> None:
        assert vm.ip is not None
        url = self._registration_url()
        payload = {"qr": vm.qr_id, "node": vm.node.id, "vm_index": vm.index, "ip": vm.ip}
        problem = ""
        async with self._phone_home_slots:
            for attempt in range(_PHONE_HOME_ATTEMPTS):
                if vm.stopped_at is not None:
                    return
                try:
                    status = await self._post(url, payload, vm.ip)
                except (OSError, TimeoutError, ValueError, httpx.HTTPError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                else:
                    if status < 300:
                        # A reply that raced the VM's deletion does not count.
                        if vm.stopped_at is None:
                            vm.phoned_home_at = self.world.clock.now()
                        return
                    problem = f"HTTP {status}"
                await asyncio.sleep(0.2 * 2**attempt)
        vm.error = f"phone home to {url} failed: {problem}"
        log.warning("vm %s/%d: %s", vm.node.id, vm.index, vm.error)

    async def _post(self, url: str, payload: dict[str, object], source_ip: str) -> int:
        """POST JSON from the VM's own address; returns the HTTP status."""
        parts = urlsplit(url)
        if parts.scheme == "https":
            return await self._post_tls(url, payload, source_ip)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"unsupported registration URL {url!r}")
        # Plain asyncio rather than httpx: 512 VMs registering at once spend most of
        # their time in per-request client overhead otherwise.
        body = json.dumps(payload).encode()
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        async with asyncio.timeout(_PHONE_HOME_TIMEOUT):
            reader, writer = await asyncio.open_connection(
                parts.hostname,
                parts.port or 80,
                local_addr=(source_ip, 0),
                family=socket.AF_INET,
            )
            try:
                writer.write(head.encode("latin-1") + body)
                await writer.drain()
                status_line = await reader.readline()
            finally:
                writer.close()
        fields = status_line.split()
        if len(fields) < 2 or not fields[1].isdigit():
            raise ValueError(f"bad HTTP status line {status_line[:80]!r}")
        return int(fields[1])

    async def _post_tls(self, url: str, payload: dict[str, object], source_ip: str) -> int:
        if self._ssl is None:
            # One context for every VM: building one per client costs ~20 ms of CPU.
            self._ssl = ssl.create_default_context()
        transport = httpx.AsyncHTTPTransport(local_address=source_ip, verify=self._ssl)
        async with httpx.AsyncClient(
            transport=transport, timeout=_PHONE_HOME_TIMEOUT, trust_env=False
        ) as client:
            return (await client.post(url, json=payload)).status_code

    # ------------------------------------------------------------- health endpoint

    async def _serve(
        self,
        vm: VmRecord,
        runtime: _Runtime,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        runtime.conns.add(writer)
        try:
            while vm.stopped_at is None:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                if vm.stopped_at is not None:
                    return
                if self.world.vm_behaviour(vm) == "unreachable":
                    # Accept and never answer, like a host that is up but wedged: the
                    # prober's own timeout is what bounds the wait.
                    with contextlib.suppress(ConnectionError):
                        while await reader.read(65536):
                            pass
                    return
                status, body, keep_alive = await self._answer(vm, head, reader)
                writer.write(_response(status, body, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except ConnectionError:
            return
        finally:
            runtime.conns.discard(writer)
            writer.close()

    async def _answer(
        self, vm: VmRecord, head: bytes, reader: asyncio.StreamReader
    ) -> tuple[int, bytes, bool]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            return 400, b'{"error":"bad request line"}', False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length", "0")
        if length.isdigit() and int(length) > 0:
            await reader.readexactly(int(length))
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if method != "GET":
            return 405, b'{"error":"method not allowed"}', keep_alive
        if target.split("?", 1)[0] != vm.health_path:
            return 404, b'{"error":"not found"}', keep_alive
        if self.world.vm_behaviour(vm) == "unhealthy":
            return 503, json.dumps({"status": "unhealthy"}).encode(), keep_alive
        return 200, json.dumps({"status": "ok"}).encode(), keep_alive


def _response(status: int, body: bytes, keep_alive: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + body
