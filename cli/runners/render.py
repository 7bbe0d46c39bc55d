"""How `keeper runner` shows a deletion: its view, the calls Temporal retries for it, and
its result, as text (one line per outside value) and as JSON fields."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from keeper.cli.output import rfc3339
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.runners.deletion_view import DeletionView
from keeper.domain.runners.models import DeletionResult

# Why a retried call waits, by activity, when its failure does not say (provider deletes
# back off through their retry policy).
DEFAULT_WHY = {"runners.provider_delete": "backoff"}


def view_text(view: DeletionView) -> str:
    # GitHub and provider answers, decisions and errors carry outside text: one line each.
    t = terminal_text
    text = f"{view.step.value:<16} record {t(view.status or '-'):<20} GitHub: {t(view.github)}"
    text += f" ({view.github_attempts})  provider: {t(view.provider)} ({view.provider_attempts})"
    if view.decision:
        text += f"\n{'':16} decision: {t(view.decision)}"
    if view.background:
        text += f"\n{'':16} in the background: {t(view.background)}"
    if view.error:
        text += f"\n{'':16} needs attention: {t(view.error)}"
    return text


def _why(pending: Any) -> str | None:
    """What the retried call waits for (busy poll, backoff, retry-after, escalation
    recheck): the second detail of the activity's failure, a JSON string."""
    failure = pending.last_failure
    if failure.HasField("application_failure_info"):
        payloads = failure.application_failure_info.details.payloads
        if len(payloads) > 1:
            try:
                why = json.loads(payloads[1].data)
            except ValueError:
                why = None
            if isinstance(why, str):
                return why
    return DEFAULT_WHY.get(pending.activity_type.name)


def retrying(desc: Any) -> list[dict[str, Any]]:
    """Calls Temporal is retrying for the deletion: each attempt is a retry, not a history
    event, so the attempt count, last answer and next try live on the pending activity."""
    calls: list[dict[str, Any]] = []
    for pending in desc.raw_description.pending_activities if desc else []:
        if not pending.HasField("last_failure"):
            continue  # a first attempt still running: nothing is being retried yet
        next_try = None
        if pending.HasField("next_attempt_schedule_time"):
            next_try = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
        calls.append(
            {
                "activity": pending.activity_type.name,
                "attempt": pending.attempt,
                "last_failure": pending.last_failure.message or None,
                "next_try_at": rfc3339(next_try),
                "why": _why(pending),
            }
        )
    return calls


def retrying_text(calls: list[dict[str, Any]]) -> str:
    lines = []
    for call in calls:
        line = f"{call['activity']}: attempt {call['attempt']}"
        if call["next_try_at"]:
            why = f" ({call['why']})" if call["why"] else ""
            line += f", next try at {call['next_try_at']}{why}"
        else:
            line += ", running now"
        if call["last_failure"]:
            line += f", last: {terminal_text(call['last_failure'])}"
        lines.append(line)
    return "\n".join(lines)


def result_text(result: DeletionResult, background: str | None = None) -> str:
    t = terminal_text
    forced = " (forced)" if result.forced else ""
    lines = [f"runner {t(result.runner)}: {result.outcome.value}{forced}"]
    if result.registration:
        lines.append(f"  GitHub:   {t(result.registration)}")
    if result.provider:
        lines.append(f"  provider: {t(result.provider)}")
    if result.busy_decision:
        lines.append(f"  decision: {t(result.busy_decision)}")
    if background:
        lines.append(f"  still running in the background: {t(background)}")
    if result.recovered:
        lines.append(
            "  the final write went through the audited recovery path (see `runner status`)"
        )
    if result.leaked_provider_id:
        lines.append(
            f"  LEAK: instance {t(result.leaked_provider_id)} may still exist; it is recorded for "
            "the orphan sweep (`keeper runner status` lists it)"
        )
    return "\n".join(lines)
