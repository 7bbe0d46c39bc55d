"""Http1Post, the iris client's HTTP, against real servers on loopback: an aiohttp app for
what a well-behaved server does, and raw asyncio servers for what a broken or unusual one
does (close-delimited bodies, truncated answers, interim answers, garbage, silence), plus TLS
with a certificate made here."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import gzip
import ipaddress
import socket
import ssl
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from keeper.runtime.watch import http1_post
from keeper.runtime.watch.http1_post import IDLE_S, Http1Post
from keeper.runtime.watch.iris_http import Answer, NoAnswer
from tests.harness import served

HEADERS = {"Content-Type": "application/json"}
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls go direct unless a test names a proxy, whatever the machine's environment says."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


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


def answering(raw: bytes, *, hold_open: bool) -> Script:
    """A script that reads one request and writes `raw` back; then it holds the connection
    until the client goes, or closes it."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()
        if hold_open:
            await reader.read()

    return script


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
    assert len(echo.peers) == 30  # each call in flight had a connection of its own
    again = await asyncio.gather(*(post(echo.url, body, HEADERS, 5) for body in bodies))
    assert [a.body for a in again] == bodies
    assert len(echo.peers) == 30  # and the next calls took them from the pool


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
    await post(echo.url, b"{}", HEADERS, 5)
    assert len(echo.peers) == 1  # within IDLE_S: kept
    monkeypatch.setattr(http1_post, "IDLE_S", 0.0)  # every pooled connection now past its time
    await post(echo.url, b"{}", HEADERS, 5)
    assert len(echo.peers) == 2
    assert IDLE_S == 15.0


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
    truncated = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"tasks":'
    server = await raw_server(answering(truncated, hold_open=False))
    with pytest.raises(NoAnswer) as caught:
        await post(server.url, b"{}", HEADERS, 5)
    assert not caught.value.timed_out


async def test_an_interim_answer_is_passed_over(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    interim = (
        b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    )
    server = await raw_server(answering(interim, hold_open=True))
    got = await post(server.url, b"{}", HEADERS, 5)
    assert (got.status, got.body) == (200, b"ok")


async def test_garbage_is_no_answer(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    server = await raw_server(answering(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", hold_open=True))
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
    assert not post_has_open_idle(post) and not post._busy  # dropped, not kept
    release.set()
    assert (await post(echo.url, b"second", HEADERS, 5)).body == b"second"
    assert len(echo.peers) == 2


async def test_a_second_answer_in_the_same_read_never_reaches_the_next_call(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def two_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nst")  # one write
        await writer.drain()
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            body = await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    server = await raw_server(two_answers)
    assert (await post(server.url, b"first", HEADERS, 5)).body == b"first"
    assert (await post(server.url, b"again", HEADERS, 5)).body == b"again"
    assert len(server.connections) == 2


async def test_an_interim_answer_and_then_a_close_is_no_answer(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    interim_only = b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
    server = await raw_server(answering(interim_only, hold_open=False))
    with pytest.raises(NoAnswer):
        await post(server.url, b"{}", HEADERS, 5)


async def test_an_upgrade_is_no_answer(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\nxx"
    server = await raw_server(answering(upgrade, hold_open=True))
    with pytest.raises(NoAnswer, match="malformed"):
        await post(server.url, b"{}", HEADERS, 5)


async def test_a_reset_inside_a_close_delimited_body_is_no_answer(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"tasks":[')
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST

    server = await raw_server(reset)
    with pytest.raises(NoAnswer):
        await post(server.url, b"{}", HEADERS, 5)


async def test_an_empty_body_labelled_gzip_keeps_its_status(echo: Echo, post: Http1Post) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        return web.Response(status=503, body=b"", headers={"Content-Encoding": "gzip"})

    echo.answer = answer
    got = await post(echo.url, b"{}", HEADERS, 5)
    assert (got.status, got.body) == (503, b"")


async def test_every_member_of_a_gzip_stream_is_read(echo: Echo, post: Http1Post) -> None:
    async def answer(request: web.Request, body: bytes) -> web.StreamResponse:
        both = gzip.compress(b'{"a":') + gzip.compress(b"1}")
        return web.Response(body=both, headers={"Content-Encoding": "gzip"})

    echo.answer = answer
    assert (await post(echo.url, b"{}", HEADERS, 5)).body == b'{"a":1}'


async def test_the_kernels_connect_timeout_is_unreachable_not_our_deadline(
    post: Http1Post, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()

    async def times_out(*args: object, **kwargs: object) -> None:
        raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")

    monkeypatch.setattr(loop, "create_connection", times_out)
    with pytest.raises(NoAnswer) as caught:
        await post("http://10.255.255.1/x", b"{}", HEADERS, 300)
    assert not caught.value.timed_out and "timed out" in str(caught.value)


async def test_a_connection_still_opening_at_close_is_not_kept(
    echo: Echo, post: Http1Post, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    connect, opening = loop.create_connection, asyncio.Event()

    async def slow_connect(*args: Any, **kwargs: Any) -> Any:
        opening.set()
        await asyncio.sleep(0.1)  # a name to resolve, a handshake
        return await connect(*args, **kwargs)

    monkeypatch.setattr(loop, "create_connection", slow_connect)
    call = asyncio.create_task(post(echo.url, b"{}", HEADERS, 5))
    await opening.wait()
    await post.aclose()
    await call
    assert not post_has_open_idle(post)


async def test_the_tls_context_is_made_once_for_calls_that_start_together(
    post: Http1Post, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    real = http1_post._tls_context

    def counted() -> ssl.SSLContext:
        made.append(1)
        return real()

    monkeypatch.setattr(http1_post, "_tls_context", counted)
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    calls = [post(f"https://127.0.0.1:{port}/x", b"{}", HEADERS, 5) for _ in range(10)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(r, NoAnswer) for r in results)  # refused, after the context
    assert made == [1]


async def test_a_url_is_percent_encoded_and_a_name_in_any_script_is_sent_as_dns_has_it(
    raw_server: Callable[[Script], Awaitable[Raw]], post: Http1Post
) -> None:
    heads: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    server = await raw_server(record)
    await post(server.url.replace("/x", "/a b/ä?q=1 2"), b"{}", HEADERS, 5)
    assert heads[0].startswith(b"POST /a%20b/%C3%A4?q=1%202 HTTP/1.1\r\n")
    assert http1_post._Target.of("http://bücher.example/x").host_header == "xn--bcher-kva.example"
    assert http1_post._Target.of("http://[::1]:8080/x").host_header == "[::1]:8080"
    assert http1_post._Target.of("https://h.example:443/x").host_header == "h.example"


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
    for name in ("Host", "content-length", "Transfer-Encoding", "Connection"):
        with pytest.raises(ValueError, match="the poster's own"):
            await post("http://127.0.0.1:9/x", b"{}", {name: "v"}, 5)
    with pytest.raises(ValueError) as caught:
        await post("http://127.0.0.1:9/x", b"{}", {"Authorization": "Bearer tøk€n"}, 5)
    assert "Latin-1" in str(caught.value) and "tøk" not in str(caught.value)


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
