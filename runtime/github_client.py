"""GitHub REST client for self-hosted runner registrations (list, get, remove).

Points at api.github.com, a GitHub Enterprise Server's /api/v3, or the local emulator
(emulators.github). The token lives only in the Authorization header of outgoing requests:
it is kept out of reprs, log lines, exception text and every model this module returns.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Generator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from pydantic import SecretStr, ValidationError

from domain.github import (
    MESSAGE_LIMIT,
    DeregistrationAnswer,
    DeregistrationOutcome,
    GitHubRunner,
    GitHubScope,
    classify_deregistration,
)

TOKEN_ENV = "KEEPER_GITHUB_TOKEN"
API_VERSION = "2022-11-28"
PER_PAGE = 100  # GitHub's maximum page size for runner lists
# 1000 pages of 100 runners is far past any real scope; the cap stops a Link loop.
MAX_PAGES = 1000
_REDACTED = "***"


class GitHubError(Exception):
    """A non-2xx answer (other than the ones a method documents as a result)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.message = message


class _BearerAuth(httpx.Auth):
    # An auth flow rather than a default header keeps the token out of client.headers, and
    # httpx drops it when a redirect leaves the origin.
    def __init__(self, token: SecretStr) -> None:
        self._token = SecretStr(token.get_secret_value().strip())

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        secret = self._token.get_secret_value()
        # Without a token the call goes out anonymously and GitHub's 401 says what to fix.
        if secret:
            request.headers["Authorization"] = f"Bearer {secret}"
        yield request

    def __repr__(self) -> str:
        return "_BearerAuth(token=***)"


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


class GitHubClient:
    def __init__(
        self,
        base_url: str,
        token: SecretStr,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url {base_url!r} must be an http(s) URL")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._base_url = str(url).rstrip("/")
        self._timeout = timeout
        self._token = SecretStr(token.get_secret_value().strip())
        self._http = httpx.AsyncClient(
            base_url=self._base_url,
            auth=_BearerAuth(self._token),
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": API_VERSION,
                "User-Agent": "keeper",
            },
            timeout=httpx.Timeout(timeout),
            # GitHub answers a renamed repository with a redirect to its new address.
            follow_redirects=True,
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"GitHubClient(base_url={self._base_url!r}, timeout={self._timeout})"

    __str__ = __repr__

    @property
    def base_url(self) -> str:
        return self._base_url

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> GitHubClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------- calls

    async def remove_runner(self, scope: GitHubScope, runner_id: int) -> DeregistrationAnswer:
        """DELETE the runner's registration. Never raises for an HTTP or transport failure:
        the answer says what happened and whether to retry."""
        try:
            response = await self._http.delete(scope.runner_path(runner_id))
        except httpx.HTTPError as exc:
            return DeregistrationAnswer(
                outcome=DeregistrationOutcome.TRANSPORT,
                status_code=None,
                message=self._scrub(f"{type(exc).__name__}: {exc}")[:MESSAGE_LIMIT],
            )
        message = "" if response.is_success else self._error_text(response)
        return classify_deregistration(
            response.status_code, message, response.headers, now_epoch=time.time()
        )

    async def list_runners(self, scope: GitHubScope) -> list[GitHubRunner]:
        """Every runner registered in the scope, following the Link header's pages.

        Raises GitHubError on a non-2xx answer; transport failures raise httpx.HTTPError.
        """
        runners: list[GitHubRunner] = []
        async for page in self._pages(scope.runners_path):
            runners.extend(self._runners_of(page))
        return runners

    async def get_runner(self, scope: GitHubScope, runner_id: int) -> GitHubRunner | None:
        """The runner, or None when the scope has no runner with that id (404)."""
        response = await self._http.get(scope.runner_path(runner_id))
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        try:
            return GitHubRunner.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise self._bad_body(response, exc) from None

    # ------------------------------------------------------------- helpers

    async def _pages(self, path: str) -> AsyncGenerator[httpx.Response, None]:
        response = await self._http.get(path, params={"per_page": PER_PAGE, "page": 1})
        base = _origin(httpx.URL(self._base_url))
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            self._raise_for_status(response)
            yield response
            next_url = response.links.get("next", {}).get("url")
            if not next_url:
                return
            target = response.url.join(next_url)
            # The Authorization header goes with every page, so only follow our own origin.
            if _origin(target) != base:
                raise GitHubError(response.status_code, f"next page {target} leaves {base[1]}")
            if str(target) in seen:
                raise GitHubError(response.status_code, f"pagination loops at {target}")
            seen.add(str(target))
            response = await self._http.get(target)
        raise GitHubError(response.status_code, f"more than {MAX_PAGES} pages of runners")

    def _runners_of(self, response: httpx.Response) -> list[GitHubRunner]:
        try:
            body = response.json()
            items: Any = body["runners"]
            return [GitHubRunner.model_validate(item) for item in items]
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise self._bad_body(response, exc) from None

    def _bad_body(self, response: httpx.Response, exc: Exception) -> GitHubError:
        detail = self._scrub(f"{type(exc).__name__}: {exc}")
        return GitHubError(response.status_code, f"unexpected response body ({detail[:150]})")

    def _raise_for_status(self, response: httpx.Response) -> None:
        if not response.is_success:
            raise GitHubError(response.status_code, self._error_text(response))

    def _error_text(self, response: httpx.Response) -> str:
        """The body's message; the scale-set API's typeKey is kept because it names the
        condition (JobStillRunningException) more reliably than the prose."""
        try:
            body = response.json()
        except ValueError:
            body = None
        parts: list[str] = []
        if isinstance(body, dict):
            type_key = body.get("typeKey")
            message = body.get("message")
            if isinstance(type_key, str) and type_key:
                parts.append(type_key)
            if isinstance(message, str) and message:
                parts.append(message)
        text = ": ".join(parts) if parts else response.text.strip()
        return self._scrub(text[: MESSAGE_LIMIT * 2] or response.reason_phrase)

    def _scrub(self, text: str) -> str:
        # Servers and proxies have been known to echo request headers in error pages.
        secret = self._token.get_secret_value()
        return text.replace(secret, _REDACTED) if secret else text


def load_github_token(env: Mapping[str, str], token_file: Path | None) -> SecretStr | None:
    """KEEPER_GITHUB_TOKEN when set and non-empty, else the token file's stripped content,
    else None. A token file that was named but cannot be used is an error, not None."""
    from_env = env.get(TOKEN_ENV, "").strip()
    if from_env:
        return SecretStr(from_env)
    if token_file is None:
        return None
    try:
        content = token_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ValueError(
            f"GitHub token file {token_file} does not exist; write the token to it "
            f"or set {TOKEN_ENV}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(
            f"GitHub token file {token_file} cannot be read ({reason}); make it a readable "
            f"UTF-8 file holding the token, or set {TOKEN_ENV}"
        ) from None
    if not content:
        raise ValueError(
            f"GitHub token file {token_file} is empty; write the token to it or set {TOKEN_ENV}"
        )
    return SecretStr(content)
