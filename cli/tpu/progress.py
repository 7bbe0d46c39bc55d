"""The live view of a bootstrap: one row per phase with its deadline countdown."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowHandle

from domain.common.durations import format_duration
from domain.common.untrusted import terminal_text
from domain.tpu.models import BootstrapStatus
from domain.tpu.phases import Phase
from domain.tpu.status_view import format_duration_seconds

PHASE_ORDER = [Phase.SUBMIT, Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH]


def _countdown(deadline: datetime | None, now: datetime) -> str:
    if deadline is None:
        return ""
    left = deadline - now
    if left.total_seconds() <= 0:
        return "deadline passed"
    return f"{format_duration(left)} left"


def render(status: BootstrapStatus, now: datetime | None = None) -> Group:
    now = now or datetime.now(UTC)
    # The status is a query answer: any of its strings may have come from outside keeper.
    where = ", ".join(terminal_text(v, markup=True) for v in (status.capacity, status.zone))
    table = Table(title=f"TPU slice {terminal_text(status.slice_name, markup=True)} ({where})")
    for column in ("phase", "state", "took / deadline"):
        table.add_column(column)
    timings = {t.phase: t for t in status.timings}
    for phase in PHASE_ORDER:
        timing = timings.get(phase)
        if timing is None:
            table.add_row(phase.value, Text("-", style="dim"), "")
        elif timing.ended_at is not None:
            took = format_duration_seconds(timing.seconds or 0.0)
            table.add_row(phase.value, Text("done", style="green"), took)
        else:
            table.add_row(
                phase.value,
                Text("running", style="yellow"),
                _countdown(timing.deadline_at, now),
            )
    qr = terminal_text(status.qr_state or "-")
    counts = Text(
        f"QR {qr} | nodes ready {status.nodes_ready}/{status.nodes_expected}"
        f" | VMs with IP {status.vms_with_ip}/{status.vms_expected}"
        f" | healthy {status.vms_healthy}/{status.vms_expected}"
    )
    parts: list[Any] = [table, counts]
    if status.compensation:
        parts.append(Text(f"compensation: {terminal_text(status.compensation)}", style="magenta"))
    if status.error:
        parts.append(Text(f"error: {terminal_text(status.error)}", style="red"))
    return Group(*parts)


def line(status: BootstrapStatus) -> str:
    deadline = ""
    if status.phase_deadline_at:
        deadline = f" ({_countdown(status.phase_deadline_at, datetime.now(UTC))})"
    return (
        f"{terminal_text(status.slice_name)}: {status.phase.value}{deadline} "
        f"QR={terminal_text(status.qr_state or '-')} "
        f"ip={status.vms_with_ip}/{status.vms_expected} "
        f"healthy={status.vms_healthy}/{status.vms_expected}"
    )


async def query_status(handle: WorkflowHandle[Any, Any]) -> BootstrapStatus | None:
    try:
        return await handle.query("status", result_type=BootstrapStatus)
    except Exception:  # the worker may be restarting; the next tick asks again
        return None


async def follow(handle: WorkflowHandle[Any, Any], console: Console, interval: float = 1.0) -> None:
    """Shows progress until the workflow closes; the caller then fetches the result."""
    result = asyncio.ensure_future(handle.result())
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
                print(text, file=sys.stderr, flush=True)
                last = text
            await asyncio.wait([result], timeout=interval)
    # Leave the result (or its exception) for the caller's own await.
    await asyncio.wait([result])
    if not result.cancelled():
        result.exception()
