"""The iris client's POST on a pool of keep-alive HTTP/1.1 connections: asyncio protocols
written to directly, each answer read by httptools (llhttp, the parser Node.js and uvicorn use).

Why not aiohttp for every call: a job watch's check is a dozen iris calls, and with the
answers in memory a check costs the worker about what an empty workflow's check costs
(`bench/worker_cpu.py --reads-from-memory`), so the calls are the watch's cost. aiohttp builds
its URL, header, cookie, tracing and timeout layers for every call: 0.243 ms of CPU a call
against 0.130 ms here, one call at a time against a local server, and 0.100 against 0.053 ms
ten at a time (`python bench/iris_http_cpu.py`).

What it does is what the iris client needs and no more: a POST with a body; the answer read
whole (a Content-Length, chunked, or up to the close); gzip and deflate asked for and
decoded; TLS with the system's certificate store (SSL_CERT_FILE too); no redirects followed;
a deadline over the whole call, connect to the last byte. A call the environment sends
through a proxy (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) is made by aiohttp instead, which speaks
to proxies; so is nothing else.

A connection carries one call at a time and goes back to the pool when its answer was read
whole and neither side asked to close; one that times out, is cancelled or breaks is closed.
A pooled connection unused for `IDLE_S` is closed: shorter than servers keep theirs (iris's
uvicorn 120 s, load balancers longer), so a call rarely meets a connection the server has
just closed. If it does, the call fails as unanswered and is not sent again (a POST may have
been acted on), as aiohttp does with a POST.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import ssl
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import quote, urlsplit

import httptools

from keeper.runtime.watch.iris_http import AiohttpPost, Answer, NoAnswer, Post, Proxies

# aiohttp's keep-alive (its TCPConnector's keepalive_timeout default), for the same reason.
IDLE_S = 15.0
# Calls in flight at once on one poster (aiohttp's TCPConnector limit); more wait their turn.
MAX_IN_FLIGHT = 100
# As aiohttp: when a name resolves to several addresses, the next is tried this much later.
HAPPY_EYEBALLS_S = 0.25
ACCEPT_ENCODING = "gzip, deflate"
DEFAULT_CONTENT_TYPE = "application/octet-stream"  # as aiohttp reads an answer without one
# RFC 9110's token, what a header's name is made of; a value must not break its line.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LINE_BREAKING = re.compile(r"[\r\n\0]")
# Written by the poster itself; a caller's own would contradict the framing.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"
USER_AGENT = "keeper"


class Origin(NamedTuple):
    scheme: str
    host: str
    port: int


@dataclass(frozen=True)
class _Target:
    """What one URL needs on the wire, worked out once per URL."""

    origin: Origin
    request_line: bytes  # `POST /path?query HTTP/1.1` with its CRLF
    host_header: str
    proxied: bool = False  # the environment sends it through a proxy: aiohttp makes the call

    @classmethod
    def of(cls, url: str, *, proxied: bool = False) -> _Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        host = parts.hostname
        if not host.isascii():
            host = host.encode("idna").decode("ascii")  # a name in any script, as DNS has it
        shown = f"[{host}]" if ":" in host else host
        # Percent-encoded as a browser would; what is already encoded stays as it is.
        path = quote(parts.path or "/", safe=_PATH_SAFE)
        target = path + (f"?{quote(parts.query, safe=_QUERY_SAFE)}" if parts.query else "")
        return cls(
            origin=Origin(parts.scheme, host, port),
            request_line=f"POST {target} HTTP/1.1\r\n".encode("ascii"),
            host_header=shown if port == default else f"{shown}:{port}",
            proxied=proxied,
        )


@dataclass
class _Raw:
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: list[bytes] = field(default_factory=list)
    headers_done: bool = False

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def delimited_by_close(self) -> bool:
        """No Content-Length and not chunked: the body ends where the connection does."""
        return self.header(b"content-length") is None and self.header(b"transfer-encoding") is None


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one exchange at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[_Raw] | None = None
        self._raw = _Raw()
        self.open = True
        self.reusable = False
        self.idle_since = 0.0

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Bytes nobody asked for: the connection's framing can no longer be trusted.
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            # An upgrade (101) is nothing the iris client asked for: no answer either.
            self._fail(f"a malformed HTTP answer ({exc!r})")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        raw = self._raw
        # A reset is not the end of a close-delimited body: only a clean close is.
        if exc is None and self._waiter is not None and raw.headers_done and raw.delimited_by_close:
            self._resolve()
        else:
            reason = str(exc) if exc else "the server closed the connection before answering"
            self._fail(reason)

    # ---- httptools callbacks

    def on_message_begin(self) -> None:
        if self._waiter is None:
            # A second answer behind the one asked for, in the same read: framing is lost.
            self.close()
        self._raw = _Raw()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._raw.status = self._parser.get_status_code()
        self._raw.headers_done = True

    def on_body(self, body: bytes) -> None:
        self._raw.body.append(body)

    def on_message_complete(self) -> None:
        if 100 <= self._raw.status < 200:
            self._raw = _Raw()  # an interim answer (100 Continue, 103): the final one follows
            return
        self.reusable = self._parser.should_keep_alive()
        self._resolve()

    # ---- the exchange

    async def exchange(self, request: bytes) -> _Raw:
        if self._transport is None or not self.open:
            raise NoAnswer("the connection closed", timed_out=False)
        self.reusable = False
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return await self._waiter

    def close(self) -> None:
        self.open = False
        self.reusable = False
        if self._transport is not None:
            self._transport.close()

    def _resolve(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(self._raw)

    def _fail(self, reason: str) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(NoAnswer(reason, timed_out=False))


class Http1Post:
    """Posts on keep-alive connections of its own, opened in the loop that makes the calls;
    calls that go through a proxy are made by `proxied` (aiohttp unless a test says)."""

    def __init__(self, proxied: Post | None = None) -> None:
        self._own_proxied: AiohttpPost | None = None
        if proxied is None:
            proxied = self._own_proxied = AiohttpPost()
        self._proxied = proxied
        self._proxies = Proxies()
        self._targets: dict[str, _Target] = {}
        self._idle: dict[Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)  # bound to a loop at its first wait
        self._tls: asyncio.Future[ssl.SSLContext] | None = None
        # Bumped by aclose: a connection opened by a call from before is not pooled.
        self._generation = 0

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> Answer:
        target = self._targets.get(url)
        if target is None:
            proxied = self._proxies.proxy_for(url) is not None
            target = self._targets[url] = _Target.of(url, proxied=proxied)
        if target.proxied:
            return await self._proxied(url, body, headers, timeout_s)
        request = _request(target, body, headers)
        try:
            async with asyncio.timeout(timeout_s) as deadline, self._slots:
                raw = await self._exchange(target.origin, request)
        except TimeoutError as exc:
            if deadline.expired():
                raise NoAnswer(f"no answer within {timeout_s:g}s", timed_out=True) from None
            # The kernel's own connect timeout (ETIMEDOUT): unreachable, not our deadline.
            raise NoAnswer(str(exc) or type(exc).__name__, timed_out=False) from None
        except OSError as exc:  # refused, unreachable, unresolvable, a TLS failure
            raise NoAnswer(str(exc) or type(exc).__name__, timed_out=False) from None
        return Answer(raw.status, _content_type(raw), _decoded(raw))

    async def _exchange(self, origin: Origin, request: bytes) -> _Raw:
        generation = self._generation
        conn = self._pooled(origin) or await self._connect(origin)
        self._busy.add(conn)
        try:
            raw = await conn.exchange(request)
        except BaseException:
            conn.close()  # cut off mid-answer (a deadline, a cancel) or broken
            raise
        finally:
            self._busy.discard(conn)
        if conn.reusable and conn.open and generation == self._generation:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.setdefault(origin, []).append(conn)
        else:
            conn.close()
        return raw

    def _pooled(self, origin: Origin) -> _Connection | None:
        """The connection of `origin` used last, if one is still fit; expired ones closed."""
        idle = self._idle.get(origin)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if conn.open and now - conn.idle_since < IDLE_S:
                self._expire(idle, now)
                return conn
            conn.close()
        return None

    @staticmethod
    def _expire(idle: list[_Connection], now: float) -> None:
        """Closes the connections idle past IDLE_S (the oldest are first in the list)."""
        while idle and (not idle[0].open or now - idle[0].idle_since >= IDLE_S):
            idle.pop(0).close()

    async def _connect(self, origin: Origin) -> _Connection:
        tls = None
        if origin.scheme == "https":
            if self._tls is None or (self._tls.done() and self._tls.exception() is not None):
                # Loads the certificate store from disk: once for all the calls that wait
                # on it, and off the event loop.
                self._tls = asyncio.ensure_future(asyncio.to_thread(_tls_context))
            tls = await asyncio.shield(self._tls)
        _, conn = await asyncio.get_running_loop().create_connection(
            _Connection,
            origin.host,
            origin.port,
            ssl=tls,
            server_hostname=origin.host if tls is not None else None,
            happy_eyeballs_delay=HAPPY_EYEBALLS_S,
        )
        return conn

    async def aclose(self) -> None:
        self._generation += 1
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()
        for conn in list(self._busy):
            conn.close()
        if self._own_proxied is not None:
            await self._own_proxied.aclose()


def _tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()  # the system store; SSL_CERT_FILE/DIR honoured
    context.set_alpn_protocols(["http/1.1"])
    return context


def _request(target: _Target, body: bytes, headers: Mapping[str, str]) -> bytes:
    lines = [
        target.request_line,
        f"Host: {target.host_header}\r\nContent-Length: {len(body)}\r\n"
        f"Accept-Encoding: {ACCEPT_ENCODING}\r\nUser-Agent: {USER_AGENT}\r\n".encode("ascii"),
    ]
    for name, value in headers.items():
        if _HEADER_NAME.fullmatch(name) is None:
            raise ValueError(f"the HTTP header name {name!r} is not valid")
        if name.lower() in _OWN_HEADERS:
            raise ValueError(f"the {name} header is the poster's own to write")
        if _LINE_BREAKING.search(value) is not None:
            # The value is not shown: it may be a token.
            raise ValueError(f"the {name} header's value holds a line break or a NUL")
        try:
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        except UnicodeEncodeError:
            raise ValueError(f"the {name} header's value is not Latin-1 text") from None
    lines += [b"\r\n", body]
    return b"".join(lines)


def _content_type(raw: _Raw) -> str:
    value = raw.header(b"content-type")
    if value is None:
        return DEFAULT_CONTENT_TYPE
    return value.decode("latin-1").split(";", 1)[0].strip().lower() or DEFAULT_CONTENT_TYPE


def _decoded(raw: _Raw) -> bytes:
    body = b"".join(raw.body)
    if not body:
        return body  # an empty body labelled with an encoding: nothing to decode
    encoding = (raw.header(b"content-encoding") or b"").strip().lower()
    try:
        if encoding in (b"gzip", b"x-gzip"):
            return gzip.decompress(body)  # every member, as a gzip stream may hold several
        if encoding == b"deflate":
            try:
                return zlib.decompress(body)  # zlib-wrapped, as the RFC says
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)  # raw, as some servers send
    except (zlib.error, gzip.BadGzipFile, EOFError) as exc:
        reason = f"the answer's {encoding.decode()} body does not decode: {exc}"
        raise NoAnswer(reason, timed_out=False) from None
    return body
