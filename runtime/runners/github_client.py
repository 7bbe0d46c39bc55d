"""GitHub REST client for self-hosted runner registrations (list, get, remove).

Points at api.github.com, a GitHub Enterprise Server's /api/v3, or the local emulator
(emulators.github). The token lives only in the Authorization header of outgoing requests:
it is kept out of reprs, log lines, exception text and every model this module returns.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Generator, Mapping
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr, ValidationError

from keeper.domain.common.secret_text import header_secret_problem, scrub
from keeper.domain.runners.github import (
    DEFAULT_MAX_RETRY_AFTER_S,
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


class GitHubError(Exception):
    """A non-2xx answer (other than the ones a method documents as a result), or no
    answer at all (status_code None: the request never completed)."""

    def __init__(self, status_code: int | None, message: str) -> None:
        super().__init__(message if status_code is None else f"{status_code}: {message}")
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
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url {base_url!r} must be an http(s) URL")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if max_retry_after <= 0:
            raise ValueError(f"max_retry_after must be positive, got {max_retry_after}")
        self._base_url = str(url).rstrip("/")
        self._timeout = timeout
        self._max_retry_after = max_retry_after
        self._token = SecretStr(token.get_secret_value().strip())
        secret = self._token.get_secret_value()
        problem = header_secret_problem(secret) if secret else None
        if problem:
            raise ValueError(
                f"the GitHub token {problem}; pass the token alone (one line, no spaces or "
                "control characters)"
            )
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

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> GitHubClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
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
                message=self._transport_text(exc)[:MESSAGE_LIMIT],
            )
        message = "" if response.is_success else self._error_text(response)
        return classify_deregistration(
            response.status_code,
            message,
            response.headers,
            now_epoch=time.time(),
            max_retry_after_s=self._max_retry_after,
        )

    async def list_runners(self, scope: GitHubScope) -> list[GitHubRunner]:
        """Every runner registered in the scope, following the Link header's pages.

        Raises GitHubError on a non-2xx answer or a transport failure (status_code None).
        """
        runners: list[GitHubRunner] = []
        async for page in self._pages(scope.runners_path):
            runners.extend(self._runners_of(page))
        return runners

    async def get_runner(self, scope: GitHubScope, runner_id: int) -> GitHubRunner | None:
        """The runner, or None when the scope has no runner with that id (404)."""
        response = await self._get(scope.runner_path(runner_id))
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        try:
            return GitHubRunner.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise self._bad_body(response, exc) from None

    # ------------------------------------------------------------- helpers

    async def _get(self, url: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        try:
            return await self._http.get(url, **kwargs)
        except httpx.HTTPError as exc:
            # httpx puts the request's header values in some of its errors.
            raise GitHubError(None, self._transport_text(exc)) from None

    async def _pages(self, path: str) -> AsyncGenerator[httpx.Response, None]:
        response = await self._get(path, params={"per_page": PER_PAGE, "page": 1})
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
                raise GitHubError(
                    response.status_code, self._scrub(f"next page {target} leaves {base[1]}")
                )
            if str(target) in seen:
                raise GitHubError(
                    response.status_code, self._scrub(f"pagination loops at {target}")
                )
            seen.add(str(target))
            response = await self._get(target)
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

    def _transport_text(self, exc: httpx.HTTPError) -> str:
        return self._scrub(f"{type(exc).__name__}: {exc}")

    def _scrub(self, text: str) -> str:
        # Servers and proxies have been known to echo request headers in error pages, and
        # httpx quotes a header value it refuses; either may be escaped or cut short.
        return scrub(text, [self._token.get_secret_value()])


def load_github_token(env: Mapping[str, str], token_file: Path | None) -> SecretStr | None:
    """KEEPER_GITHUB_TOKEN when set and non-empty, else the token file's stripped content,
    else None. A token file that was named but cannot be used is an error, not None, and
    so is a token that cannot go into an Authorization header (two lines, a control
    character): the error names the source and the problem, never the token."""
    from_env = env.get(TOKEN_ENV, "").strip()
    if from_env:
        problem = header_secret_problem(from_env)
        if problem:
            raise ValueError(
                f"{TOKEN_ENV} {problem}; set it to the token alone (one line, no spaces or "
                "control characters)"
            )
        return SecretStr(from_env)
    if token_file is None:
        return None
    try:
        # Bytes, so a stray CR is reported as what it is rather than read as a line break.
        content = token_file.read_bytes().decode("utf-8").strip()
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
    problem = header_secret_problem(content)
    if problem:
        raise ValueError(
            f"GitHub token file {token_file} {problem}; write the token alone on one line "
            f"(no spaces or control characters), or set {TOKEN_ENV}"
        )
    return SecretStr(content)
