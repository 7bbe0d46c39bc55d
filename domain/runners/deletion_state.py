"""What a runner deletion knows while it runs (its state), and what it shows (its view).

The workflow keeps one `DeletionState` and changes it as it goes; the `status` query, the
UI's current details and a carried-over run are all derived from it (`view_of`,
`result_of`), so nothing shown is kept anywhere else. Pure: the workflow imports this module.
"""

from __future__ import annotations

from keeper.domain.runners.deletion_view import DeletionView
from keeper.domain.runners.models import DeletionOutcome, DeletionResult, DeletionStep


class DeletionState(DeletionView):
    """Everything the view shows, plus what only the workflow needs to decide."""

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
