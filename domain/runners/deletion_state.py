"""What a runner deletion knows while it runs (its state), and what it shows (its view).

The workflow keeps one `DeletionState` and changes it as it goes; the `status` query, the
UI's current details and a carried-over run are all derived from it (`view_of`,
`result_of`), so nothing shown is kept anywhere else. Pure: the workflow imports this module.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from domain.runners.deletion_view import DeletionView
from domain.runners.models import DeletionOutcome, DeletionResult, DeletionStep


class DeletionState(BaseModel):
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
    rejected: list[str] = Field(default_factory=list)
    run: int = 1
    # The tombstone is written: the runner is deleted, whatever still runs after it.
    tombstoned: bool = False
    # Work that goes on after the tombstone (a busy runner's registration, removed once it
    # is offline); the deletion's outcome no longer depends on it.
    background: str | None = None
    leaked_provider_id: str | None = None
    recovered: bool = False
    # A refused GitHub token: what it needs, until GitHub accepts one.
    attention: str | None = None


def view_of(state: DeletionState) -> DeletionView:
    """The status query's answer and the source of the UI's details."""
    fields = state.model_dump(exclude={"attention"})
    if state.attention:
        fields["error"] = state.attention
    if state.tombstoned:
        # Once the tombstone is written the record says `deleted`, and so does the view,
        # even while a registration cleanup still runs behind it.
        fields["step"] = DeletionStep.DONE
        fields["status"] = "deleted"
    return DeletionView.model_validate(fields)


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
        requests=tuple(state.requests),
    )
