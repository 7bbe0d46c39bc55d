"""GitHub runner scopes, runners, and what an answer to "remove this runner" means.

Pure and deterministic: Temporal workflows import this module, so nothing here does I/O or
reads the clock (callers pass `now_epoch`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator


class ScopeKind(StrEnum):
    REPO = "repo"
    ORG = "org"
    ENTERPRISE = "enterprise"


# Users and organisations: letters, digits and single hyphens, at most 39 characters, no
# hyphen at either end. Enterprise-managed user names add "_shortcode", so a repository
# owner may also contain underscores.
_ORG_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$")
_OWNER_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,98}[A-Za-z0-9])?$")
# Repository names: letters, digits, '.', '-' and '_', at most 100 characters.
_REPO_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_ENTERPRISE_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,58}[A-Za-z0-9])?$")

_SCOPE_FORMS = "'repo:OWNER/REPO', 'org:ORG' or 'enterprise:SLUG'"
# Per kind: its REST path prefix, and for an org or enterprise the rule its name follows.
_PATH_PREFIX = {ScopeKind.REPO: "repos", ScopeKind.ORG: "orgs", ScopeKind.ENTERPRISE: "enterprises"}
_NAME_RULES = {
    ScopeKind.ORG: (_ORG_RE, "organisation {!r} must be 1-39 letters, digits or single hyphens"),
    ScopeKind.ENTERPRISE: (
        _ENTERPRISE_RE,
        "enterprise slug {!r} must be 1-60 letters, digits or hyphens",
    ),
}


def _check_repo(name: str) -> str:
    if name.count("/") != 1:
        raise ValueError(f"a repo scope needs exactly one '/' as in 'owner/repo', got {name!r}")
    owner, repo = name.split("/")
    if not _OWNER_RE.match(owner):
        raise ValueError(
            f"repository owner {owner!r} must be 1-100 letters, digits, '-' or '_', "
            "starting and ending with a letter or digit"
        )
    if not _REPO_RE.match(repo) or repo in (".", ".."):
        raise ValueError(f"repository name {repo!r} must be 1-100 letters, digits, '.', '-' or '_'")
    return name


class GitHubScope(BaseModel):
    """Where runners are registered: one repository, an organisation or an enterprise."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ScopeKind
    # "owner/repo" for a repository, the organisation's login, or the enterprise slug.
    name: str

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if kind is ScopeKind.REPO:
            return _check_repo(value)
        if kind in _NAME_RULES and not _NAME_RULES[kind][0].match(value):
            rule = _NAME_RULES[kind][1].format(value)
            raise ValueError(f"{rule}, not starting or ending with a hyphen")
        return value

    @property
    def runners_path(self) -> str:
        return f"/{_PATH_PREFIX[self.kind]}/{self.name}/actions/runners"

    def runner_path(self, runner_id: int) -> str:
        return f"{self.runners_path}/{runner_id}"

    @classmethod
    def parse(cls, text: str) -> GitHubScope:
        """'repo:owner/repo', 'org:acme' or 'enterprise:slug' -> GitHubScope.

        Raises ValueError naming the part that is wrong.
        """
        kind_text, sep, name = text.strip().partition(":")
        if not sep:
            raise ValueError(f"scope {text!r} must look like {_SCOPE_FORMS}")
        try:
            kind = ScopeKind(kind_text.lower())
        except ValueError:
            raise ValueError(
                f"scope {text!r}: kind {kind_text!r} must be one of repo, org, enterprise"
            ) from None
        try:
            return cls(kind=kind, name=name)
        except ValidationError as exc:
            detail = "; ".join(_plain_error(err) for err in exc.errors())
            raise ValueError(f"scope {text!r}: {detail}") from None

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"


def _plain_error(err: Any) -> str:
    field = ".".join(str(part) for part in err["loc"]) or "scope"
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{field}: {message}"


class DeregistrationOutcome(StrEnum):
    REMOVED = "removed"
    ALREADY_GONE = "already_gone"
    # The runner is executing a job; removing it now would fail that job.
    BUSY = "busy"
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    CLIENT_ERROR = "client_error"
    TRANSPORT = "transport"


D = DeregistrationOutcome
_RETRYABLE = frozenset({D.AUTH, D.RATE_LIMITED, D.SERVER_ERROR, D.TRANSPORT})
# The outcome of a status code alone; 2xx, 5xx, and a 400 or 403 that says more, aside. The
# REST API's only 422 for this call is "still running a job": matching its wording instead
# would turn a rephrased message into a killed job. A 403 that is no rate limit is AUTH.
_BY_STATUS = {404: D.ALREADY_GONE, 422: D.BUSY, 401: D.AUTH, 403: D.AUTH, 429: D.RATE_LIMITED}


class DeregistrationAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    outcome: DeregistrationOutcome
    # None when no HTTP response arrived (TRANSPORT).
    status_code: int | None
    message: str
    # Seconds to wait before the next attempt: what the server asked for (or GitHub's
    # default for a rate limit that named no time), capped at the client's max_retry_after.
    retry_after_s: float | None = None
    # What the server itself asked for, before the cap; None when it named no time.
    asked_retry_after_s: float | None = None

    @property
    def done(self) -> bool:
        return self.outcome in (DeregistrationOutcome.REMOVED, DeregistrationOutcome.ALREADY_GONE)

    @property
    def busy(self) -> bool:
        return self.outcome is DeregistrationOutcome.BUSY

    @property
    def retryable(self) -> bool:
        # Credentials get rotated and fixed while the workflow waits, so AUTH is retried;
        # a CLIENT_ERROR is a request GitHub will reject the same way every time.
        return self.outcome in _RETRYABLE

    @property
    def retry_capped(self) -> bool:
        """The server asked for a longer wait than keeper allows."""
        return (
            self.asked_retry_after_s is not None
            and self.retry_after_s is not None
            and self.asked_retry_after_s > self.retry_after_s
        )

    def wait_text(self, next_try_at: datetime) -> str:
        """For the details: "GitHub asked for 27.8h; next try at 2026-12-01T10:00:00Z (capped)"."""
        at = next_try_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.asked_retry_after_s is None:
            return f"next try at {at}"
        text = f"GitHub asked for {_human_seconds(self.asked_retry_after_s)}; next try at {at}"
        return text + (" (capped)" if self.retry_capped else "")


MESSAGE_LIMIT = 200
# GitHub's advice when a rate-limited answer carries neither retry-after nor a reset time.
DEFAULT_RATE_LIMIT_WAIT_S = 60.0
# The longest wait a server may impose before the next attempt (runners.github.
# max_retry_after): a proxy's `retry-after: 100000` must not park a deletion for a day.
DEFAULT_MAX_RETRY_AFTER_S = 600.0


def _human_seconds(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.1f}m"
    return f"{seconds:g}s"


def _retry_after(headers: dict[str, str], now_epoch: float) -> float | None:
    """Seconds to wait from `retry-after` (seconds or HTTP date) or `x-ratelimit-reset`."""
    raw = headers.get("retry-after", "").strip()
    if raw:
        try:
            seconds = float(raw)
        except ValueError:
            try:
                seconds = parsedate_to_datetime(raw).timestamp() - now_epoch
            except (TypeError, ValueError):
                seconds = math.nan
        if math.isfinite(seconds):
            return max(0.0, seconds)
    if headers.get("x-ratelimit-remaining", "").strip() == "0":
        try:
            reset = float(headers.get("x-ratelimit-reset", ""))
        except ValueError:
            return None
        if math.isfinite(reset):
            return max(0.0, reset - now_epoch)
    return None


def _is_rate_limited_403(headers: dict[str, str], message: str) -> bool:
    # Primary limits zero x-ratelimit-remaining; secondary limits send retry-after or only
    # say so in the message.
    return (
        headers.get("x-ratelimit-remaining", "").strip() == "0"
        or "retry-after" in headers
        or "rate limit" in message.lower()
    )


def _short(status_code: int, message: str) -> str:
    text = " ".join(message.split()) or "no message"
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 3] + "..."
    return f"{status_code}: {text}"


def classify_deregistration(
    status_code: int,
    message: str,
    headers: Mapping[str, str],
    now_epoch: float,
    *,
    max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
) -> DeregistrationAnswer:
    """What a response to DELETE .../actions/runners/{id} means for the caller.

    `message` is the error body's message (the scale-set API's typeKey may be included);
    header names are matched case-insensitively. The wait the server asks for is kept in
    `asked_retry_after_s`; `retry_after_s` is at most `max_retry_after_s`.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    outcome = _BY_STATUS.get(status_code, DeregistrationOutcome.CLIENT_ERROR)
    if 200 <= status_code < 300:
        outcome = DeregistrationOutcome.REMOVED
    elif status_code == 400 and "jobstillrunning" in message.lower():
        outcome = DeregistrationOutcome.BUSY
    elif status_code == 403 and _is_rate_limited_403(lowered, message):
        outcome = DeregistrationOutcome.RATE_LIMITED
    elif 500 <= status_code < 600:
        outcome = DeregistrationOutcome.SERVER_ERROR

    asked: float | None = None
    retry_after_s: float | None = None
    if outcome in (DeregistrationOutcome.RATE_LIMITED, DeregistrationOutcome.SERVER_ERROR):
        asked = _retry_after(lowered, now_epoch)
        retry_after_s = asked
        if retry_after_s is None and outcome is DeregistrationOutcome.RATE_LIMITED:
            retry_after_s = DEFAULT_RATE_LIMIT_WAIT_S
        if retry_after_s is not None:
            retry_after_s = min(retry_after_s, max_retry_after_s)

    if outcome is DeregistrationOutcome.REMOVED:
        text = f"{status_code}: runner removed"
    elif outcome is DeregistrationOutcome.ALREADY_GONE and not message:
        text = f"{status_code}: runner already gone"
    else:
        text = _short(status_code, message)
    return DeregistrationAnswer(
        outcome=outcome,
        status_code=status_code,
        message=text,
        retry_after_s=retry_after_s,
        asked_retry_after_s=asked,
    )


class GitHubRunner(BaseModel):
    """A self-hosted runner as the REST API lists it; labels flattened to their names."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    # "online" or "offline"
    status: str
    busy: bool
    labels: list[str] = []

    @field_validator("labels", mode="before")
    @classmethod
    def _label_names(cls, value: Any) -> Any:
        # The API gives [{"id": 1, "name": "self-hosted", "type": "read-only"}, ...].
        if isinstance(value, list):
            return [item.get("name") if isinstance(item, dict) else item for item in value]
        return value
