"""What every emulator shares: `async with` around start/stop, its HTTP site and background
tasks, its command line, and serving until a signal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any, Self

from aiohttp import web

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Served:
    """`async with emulator:` starts it with its defaults and always stops it."""

    async def start(self) -> Any:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


async def until_stop_signal() -> None:
    """Returns on SIGTERM or SIGINT, leaving the loop's signal handling as it found it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def serve_until_signal(emulator: Served, log: logging.Logger, name: str) -> None:
    async with emulator:
        await until_stop_signal()
        log.info("%s: stopping", name)


async def start_site(
    app: web.Application, host: str, port: int, **options: Any
) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (0 picks a free port); the runner, and the port it bound."""
    runner = web.AppRunner(app, access_log=None, **options)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


def every(
    seconds: float, work: Callable[[], object], log: logging.Logger, what: str
) -> asyncio.Task[None]:
    """A background task doing `work` every `seconds`; a failure is logged, not fatal."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                work()
            except Exception:
                log.exception("%s failed", what)

    return asyncio.create_task(loop(), name=what)


async def cancelled(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (if any) and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def command_line(prog: str, description: str) -> argparse.ArgumentParser:
    """An emulator's `python -m` parser, starting with --host; `parse` adds --log-level."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1")
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> dict[str, Any]:
    """The options by name (an emulator's config fields), once logging is set up."""
    parser.add_argument("--log-level", default="INFO")
    options = vars(parser.parse_args(argv))
    level = options.pop("log_level").upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return options
