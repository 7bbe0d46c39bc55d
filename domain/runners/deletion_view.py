"""What a runner deletion shows, rendered from its state (domain.runners.deletion_state): the
`status` query's view, the UI's current details, a request's answer, the result, and the
escalation alert. Pure: the workflow imports this module."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.common.alerts import Alert, AlertKind, make_alert
from keeper.domain.common.untrusted import md_text
from keeper.domain.runners.deletion_state import DeletionState
from keeper.domain.runners.models import DeletionOutcome, DeletionResult, DeletionStep
from keeper.domain.runners.status import InstanceStatus

MAX_REQUESTS_SHOWN = 8
REQUEST_LIMIT = 120  # eight of them fit in one table cell
ERROR_LIMIT = 600


class DeletionView(BaseModel):
    """The `status` query's answer."""

    model_config = ConfigDict(frozen=True)

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
    requests: list[str] = Field(default_factory=list)
    earlier_requests: int = 0  # asked too, no longer listed in `requests`
    cancel_requested: bool = False
    error: str | None = None  # what an operator must do, a refused token's included
    escalated: bool = False
    # What the deletion waits on while Temporal retries a call for it.
    waiting: str | None = None
    run: int = 1  # which run of this deletion (continue-as-new rolls the history over)
    # The record is tombstoned: the runner is deleted, and `background` says what still runs.
    tombstoned: bool = False
    background: str | None = None
    leaked_provider_id: str | None = None
    recovered: bool = False


class RequestAnswer(BaseModel):
    """What the `request` update answers its sender."""

    model_config = ConfigDict(frozen=True)

    # The deletion was already asked for (this request joined it rather than starting it).
    joined: bool
    view: DeletionView


def view_of(state: DeletionState) -> DeletionView:
    """The status query's answer and the source of the UI's details."""
    return DeletionView(
        runner=state.runner,
        scale_set=state.scale_set,
        # Once the tombstone is written the record says `deleted`, and so does the view,
        # even while a registration cleanup still runs behind it.
        step=DeletionStep.DONE if state.tombstoned else state.step,
        status=InstanceStatus.DELETED.value if state.tombstoned else state.status,
        force=state.force,
        github=state.github,
        github_attempts=state.github_attempts,
        provider=state.provider,
        provider_attempts=state.provider_attempts,
        busy_since=state.busy_since,
        decision=state.decision,
        requests=list(state.requests),
        earlier_requests=state.earlier_requests,
        cancel_requested=state.cancel_requested,
        error=state.attention or state.error,
        escalated=state.escalated,
        waiting=state.waiting,
        run=state.run,
        tombstoned=state.tombstoned,
        background=state.background,
        leaked_provider_id=state.leaked_provider_id,
        recovered=state.recovered,
    )


def result_of(state: DeletionState, outcome: DeletionOutcome) -> DeletionResult:
    return DeletionResult(
        runner=state.runner,
        outcome=outcome,
        forced=state.force,
        leaked_provider_id=state.leaked_provider_id,
        registration=state.github,
        provider=state.provider,
        recovered=state.recovered,
        busy_decision=state.decision,
        requests=state.requests,
    )


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
    if view.decision:
        lines.append(f"| decision | {md_text(view.decision)} |")
    if view.background:
        lines.append(f"| in the background | {md_text(view.background)} |")
    if view.waiting:
        lines.append(f"| waiting on | {md_text(view.waiting)} |")
    if view.run > 1:
        lines.append(f"| run | {view.run} (the history rolled over) |")
    if view.cancel_requested:
        lines.append("| cancel | requested; the lane is forward-only, so the deletion finishes |")
    shown = view.requests[-MAX_REQUESTS_SHOWN:]
    if shown:
        more = len(view.requests) - len(shown) + view.earlier_requests
        listed = "; ".join(md_text(r, REQUEST_LIMIT) for r in shown)
        lines.append(f"| requests | {listed}{f' (+{more} earlier)' if more else ''} |")
    if view.error:
        lines += ["", f"**Needs attention:** {md_text(view.error, ERROR_LIMIT)}"]
    return "\n".join(lines)


def escalation_alert(state: DeletionState, workflow_id: str, key: str) -> Alert:
    """The alert of a deletion that turned to an operator: what escalated it, and where."""
    evidence = [
        line
        for line in (
            f"scale set: {state.scale_set}" if state.scale_set else None,
            f"status: {state.status}" if state.status else None,
            state.error,
        )
        if line
    ]
    summary_line = f"{state.runner}: {state.decision or 'an operator must decide'}"
    return make_alert(AlertKind.DELETION_ESCALATED, workflow_id, key, summary_line, evidence)
