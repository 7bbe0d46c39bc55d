"""What a runner deletion shows while it runs: the query result, the UI's current details,
and the backoff between attempts."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.common.untrusted import md_text
from keeper.domain.runners.models import DeletionStep

MAX_REQUESTS_SHOWN = 8
REQUEST_LIMIT = 120  # eight of them fit in one table cell
ERROR_LIMIT = 600


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
    escalated: bool = False
    # What the deletion waits on while Temporal retries a call for it (no history event per
    # attempt); the pending activity has the attempt count, last answer and next try.
    waiting: str | None = None
    # Requests whose payload was not a DeletionRequest: shown, never acted on.
    rejected: list[str] = Field(default_factory=list)
    run: int = 1  # which run of this deletion (continue-as-new rolls the history over)
    # The record is tombstoned: the runner is deleted, and `background` says what still runs.
    tombstoned: bool = False
    background: str | None = None
    leaked_provider_id: str | None = None
    recovered: bool = False


def backoff(attempt: int, initial: timedelta, maximum: timedelta) -> timedelta:
    """Doubling from `initial` (attempt 1) up to `maximum`."""
    seconds = initial.total_seconds() * (2 ** max(0, min(attempt - 1, 30)))
    return timedelta(seconds=min(seconds, maximum.total_seconds()))


def summary(runner: str, scale_set: str | None, force: bool) -> str:
    where = f" in {md_text(scale_set)}" if scale_set else ""
    return f"{'force-' if force else ''}delete runner {md_text(runner)}{where}"


def _when(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S UTC") if at else "-"


def render_details(view: DeletionView) -> str:
    """Markdown for the UI. Only the template is markdown: every value from outside keeper
    (names, GitHub and provider answers, request reasons) goes through md_text."""
    lines = [
        f"## runner {md_text(view.runner)}: **{view.step.value}**",
        "",
        "| | |",
        "|---|---|",
        f"| step | `{view.step.value}` |",
        f"| record | {md_text(view.status or '-')} |",
        f"| scale set | {md_text(view.scale_set or '-')} |",
        f"| mode | {'force' if view.force else 'normal'} |",
        f"| GitHub | {md_text(view.github)} (attempts: {view.github_attempts}) |",
        f"| provider | {md_text(view.provider)} (attempts: {view.provider_attempts}) |",
    ]
    if view.busy_since:
        lines.append(f"| busy since | {_when(view.busy_since)} |")
    if view.next_try_at:
        lines.append(f"| next try | {_when(view.next_try_at)} |")
    if view.decision:
        lines.append(f"| decision | {md_text(view.decision)} |")
    if view.background:
        lines.append(f"| in the background | {md_text(view.background)} |")
    if view.waiting:
        lines.append(f"| waiting on | {md_text(view.waiting)} |")
    if view.run > 1:
        lines.append(f"| run | {view.run} (the history rolled over) |")
    if view.rejected:
        rejected = "; ".join(md_text(r, REQUEST_LIMIT) for r in view.rejected[-MAX_REQUESTS_SHOWN:])
        lines.append(f"| rejected requests | {rejected} |")
    if view.cancel_requested:
        lines.append("| cancel | requested; the lane is forward-only, so the deletion finishes |")
    shown = view.requests[-MAX_REQUESTS_SHOWN:]
    if shown:
        more = len(view.requests) - len(shown)
        listed = "; ".join(md_text(r, REQUEST_LIMIT) for r in shown)
        lines.append(f"| requests | {listed}{f' (+{more} earlier)' if more else ''} |")
    if view.error:
        lines += ["", f"**Needs attention:** {md_text(view.error, ERROR_LIMIT)}"]
    return "\n".join(lines)
