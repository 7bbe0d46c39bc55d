"""The HTTP under the iris client: one POST, and its answer read whole.

The `Post` the client calls, and the aiohttp poster. The client's own default is
`http1_post.Http1Post`, keep-alive connections of its own that cost about half aiohttp's
CPU a call; it hands a call that goes through a proxy to this aiohttp poster.

On aiohttp, not httpx. A watch check makes about a dozen calls, and the worker's CPU per check
is the watch's main cost: httpx's pure-Python layers (request and response models, httpcore's
pool checking every pooled connection on each request) cost five to seven times aiohttp's CPU
per call (`bench/iris_http_cpu.py`; `bench/worker_cpu.py --workloads watch-check` shows the
effect on a whole check). aiohttp is a dependency keeper already has (its health and report
servers, the emulators).

What httpx did by default, aiohttp is asked to do the same: gzip and deflate asked for and
decoded, no redirects followed, the proxy variables (HTTPS_PROXY, HTTP_PROXY, NO_PROXY)
honoured, the system's certificate store (SSL_CERT_FILE too). Not ~/.netrc: iris takes a
bearer token (watch.token_file), never a password. A deadline covers the whole call, connect
to the last byte.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, read whole."""

    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body)


class NoAnswer(Exception):
    """The call got no HTTP answer: refused, reset, unresolvable, or out of time."""

    def __init__(self, reason: str, *, timed_out: bool) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class Post(Protocol):
    """POSTs `body` to `url`; raises NoAnswer when no answer came within `timeout_s`."""

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> Answer: ...


class Proxies:
    """The proxy the environment names for a URL (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, as httpx
    read them), read once per scheme and host."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], str | None] = {}

    def proxy_for(self, url: str) -> str | None:
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        if key not in self._known:
            proxy = None
            if not urllib.request.proxy_bypass(key[1]):
                proxy = urllib.request.getproxies().get(key[0])
            self._known[key] = proxy
        return self._known[key]


class AiohttpPost:
    """Posts on one aiohttp session, opened at the first call so that it belongs to the loop
    that makes the calls."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._proxies = Proxies()

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> Answer:
        if self._session is None or self._session.closed:
            # Not trust_env: aiohttp would then read ~/.netrc and the proxy variables in a
            # thread on every call. The proxy is looked up once per host instead.
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                url,
                data=body,
                headers=dict(headers),
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                allow_redirects=False,
                proxy=self._proxies.proxy_for(url),
            ) as answer:
                return Answer(answer.status, answer.content_type, await answer.read())
        except TimeoutError:  # aiohttp's own timeouts are TimeoutErrors too
            raise NoAnswer(f"no answer within {timeout_s:g}s", timed_out=True) from None
        except aiohttp.ClientError as exc:
            raise NoAnswer(str(exc) or type(exc).__name__, timed_out=False) from None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
