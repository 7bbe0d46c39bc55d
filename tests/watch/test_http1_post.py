"""Http1Post, the iris client's HTTP, against real servers on loopback: an aiohttp app for
what a well-behaved server does, and raw asyncio servers for what a broken or unusual one
does (close-delimited bodies, truncated answers, interim answers, garbage, silence), plus TLS
with a certificate made here."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from keeper.runtime.watch.http1_post import IDLE_S, Http1Post
from keeper.runtime.watch.iris_http import Answer, NoAnswer
from tests.harness import served

HEADERS = {"Content-Type": "application/json"}


@dataclass
class Echo:
    """An aiohttp app that answers each POST with its body, counting the connections that
    carried the calls (by the client's port)."""

    url: str = ""
    peers: set[int] = field(default_factory=set)
    answer: Callable[[web.Request, bytes], Awaitable[web.StreamResponse]] | None = None

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer is not None:
            self.peers.add(peer[1])
        body = await request.read()
        if self.answer is not None:
            return await self.answer(request, body)
        return web.Response(body=body, content_type="application/json")


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    echo = Echo()
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", echo.dispatch)
    async with served(app) as base:
        echo.url = f"{base}/iris.cluster.ControllerService/ListTasks"
        yield echo


@pytest.fixture
async def post() -> AsyncIterator[Http1Post]:
    poster = Http1Post()
    try:
        yield poster
    finally:
        await poster.aclose()


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Raw:
    url: str
    connections: list[asyncio.StreamWriter]


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Script], Awaitable[Raw]]]:
    """A server of plain sockets that plays `script` on every connection."""
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> Raw:
        seen: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer)
            try:
                await script(reader, writer)
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return Raw(f"http://127.0.0.1:{port}/x", seen)

    try:
        yield start
    finally:
        for server in servers:
            server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (it always has a Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)


# --- what a well-behaved server does ----------------------------------------------------------


async def test_calls_one_after_another_share_one_connection(echo: Echo, post: Http1Post) -> None:
    for n in range(5):
        got = await post(echo.url, b'{"n":%d}' % n, HEADERS, 5)
        assert got == Answer(200, "application/json", b'{"n":%d}' % n)
    assert len(echo.peers) == 1


async def test_calls_at_once_each_get_their_own_answer(echo: Echo, post: Http1Post) -> None:
    bodies = [b'{"n":%d}' % n for n in range(30)]
    got = await asyncio.gather(*(post(echo.url, body, HEADERS, 5) for body in bodies))
    assert [a.body for a in got] == bodies
    # Each call in flight had a connection of its own; they were kept for the next calls.
    again = await asyncio.gather(*(post(echo.url, body, HEADERS, 5) for body in bodies))
    assert [a.body for a in again] == bodies
    assert len(echo.peers) <= 30


async def test_the_request_carries_host_length_and_the_callers_headers(
    echo: Echo, post: Http1Post
) -> None:
    seen: dict[str, str] = {}

    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        seen.update(request.headers)
        return web.Response(body=body)

    echo.answer = answer
    await post(echo.url, b"{}", {**HEADERS, "Authorization": "Bearer t0k"}, 5)
    port = echo.url.split(":")[2].split("/")[0]
    assert seen["Host"] == f"127.0.0.1:{port}"
    assert seen["Content-Length"] == "2"
    assert seen["Authorization"] == "Bearer t0k"
    assert "gzip" in seen["Accept-Encoding"] and "deflate" in seen["Accept-Encoding"]


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some servers send
    ],
)
async def test_a_compressed_answer_is_decoded(
    echo: Echo, post: Http1Post, encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(body=encode(b'{"tasks":[]}'), headers={"Content-Encoding": encoding})

    echo.answer = answer
    got = await post(echo.url, b"{}", HEADERS, 5)
    assert got.body == b'{"tasks":[]}'


async def test_a_chunked_answer_is_read_whole(echo: Echo, post: Http1Post) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in (b'{"tasks":', b"[1,2,", b"3]}"):
            await response.write(part)
        await response.write_eof()
        return response

    echo.answer = answer
    got = await post(echo.url, b"{}", HEADERS, 5)
    assert (got.content_type, got.body) == ("application/json", b'{"tasks":[1,2,3]}')
    await post(echo.url, b"{}", HEADERS, 5)  # the connection was fit to keep
    assert len(echo.peers) == 1


async def test_an_answer_that_asks_to_close_is_not_kept(echo: Echo, post: Http1Post) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(body=body, headers={"Connection": "close"})

    echo.answer = answer
    await post(echo.url, b"{}", HEADERS, 5)
    await post(echo.url, b"{}", HEADERS, 5)
    assert len(echo.peers) == 2


async def test_a_connection_idle_past_its_time_is_not_used_again(
    echo: Echo, post: Http1Post, monkeypatch: pytest.MonkeyPatch
) -> None:
    await post(echo.url, b"{}", HEADERS, 5)
    loop = asyncio.get_running_loop()
    later = loop.time() + IDLE_S + 1
    monkeypatch.setattr(loop, "time", lambda: later)
    await post(echo.url, b"{}", HEADERS, 5)
    assert len(echo.peers) == 2


async def test_a_non_200_answer_is_an_answer(echo: Echo, post: Http1Post) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.json_response({"code": "not_found", "message": "job"}, status=404)

    echo.answer = answer
    got = await post(echo.url, b"{}", HEADERS, 5)
    assert (got.status, got.json()["code"]) == (404, "not_found")


async def test_a_redirect_is_not_followed(echo: Echo, post: Http1Post) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "http://elsewhere.invalid/"})

    echo.answer = answer
    assert (await post(echo.url, b"{}", HEADERS, 5)).status == 307


# --- what a broken or unusual server does -----------------------------------------------------


async def test_a_server_that_closes_a_kept_connection_gets_a_new_one(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def once_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()  # then the connection closes, though the answer kept it alive

    server = await raw_server(once_then_close)
    assert (await post(server.url, b"a", HEADERS, 5)).body == b"a"
    await server.connections[0].wait_closed()
    await until(lambda: not post_has_open_idle(post))
    assert (await post(server.url, b"b", HEADERS, 5)).body == b"b"
    assert len(server.connections) == 2


async def test_a_body_delimited_by_the_close_is_read_whole(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def close_delimited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"a":')
        await writer.drain()
        writer.write(b"1}")

    server = await raw_server(close_delimited)
    assert (await post(server.url, b"{}", HEADERS, 5)).body == b'{"a":1}'


async def test_a_truncated_answer_is_no_answer(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def truncated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"tasks":')

    server = await raw_server(truncated)
    with pytest.raises(NoAnswer) as caught:
        await post(server.url, b"{}", HEADERS, 5)
    assert not caught.value.timed_out


async def test_an_interim_answer_is_passed_over(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def interim(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()  # kept open until the client goes

    server = await raw_server(interim)
    got = await post(server.url, b"{}", HEADERS, 5)
    assert (got.status, got.body) == (200, b"ok")


async def test_garbage_is_no_answer(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await reader.read()

    server = await raw_server(garbage)
    with pytest.raises(NoAnswer, match="malformed"):
        await post(server.url, b"{}", HEADERS, 5)


async def test_silence_is_a_timeout_and_the_connection_is_dropped(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    went: list[bytes] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        went.append(await reader.read())  # b"" once the client closes its end

    server = await raw_server(silent)
    started = asyncio.get_running_loop().time()
    with pytest.raises(NoAnswer) as caught:
        await post(server.url, b"{}", HEADERS, 0.3)
    assert caught.value.timed_out and "0.3s" in str(caught.value)
    assert asyncio.get_running_loop().time() - started < 3
    await until(lambda: went == [b""])
    assert not post_has_open_idle(post)


async def test_a_cancelled_call_drops_its_connection_and_the_next_call_works(
    echo: Echo, post: Http1Post
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_once(request: web.Request, body: bytes) -> web.StreamResponse:
        if not entered.is_set():
            entered.set()
            await release.wait()
        return web.Response(body=body)

    echo.answer = slow_once
    call = asyncio.create_task(post(echo.url, b"first", HEADERS, 5))
    await entered.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    release.set()
    assert (await post(echo.url, b"second", HEADERS, 5)).body == b"second"
    assert len(echo.peers) == 2


async def test_a_refused_connection_is_no_answer(post: Http1Post) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(NoAnswer) as caught:
        await post(f"http://127.0.0.1:{port}/x", b"{}", HEADERS, 5)
    assert not caught.value.timed_out


async def test_a_header_with_a_line_break_is_refused_without_showing_its_value(
    post: Http1Post,
) -> None:
    with pytest.raises(ValueError) as caught:
        await post("http://127.0.0.1:9/x", b"{}", {"Authorization": "Bearer a\r\nX: y"}, 5)
    assert "Authorization" in str(caught.value) and "Bearer" not in str(caught.value)
    for name in ("X Y", "X:Y", "X\r\nY", "Ünicode", ""):
        with pytest.raises(ValueError, match="header name"):
            await post("http://127.0.0.1:9/x", b"{}", {name: "v"}, 5)


# --- proxies and TLS --------------------------------------------------------------------------


@dataclass
class Proxied:
    calls: list[str] = field(default_factory=list)

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> Answer:
        self.calls.append(url)
        return Answer(200, "application/json", b"{}")


async def test_a_call_the_environment_proxies_is_handed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "direct.invalid")
    proxied = Proxied()
    poster = Http1Post(proxied=proxied)
    try:
        await poster("http://iris.invalid/x", b"{}", HEADERS, 5)
        with pytest.raises(NoAnswer):  # not proxied: tried directly, and nothing resolves it
            await poster("http://direct.invalid/x", b"{}", HEADERS, 5)
    finally:
        await poster.aclose()
    assert proxied.calls == ["http://iris.invalid/x"]


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_tls_trusts_the_store_ssl_cert_file_names_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert_file, key_file = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    app = web.Application()

    async def hello(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app.router.add_post("/x", hello)
    async with served(app, ssl_context=context) as base:
        url = f"{base}/x"
        untrusting = Http1Post()
        try:
            with pytest.raises(NoAnswer, match="CERTIFICATE_VERIFY_FAILED"):
                await untrusting(url, b"{}", HEADERS, 5)
        finally:
            await untrusting.aclose()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
        trusting = Http1Post()
        try:
            assert (await trusting(url, b'{"tls":1}', HEADERS, 5)).body == b'{"tls":1}'
        finally:
            await trusting.aclose()


# --- helpers ----------------------------------------------------------------------------------


def post_has_open_idle(post: Http1Post) -> bool:
    return any(conn.open for conns in post._idle.values() for conn in conns)


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.01)
