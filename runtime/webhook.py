"""A Slack-compatible incoming webhook: where keeper tells operators what needs them.

The URL is a secret (it authorises posting): it comes from an environment variable or a file
at send time (runtime/secret_source.py), never from a workflow, and no error names it.
"""

from __future__ import annotations

import httpx

from keeper.runtime.secret_source import SecretSource


class WebhookUrl(SecretSource):
    what = "the webhook URL"


class WebhookFailed(Exception):
    """The webhook did not take the message; the text never holds the URL."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def _escaped(text: str) -> str:
    """Slack's three control characters: text from a watched system (a log line, a job name)
    must not become a mention (`<!channel>`) or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_message(title: str, lines: list[str], footer: str) -> dict[str, object]:
    """Slack's incoming-webhook JSON (`text`, and the same in a section block); Mattermost,
    Rocket.Chat and most chat bridges read `text` alone."""
    body = "\n".join(f"• {_escaped(line)}" for line in lines)
    text = f"*{_escaped(title)}*\n{body}\n_{_escaped(footer)}_".replace("\n\n", "\n")
    return {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}}],
    }


class Webhook:
    def __init__(self, url: WebhookUrl, http: httpx.AsyncClient) -> None:
        self._url = url
        self._http = http

    @property
    def configured(self) -> bool:
        return self._url.present

    async def post(self, title: str, lines: list[str], footer: str) -> bool:
        """Sends one message; False when no webhook is configured."""
        url = self._url.current()
        if url is None:
            return False
        try:
            answer = await self._http.post(url, json=slack_message(title, lines, footer))
        except httpx.HTTPError as err:
            # The exception text can carry the URL; only its kind is kept.
            raise WebhookFailed(
                f"the webhook did not answer ({type(err).__name__})", retryable=True
            ) from None
        if answer.status_code >= 300:
            code = answer.status_code
            raise WebhookFailed(
                f"the webhook answered HTTP {code}",
                retryable=code == 429 or code >= 500,
            )
        return True
