"""Continue-as-new, the same way in every family (samples-python `safe_message_handlers`).

A run rolls over when the server suggests it or its history passed the family's limit, and
only once every signal and update handler has finished, so no operator's decision is cut
short by the roll-over.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow


def history_is_long(events_limit: int | None = None) -> bool:
    """The server suggests continuing as new, or the history passed the family's limit (a
    family without one, such as the TPU workflows, goes by the server alone)."""
    info = workflow.info()
    if info.is_continue_as_new_suggested():
        return True
    return events_limit is not None and info.get_current_history_length() >= events_limit


async def handlers_finished(unless: Callable[[], bool] = lambda: False) -> bool:
    """Waits until every handler has finished; False when `unless` turned true first (an
    operator's decision arrived that the run must carry out before it rolls over)."""
    await workflow.wait_condition(lambda: workflow.all_handlers_finished() or unless())
    return not unless()
