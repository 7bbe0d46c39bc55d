"""The alert activity every family's worker serves (`common.alert`) on its own queue.

Workflows start it and never wait on it. It posts each alert once per worker (a retry after
a lost answer does not post twice), gives up after a few attempts with a log line, and never
fails: an alert must not hold up or fail what it reports on.
"""

from __future__ import annotations

from collections import OrderedDict

from temporalio import activity

from keeper.domain.common.alerts import ALERT_ATTEMPTS, Alert
from keeper.runtime.alerts import AlertChannel
from keeper.runtime.webhook import WebhookFailed

# Keys of alerts already posted by this worker; an alert older than these is long settled.
_REMEMBERED = 10_000


class AlertActivities:
    def __init__(self, channel: AlertChannel) -> None:
        self._channel = channel
        self._sent: OrderedDict[str, None] = OrderedDict()

    @activity.defn(name="common.alert")
    async def alert(self, alert: Alert) -> bool:
        """True when posted (now or by an earlier attempt); False when no webhook is
        configured or the webhook would not take it (both logged)."""
        info = activity.info()
        if alert.key in self._sent:
            return True
        activity.logger.warning("alert %s: %s; %s", alert.kind, alert.title, "; ".join(alert.lines))
        try:
            posted = await self._channel.post(
                alert.title, alert.lines, alert.footer(info.workflow_id)
            )
        except WebhookFailed as err:
            if err.retryable and info.attempt < ALERT_ATTEMPTS:
                raise
            activity.logger.error(
                "alert %s given up after %d attempt(s): %s", alert.key, info.attempt, err
            )
            return False
        if not posted:
            activity.logger.warning(
                "alert %s not sent: no alert webhook is configured (%s)",
                alert.key,
                self._channel.setting,
            )
            return False
        self._sent[alert.key] = None
        while len(self._sent) > _REMEMBERED:
            self._sent.popitem(last=False)
        return True
