"""`--follow`: the watch as it changes, until it closes.

Not on a terminal (a CI log, a file, a pipe) it writes one line per change of the watch's
picture, stamped with the time it was seen; nothing is written while the picture stays the
same, so a day's watch of a quiet job writes a handful of lines. On a terminal the status
page redraws in place. A lost server is waited through, with a note on stderr.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from rich.console import Console
from rich.live import Live
from rich.text import Text
from temporalio.service import RPCError

from keeper.cli.output import rfc3339
from keeper.cli.reconnect import RECONNECT_FIRST, RECONNECT_MAX, is_transient
from keeper.cli.temporal_ops import describe_or_none
from keeper.cli.watch.lookup import Watch, query_view
from keeper.cli.watch.render import follow_line, status_lines

Emit = Callable[[str], None]

# Between two looks at a running watch; a close is seen at once (the result is awaited).
INTERVAL = 1.0


async def follow(
    watch: Watch,
    emit: Emit,
    note: Emit,
    console: Console | None = None,
    interval: float = INTERVAL,
) -> Watch:
    """Shows the watch until it closes and returns it as it closed (its last run). With a
    terminal `console` the page redraws in place; otherwise `emit` gets a line per change."""
    closed = asyncio.ensure_future(_closing(watch, note))
    try:
        if console is not None and console.is_terminal:
            with Live(console=console, auto_refresh=False) as live:

                def redraw(page: Text) -> None:
                    live.update(page, refresh=True)

                await _poll(watch, closed, interval, redraw, page=True)
        else:
            await _poll(watch, closed, interval, emit, page=False)
        await asyncio.wait([closed])
    finally:
        if not closed.done():
            closed.cancel()
    return await _described(watch, note)


async def _closing(watch: Watch, note: Emit) -> None:
    """Returns when the watch's last run closed, however it ended (the caller reads how)."""
    delay = RECONNECT_FIRST
    while True:
        try:
            await watch.handle.result()
            return
        except RPCError as err:
            if not is_transient(err):
                return
            note(f"lost the connection to Temporal ({err.message}); following on in {delay:g}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)
        except Exception:  # failed, cancelled, terminated: closed all the same
            return


async def _poll(
    watch: Watch,
    closed: asyncio.Future[None],
    interval: float,
    show: Callable[..., None],
    page: bool,
) -> None:
    last = ""
    while not closed.done():
        view = await query_view(watch.handle)
        if view is not None:
            if page:
                lines = status_lines(watch.job_id, "RUNNING", view)
                show(Text("\n".join(lines)))
            elif (text := follow_line(view)) != last:
                show(f"{rfc3339(datetime.now(UTC))} {text}")
                last = text
        await asyncio.wait([closed], timeout=interval)


async def _described(watch: Watch, note: Emit) -> Watch:
    delay = RECONNECT_FIRST
    while True:
        try:
            description = await describe_or_none(watch.handle)
        except RPCError as err:
            if not is_transient(err):
                raise
            note(f"lost the connection to Temporal ({err.message}); retrying in {delay:g}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)
            continue
        # result() followed the runs a watch continues as new into: this is its last one.
        return Watch(watch.job_id, watch.client, watch.handle, description or watch.description)
