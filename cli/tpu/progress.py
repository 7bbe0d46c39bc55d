"""The live view of a bootstrap: one row per phase with its deadline countdown.

On a terminal it redraws in place. Anywhere else (a CI log, a file) it writes one line per
change of state: the line holds the deadline as a time, not a countdown, so a 4-hour wait
writes a handful of lines, not one a second. It keeps following through a Temporal server
restart, reconnecting with a backoff and saying so on stderr.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError

from keeper.cli.output import rfc3339
from keeper.cli.reconnect import RECONNECT_FIRST, RECONNECT_MAX, is_transient
from keeper.domain.common.durations import format_duration
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.tpu.models import BootstrapStatus
from keeper.domain.tpu.outcome import FINAL_PHASES
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.status_view import failing_vm_list, format_duration_seconds

PHASE_ORDER = [Phase.SUBMIT, Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH]
STOPPED = (Phase.FAILED, Phase.CANCELLED, Phase.COMPENSATE, Phase.TERMINATED, Phase.TIMED_OUT)
# A phase cut short by a close Temporal imposed (domain/tpu/outcome.py, closed_view).
CUT_SHORT = {Phase.TERMINATED: "terminated", Phase.TIMED_OUT: "timed out"}
# Failing VMs named in the live view and in a status line; `status --json` has them all.
FAILING_SHOWN = 5
# Reconnecting to a restarted server: the first wait, doubling up to the last.

Note = Callable[[str], None]


def _countdown(deadline: datetime | None, now: datetime) -> str:
    if deadline is None:
        return ""
    left = deadline - now
    if left.total_seconds() <= 0:
        return "deadline passed"
    return f"{format_duration(left)} left"


def _failing_text(status: BootstrapStatus) -> str | None:
    if not status.failing_vms:
        return None
    count = max(status.vms_failing or 0, len(status.failing_vms))
    listed = failing_vm_list(status.failing_vms, count, FAILING_SHOWN)
    return f"{count} VMs failing health: {terminal_text(listed)}"


def phase_state(status: BootstrapStatus, phase: Phase) -> tuple[str, str]:
    """A phase's row: its word and style. A phase a bootstrap stopped in is not "done"."""
    timing = next((t for t in status.timings if t.phase == phase), None)
    if timing is None:
        return "-", "dim"
    stopped = status.failed_phase if status.phase in STOPPED else None
    if stopped is None and status.phase in STOPPED:
        # Statuses from before `failed_phase`: the last phase that ran is where it stopped.
        stopped = status.timings[-1].phase if status.timings else None
    if phase == stopped:
        if status.phase is Phase.CANCELLED:
            return "cancelled", "yellow"
        if status.phase is Phase.COMPENSATE:
            return "stopped, compensating", "magenta"
        return CUT_SHORT.get(status.phase, "failed"), "red"
    if timing.ended_at is not None:
        return "done", "green"
    if status.phase in FINAL_PHASES:
        # Nothing runs after the end, whatever the last record says.
        return "stopped", "red"
    return "running", "yellow"


def render(
    status: BootstrapStatus,
    now: datetime | None = None,
    note: str | None = None,
    seen_at: datetime | None = None,
) -> Group:
    """The phase table and the counts. `seen_at`: the bootstrap closed, so the counts are
    its last look at the cloud, recorded then, not the cloud's state now."""
    now = now or datetime.now(UTC)
    # The status is a query answer: any of its strings may have come from outside keeper.
    where = ", ".join(terminal_text(v, markup=True) for v in (status.capacity, status.zone))
    table = Table(title=f"TPU slice {terminal_text(status.slice_name, markup=True)} ({where})")
    for column in ("phase", "state", "took / deadline"):
        table.add_column(column)
    timings = {t.phase: t for t in status.timings}
    for phase in PHASE_ORDER:
        word, style = phase_state(status, phase)
        timing = timings.get(phase)
        if timing is None:
            when = ""
        elif timing.ended_at is not None:
            when = format_duration_seconds(timing.seconds or 0.0)
        elif status.phase in FINAL_PHASES:
            when = ""
        else:
            when = _countdown(timing.deadline_at, now)
        table.add_row(phase.value, Text(word, style=style), when)
    qr = terminal_text(status.qr_state or "-")
    if seen_at is not None and status.qr_state not in (None, "deleted"):
        qr += f" (last seen at {rfc3339(seen_at)}, before the bootstrap closed; not read since)"
    counts = Text(
        f"QR {qr} | nodes ready {status.nodes_ready}/{status.nodes_expected}"
        f" | VMs with IP {status.vms_with_ip}/{status.vms_expected}"
        f" | healthy {status.vms_healthy}/{status.vms_expected}"
    )
    parts: list[Any] = [table, counts]
    if note:
        parts.append(Text(note, style="bold"))
    if status.compensation:
        parts.append(Text(f"compensation: {terminal_text(status.compensation)}", style="magenta"))
    if status.error:
        parts.append(Text(f"error: {terminal_text(status.error)}", style="red"))
    if failing := _failing_text(status):
        parts.append(Text(failing, style="red"))
    return Group(*parts)


def line(status: BootstrapStatus) -> str:
    """One line per state; nothing in it changes while the state does not."""
    deadline = ""
    if status.phase_deadline_at:
        deadline = f" (deadline {status.phase_deadline_at.astimezone(UTC):%H:%M:%S} UTC)"
    text = (
        f"{terminal_text(status.slice_name)}: {status.phase.value}{deadline} "
        f"QR={terminal_text(status.qr_state or '-')} "
        f"ip={status.vms_with_ip}/{status.vms_expected} "
        f"healthy={status.vms_healthy}/{status.vms_expected}"
    )
    if status.failed_phase is not None and status.phase in STOPPED:
        text += f" stopped-in={status.failed_phase.value}"
    if failing := _failing_text(status):
        text += f"; {failing}"
    if status.compensation:
        text += f"; compensation: {terminal_text(status.compensation)}"
    return text


async def query_status(handle: WorkflowHandle[Any, Any]) -> BootstrapStatus | None:
    try:
        return await handle.query("status", result_type=BootstrapStatus)
    except Exception:  # the worker or the server may be restarting; the next tick asks again
        return None


async def result_of(handle: WorkflowHandle[Any, Any], note: Note) -> Any:
    """The workflow's result, waiting through server restarts (the SDK reconnects its
    channel on the next call; the wait is asked again after a backoff)."""
    delay = RECONNECT_FIRST
    while True:
        try:
            return await handle.result()
        except RPCError as err:
            if not is_transient(err):
                raise
            note(
                f"lost the connection to Temporal ({err.status.name if err.status else '?'}: "
                f"{err.message}); reconnecting in {delay:g}s and waiting on"
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)


async def follow(
    handle: WorkflowHandle[Any, Any],
    console: Console,
    note: Note,
    interval: float = 1.0,
) -> None:
    """Shows progress until the workflow closes; the caller then fetches the result."""
    result = asyncio.ensure_future(result_of(handle, note))
    status: BootstrapStatus | None = None
    if console.is_terminal:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            while not result.done():
                status = await query_status(handle) or status
                if status:
                    live.update(render(status))
                await asyncio.wait([result], timeout=interval)
            final = await query_status(handle) or status
            if final:
                live.update(render(final))
    else:
        last = ""
        while not result.done():
            status = await query_status(handle) or status
            if status and (text := line(status)) != last:
                console.print(text, markup=False, highlight=False, soft_wrap=True)
                last = text
            await asyncio.wait([result], timeout=interval)
    # Leave the result (or its exception) for the caller's own await.
    await asyncio.wait([result])
    if not result.cancelled():
        result.exception()
