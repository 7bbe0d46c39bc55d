"""How a bootstrap looks while it is followed (cli/workflow_view.py's `follow`): the page,
one row per phase with its deadline countdown, and the line a log gets per change of state.
The line holds the deadline as a time, not a countdown, so a 4-hour wait writes a handful of
lines, not one a second.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowHandle

from keeper.cli.output import rfc3339
from keeper.cli.workflow_view import Look, query
from keeper.domain.common.durations import format_duration
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.tpu.models import BootstrapStatus
from keeper.domain.tpu.outcome import FINAL_PHASES
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.status_view import failing_vm_list, format_duration_seconds
from keeper.domain.tpu.transitions import TIMED

STOPPED = (Phase.FAILED, Phase.CANCELLED, Phase.COMPENSATE, Phase.TERMINATED, Phase.TIMED_OUT)
# A phase cut short by a close Temporal imposed (domain/tpu/outcome.py, closed_view).
CUT_SHORT = {Phase.TERMINATED: "terminated", Phase.TIMED_OUT: "timed out"}
# Failing VMs named in the live view and in a status line; `status --json` has them all.
FAILING_SHOWN = 5


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
    for phase in TIMED:
        word, style = phase_state(status, phase)
        timing = timings.get(phase)
        when = ""
        if timing is not None and timing.ended_at is not None:
            when = format_duration_seconds(timing.seconds or 0.0)
        elif timing is not None and status.phase not in FINAL_PHASES:
            # Nothing runs after the end: no countdown then.
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
    """The bootstrap's `status` query; None when no worker answers now."""
    return await query(handle, "status", BootstrapStatus)


def look(handle: WorkflowHandle[Any, Any]) -> Look[BootstrapStatus]:
    """The bootstrap as `--follow` shows it."""
    # A final phase is what the command's summary says next (ready, failed, cancelled).
    return Look(
        query=lambda: query_status(handle),
        page=render,
        line=line,
        settled=lambda status: status.phase in FINAL_PHASES,
    )
