"""Heartbeats from a background task while an activity awaits calls of its own.

An activity with a long start-to-close (a check that makes a dozen controller reads, each
with its own deadline) is otherwise retried only once that timeout has passed when its
worker dies mid-attempt. With a heartbeat timeout and this beat, the server notices the dead
worker within that timeout and hands the attempt to another.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from temporalio import activity

# A beat at a third of the heartbeat timeout. The SDK sends at most one every 80% of the
# timeout and drops the rest, so this keeps the server's view fresh with a margin of a fifth.
BEATS_PER_TIMEOUT = 3


@contextlib.asynccontextmanager
async def heartbeating(
    details: str | Callable[[], object], *, unset: timedelta | None = None, at_start: bool = True
) -> AsyncIterator[None]:
    """Beats every third of the activity's heartbeat timeout while the block runs. With no
    heartbeat timeout (an older workflow's schedule) it beats every third of `unset`, or not
    at all. `details` is what each beat reports, or how to read it at that moment; with
    `at_start` False the first beat waits an interval (a block shorter than that sends none)."""
    timeout = activity.info().heartbeat_timeout or unset
    if not timeout:
        yield
        return
    every = timeout.total_seconds() / BEATS_PER_TIMEOUT
    read = details if callable(details) else (lambda: details)

    async def beat() -> None:
        if not at_start:
            await asyncio.sleep(every)
        while True:
            activity.heartbeat(read())
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # The beat's own cancellation ends here; one aimed at the activity goes on.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
