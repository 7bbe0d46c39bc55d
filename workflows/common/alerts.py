"""Raising an alert from a workflow: one activity started and never awaited.

A slow or failing webhook cannot hold up the workflow. Each alert is a command: a new call
site in a workflow goes behind a `workflow.patched` of its own (docs/operations.md).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityHandle

with workflow.unsafe.imports_passed_through():
    from keeper.activities.alerts import AlertActivities
    from keeper.domain.common.alerts import ALERT_ATTEMPTS, Alert
    from keeper.domain.common.untrusted import md_text

# Per attempt: the channel's own HTTP deadline (alerts.timeout) sits inside it.
ALERT_START_TO_CLOSE = timedelta(seconds=30)
# Bounded: the activity gives the alert up (logged) on its last attempt.
ALERT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=ALERT_ATTEMPTS,
)


def raise_alert(alert: Alert) -> ActivityHandle[bool]:
    """Starts the alert on the workflow's own task queue, where its family's worker serves
    `common.alert`."""
    return workflow.start_activity_method(
        AlertActivities.alert,
        alert,
        start_to_close_timeout=ALERT_START_TO_CLOSE,
        retry_policy=ALERT_RETRY,
        # The UI renders a summary as markdown; the title carries names keeper did not write.
        summary=f"alert: {md_text(alert.title, 200)}",
    )
