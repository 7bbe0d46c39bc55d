"""A Slack-compatible chat webhook on a real port, for the tests and the campaign: its URL
(whose path is the secret), what it received, and HTTP answers to play before it accepts."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Receiver:
    url: str = ""
    posts: list[dict[str, Any]] = field(default_factory=list)
    # HTTP codes to answer with, one per post, before answering 200.
    answers: list[int] = field(default_factory=list)

    def of(self, text: str) -> list[dict[str, Any]]:
        return [p for p in self.posts if text in p["text"]]


@contextlib.asynccontextmanager
async def webhook_receiver(secret: str) -> AsyncIterator[Receiver]:
    """Serves POST /services/<secret> on 127.0.0.1 and a free port."""
    hook = Receiver()

    async def post(request: web.Request) -> web.Response:
        doc = await request.json()
        if hook.answers:
            return web.Response(status=hook.answers.pop(0), text="no")
        hook.posts.append(doc)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post(f"/services/{secret}", post)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hook.url = f"http://127.0.0.1:{port}/services/{secret}"
    try:
        yield hook
    finally:
        await runner.cleanup()
