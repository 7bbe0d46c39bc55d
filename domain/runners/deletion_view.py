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
    """The `status` query's answer: the state's fields of the same names (their meaning is
    DeletionState's), except that `error` includes a refused token's attention, and that a
    tombstoned deletion shows step `done` and status `deleted`."""

    model_config = ConfigDict(frozen=True)

    runner: str
    scale_set: str = ""
    step: DeletionStep = DeletionStep.READ
    status: str = ""
    force: bool = False
    github: str = "-"
    github_attempts: int = 0
    provider: str = "-"
    provider_attempts: int = 0
    busy_since: datetime | None = None
    decision: str | None = None
    requests: list[str] = Field(default_factory=list)
    earlier_requests: int = 0
    cancel_requested: bool = False
    error: str | None = None
    escalated: bool = False
    waiting: str | None = None
    run: int = 1
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
    shown = {name: getattr(state, name) for name in DeletionView.model_fields}
    shown["error"] = state.attention or state.error
    # Once the tombstone is written the record says `deleted`, even while a registration
    # cleanup still runs behind it.
    if state.tombstoned:
        shown.update(step=DeletionStep.DONE, status=InstanceStatus.DELETED.value)
    return DeletionView(**shown)


def result_of(state: DeletionState | DeletionView, outcome: DeletionOutcome) -> DeletionResult:
    """The result, from the state; or from the view of a tombstoned deletion while only its
    registration cleanup still runs."""
    return DeletionResult(
        runner=state.runner,
        outcome=outcome,
        forced=state.force,
        leaked_provider_id=state.leaked_provider_id,
        registration=state.github,
        provider=state.provider,
        recovered=state.recovered,
        busy_decision=state.decision,
        requests=tuple(state.requests),
    )


def summary(runner: str, scale_set: str | None, force: bool) -> str:
    where = f" in {md_text(scale_set)}" if scale_set else ""
    return f"{'force-' if force else ''}delete runner {md_text(runner)}{where}"


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
        lines.append(f"| busy since | {view.busy_since:%H:%M:%S UTC} |")
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
