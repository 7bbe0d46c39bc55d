"""What every emulator shares: `async with` around start/stop, and serving until a signal."""

from __future__ import annotations

import asyncio
import signal
from types import TracebackType
from typing import Any, Self

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

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
