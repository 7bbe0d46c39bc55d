"""How the TPU workflows read in the Temporal UI (current details) and the CLI: a
bootstrap's status, a teardown and a sweep, each rendered whole from its state."""

from __future__ import annotations

from datetime import datetime, timedelta

from keeper.domain.common.durations import format_duration
from keeper.domain.common.untrusted import md_text
from keeper.domain.tpu.models import BootstrapStatus, SweepReport, TeardownState, VmFailure

MAX_FAILING_SHOWN = 10
ERROR_LIMIT = 600
# Items of a sweep's report listed in its details; the result holds them all.
MAX_SWEEP_ITEMS_SHOWN = 10
TEARDOWN_CANCEL_NOTE = (
    "cancel requested: the delete goes on until the slice is confirmed gone, then the "
    "teardown closes as cancelled"
)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "-"


def render_details(status: BootstrapStatus) -> str:
    """Markdown for the UI. Only the template is markdown: names, QR states, GCP errors and
    health answers come from outside keeper and go through md_text."""
    lines = [
        f"## {md_text(status.slice_name)}: **{status.phase.value}**",
        "",
        "| | |",
        "|---|---|",
        f"| phase | `{status.phase.value}` |",
        f"| deadline | {_when(status.phase_deadline_at)} |",
        f"| queued resource | {md_text(status.qr_state or 'n/a')} |",
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
    if status.failed_phase is not None:
        lines.append(f"| stopped in | `{status.failed_phase.value}` |")
    if status.compensation:
        lines.append(f"| compensation | {md_text(status.compensation)} |")
    if status.compensation_stuck:
        lines += [
            "",
            f"**Compensation stuck** since {_when(status.compensation_stuck_since)}: "
            f"{md_text(status.compensation or '', ERROR_LIMIT)}",
        ]
    if status.error:
        lines += ["", f"**Error:** {md_text(status.error, ERROR_LIMIT)}"]
    if status.failing_vms:
        lines += ["", "**Failing VMs:**"]
        for vm in status.failing_vms[:MAX_FAILING_SHOWN]:
            lines.append(f"- {md_text(vm.node)}/{vm.index} {md_text(vm.ip)}: {md_text(vm.reason)}")
        hidden = max(status.vms_failing or 0, len(status.failing_vms)) - MAX_FAILING_SHOWN
        if hidden > 0:
            lines.append(f"- ... and {hidden} more (see the `status` query)")
    return "\n".join(lines)


def failing_vm_list(failing: list[VmFailure], count: int | None = None, shown: int = 10) -> str:
    """`train-a/2 10.0.0.3 (HTTP 503), ... and 4 more`: the first few failing VMs and why.

    Plain text: the caller makes it safe for where it goes (md_text, terminal_text).
    """
    total = len(failing) if count is None else max(count, len(failing))
    names = ", ".join(f"{f.node}/{f.index} {f.ip} ({f.reason})" for f in failing[:shown])
    more = total - min(len(failing), shown)
    return names + (f" and {more} more" if more > 0 else "")


def format_duration_seconds(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))


def static_summary(slice_name: str, accelerator: str, capacity: str, zone: str) -> str:
    parts = [md_text(p) for p in (accelerator, slice_name, capacity, zone)]
    return "TPU {} slice {} ({}, {})".format(*parts)


def render_teardown(slice_name: str, reason: str, step: str, state: TeardownState) -> str:
    """The reason and the deletion's errors are outside text: shown, never rendered."""
    lines = [f"## {md_text(slice_name)}: **{step}**", "", md_text(reason)]
    for note in (TEARDOWN_CANCEL_NOTE if state.cancel_seen else None, state.deletion):
        if note:
            lines += ["", md_text(note, ERROR_LIMIT)]
    return "\n".join(lines)


def render_sweep(report: SweepReport) -> str:
    """Items carry resource names, owner labels and GCP errors: outside text."""
    lines = [
        f"## sweep of {len(report.locations)} location(s)",
        "",
        f"examined {report.examined}, deleted {len(report.deleted)}, kept "
        f"{len(report.kept)}, unknown owner {len(report.unknown_owner)}, failed "
        f"{len(report.failed)}" + (" (dry run)" if report.dry_run else ""),
        "",
        "locations: " + ", ".join(md_text(location) for location in report.locations),
    ]
    shown = MAX_SWEEP_ITEMS_SHOWN
    for title, items in (("Not deleted", report.failed), ("Errors", report.errors)):
        if items:
            lines += ["", f"**{title}:**", *(f"- {md_text(i)}" for i in items[:shown])]
            if len(items) > shown:
                lines.append(f"- ... and {len(items) - shown} more (see the result)")
    return "\n".join(lines)
