"""Run compensation to the end even while cancel requests keep arriving.

A bare `asyncio.shield` is not enough: a second cancel that lands while the cleanup
activity runs abandons it and the workflow closes with the cleanup unowned. Re-awaiting the
shielded task until it is done, then re-raising the cancel, keeps ownership.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def run_to_completion(
    coro: Coroutine[Any, Any, T], on_cancel: Callable[[], None] | None = None
) -> tuple[T, bool]:
    """Awaits `coro` through any number of cancellations.

    Returns the result and whether a cancel arrived meanwhile, so the caller can honour it
    once the cleanup is done. `on_cancel` runs at each cancel, while `coro` goes on, so the
    caller can show that the cancel was seen.
    """
    task = asyncio.ensure_future(coro)
    cancelled = False
    while True:
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
            if on_cancel is not None:
                on_cancel()
