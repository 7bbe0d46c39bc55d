"""What a runner deletion shows while it runs: the query result, the UI's current details,
and the backoff between attempts."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from domain.runner_models import DeletionStep

MAX_REQUESTS_SHOWN = 8


class DeletionView(BaseModel):
    model_config = ConfigDict(validate_assignment=True)

    runner: str
    scale_set: str = ""
    step: DeletionStep = DeletionStep.READ
    status: str = ""  # the record's instance status as last read or written
    force: bool = False
    github: str = "-"  # the last GitHub answer
    github_attempts: int = 0
    provider: str = "-"  # the last provider answer
    provider_attempts: int = 0
    busy_since: datetime | None = None
    decision: str | None = None  # busy-timeout decision, escalation, leak
    next_try_at: datetime | None = None
    requests: list[str] = Field(default_factory=list)
    cancel_requested: bool = False
    error: str | None = None


def backoff(attempt: int, initial: timedelta, maximum: timedelta) -> timedelta:
    """Doubling from `initial` (attempt 1) up to `maximum`."""
    seconds = initial.total_seconds() * (2 ** max(0, min(attempt - 1, 30)))
    return timedelta(seconds=min(seconds, maximum.total_seconds()))


def summary(runner: str, scale_set: str | None, force: bool) -> str:
    where = f" in {scale_set}" if scale_set else ""
    return f"{'force-' if force else ''}delete runner {runner}{where}"


def _when(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S UTC") if at else "-"


def render_details(view: DeletionView) -> str:
    lines = [
        f"## runner {view.runner}: **{view.step.value}**",
        "",
        "| | |",
        "|---|---|",
        f"| step | `{view.step.value}` |",
        f"| record | `{view.status or '-'}` |",
        f"| scale set | {view.scale_set or '-'} |",
        f"| mode | {'force' if view.force else 'normal'} |",
        f"| GitHub | {view.github} (attempts: {view.github_attempts}) |",
        f"| provider | {view.provider} (attempts: {view.provider_attempts}) |",
    ]
    if view.busy_since:
        lines.append(f"| busy since | {_when(view.busy_since)} |")
    if view.next_try_at:
        lines.append(f"| next try | {_when(view.next_try_at)} |")
    if view.decision:
        lines.append(f"| decision | {view.decision} |")
    if view.cancel_requested:
        lines.append("| cancel | requested; the lane is forward-only, so the deletion finishes |")
    shown = view.requests[-MAX_REQUESTS_SHOWN:]
    if shown:
        more = len(view.requests) - len(shown)
        lines.append(f"| requests | {'; '.join(shown)}{f' (+{more} earlier)' if more else ''} |")
    if view.error:
        lines += ["", f"**Needs attention:** {view.error}"]
    return "\n".join(lines)
