"""keeper's one alert channel: every family's alerts go to one Slack-compatible webhook.

The URL is a secret and is read here, by the worker, from KEEPER_ALERT_WEBHOOK_URL or
`alerts.webhook_url_file`. Workflows hand over only what happened (domain/common/alerts.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

from keeper.runtime.secret_source import from_env_or_file
from keeper.runtime.settings import Settings
from keeper.runtime.webhook import Webhook, WebhookUrl

ALERT_WEBHOOK_ENV = "KEEPER_ALERT_WEBHOOK_URL"


class AlertWebhookUrl(WebhookUrl):
    what = "the alert webhook URL"
    env_var = ALERT_WEBHOOK_ENV


def alert_webhook_url(settings: Settings, env: Mapping[str, str] | None = None) -> WebhookUrl:
    """KEEPER_ALERT_WEBHOOK_URL, then alerts.webhook_url_file."""
    env = os.environ if env is None else env
    return from_env_or_file(
        AlertWebhookUrl, ALERT_WEBHOOK_ENV, settings.alerts.webhook_url_file, env
    )


class AlertChannel:
    """Posts one alert at a time. Alerts are rare, so each post opens its own HTTP client:
    nothing to close when a worker stops, and no pooled connection held for hours."""

    def __init__(self, url: WebhookUrl, timeout_s: float) -> None:
        self._url = url
        self._timeout_s = timeout_s

    @property
    def configured(self) -> bool:
        return self._url.present

    @property
    def setting(self) -> str:
        """Where the URL comes from, for a log line (never the URL)."""
        return self._url.setting

    async def post(self, title: str, lines: list[str], footer: str) -> bool:
        """True when posted, False when no webhook is configured; raises WebhookFailed."""
        if not self._url.present:
            return False
        async with httpx.AsyncClient(timeout=self._timeout_s) as http:
            return await Webhook(self._url, http).post(title, lines, footer)


def alert_channel(settings: Settings, env: Mapping[str, str] | None = None) -> AlertChannel:
    return AlertChannel(alert_webhook_url(settings, env), settings.alerts.timeout.total_seconds())
