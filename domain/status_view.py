"""How a bootstrap's status reads in the Temporal UI (current details) and the CLI."""

from __future__ import annotations

from datetime import datetime

from domain.bootstrap_models import BootstrapStatus
from domain.durations import format_duration

MAX_FAILING_SHOWN = 10


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "-"


def render_details(status: BootstrapStatus) -> str:
    lines = [
        f"## {status.slice_name}: **{status.phase.value}**",
        "",
        "| | |",
        "|---|---|",
        f"| phase | `{status.phase.value}` |",
        f"| deadline | {_when(status.phase_deadline_at)} |",
        f"| queued resource | `{status.qr_state or 'n/a'}` |",
        f"| nodes ready | {status.nodes_ready}/{status.nodes_expected} |",
        f"| VMs with IP | {status.vms_with_ip}/{status.vms_expected} |",
        f"| VMs healthy | {status.vms_healthy}/{status.vms_expected} |",
    ]
    done = [t for t in status.timings if t.seconds is not None]
    if done:
        took = ", ".join(
            f"{t.phase.value} {format_duration_seconds(t.seconds or 0.0)}" for t in done
        )
        lines.append(f"| phases done | {took} |")
    if status.compensation:
        lines.append(f"| compensation | {status.compensation} |")
    if status.error:
        lines += ["", f"**Error:** {status.error}"]
    if status.failing_vms:
        lines += ["", "**Failing VMs:**"]
        for vm in status.failing_vms[:MAX_FAILING_SHOWN]:
            lines.append(f"- `{vm.node}`/{vm.index} {vm.ip}: {vm.reason}")
        hidden = len(status.failing_vms) - MAX_FAILING_SHOWN
        if hidden > 0:
            lines.append(f"- ... and {hidden} more (see the `status` query)")
    return "\n".join(lines)


def format_duration_seconds(seconds: float) -> str:
    from datetime import timedelta

    return format_duration(timedelta(seconds=round(seconds)))


def static_summary(slice_name: str, accelerator: str, capacity: str, zone: str) -> str:
    return f"TPU {accelerator} slice {slice_name} ({capacity}, {zone})"
