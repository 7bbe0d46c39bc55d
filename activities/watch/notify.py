"""Notifications of a watch started before the shared alert channel (`watch.notify`), sent
from an activity (the workflow never waits on a webhook), once per event: a retry after a
lost answer does not post twice from the same worker. Newer runs raise `keeper.alert`."""

from __future__ import annotations

from collections import OrderedDict

from temporalio import activity
from temporalio.exceptions import ApplicationError

from keeper.domain.watch.calls import Notice
from keeper.runtime.alerts import AlertChannel
from keeper.runtime.webhook import WebhookFailed

_REMEMBERED = 10_000


class WatchNotifier:
    def __init__(self, channel: AlertChannel) -> None:
        self._channel = channel
        self._sent: OrderedDict[str, None] = OrderedDict()

    @activity.defn(name="watch.notify")
    async def notify(self, notice: Notice) -> bool:
        """True when posted; False when no webhook is configured (the notice is logged)."""
        info = activity.info()
        key = f"{info.workflow_id}/{notice.key}"
        if key in self._sent:
            return True
        activity.logger.warning("%s: %s", notice.title, "; ".join(notice.lines))
        try:
            posted = await self._channel.post(
                notice.title, notice.lines, f"keeper watch {info.workflow_id}"
            )
        except WebhookFailed as err:
            raise ApplicationError(
                str(err), type="WebhookFailed", non_retryable=not err.retryable
            ) from None
        self._sent[key] = None
        while len(self._sent) > _REMEMBERED:
            self._sent.popitem(last=False)
        return posted
