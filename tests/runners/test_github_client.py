"""GitHubClient against the GitHub emulator over loopback HTTP, plus the pure decision table
and scope parsing it rests on."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr, ValidationError

from emulators.github import GitHubEmulator
from keeper.domain.runners.github import (
    DeregistrationAnswer,
    DeregistrationOutcome,
    GitHubRunner,
    GitHubScope,
    ScopeKind,
    classify_deregistration,
)
from keeper.runtime.runners.github_client import GitHubClient, GitHubError, load_github_token

TOKEN = "ghp_keeperTestSecret0123456789abcdef"
REPO = Path(__file__).resolve().parents[2]
Out = DeregistrationOutcome

REPO_SCOPE = GitHubScope.parse("repo:acme/api")
ALL_SCOPES = [
    GitHubScope.parse("repo:acme/api"),
    GitHubScope.parse("org:acme"),
    GitHubScope.parse("enterprise:acme-corp"),
]


@pytest.fixture(scope="module")
async def shared_github() -> AsyncIterator[GitHubEmulator]:
    emu = GitHubEmulator(token=TOKEN)
    await emu.start()
    try:
        yield emu
    finally:
        await emu.stop()


@pytest.fixture
async def github(shared_github: GitHubEmulator) -> AsyncIterator[GitHubEmulator]:
    shared_github.reset()
    yield shared_github
    shared_github.reset()


@pytest.fixture
async def client(github: GitHubEmulator) -> AsyncIterator[GitHubClient]:
    async with GitHubClient(github.url, SecretStr(TOKEN), timeout=5.0) as gh:
        yield gh


def closed_port() -> int:
    # Bind then close: nothing listens there afterwards, so connecting is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------ removal through the wire


async def test_idle_runner_is_removed_and_gone_afterwards(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "idle-1")
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.REMOVED
    assert answer.status_code == 204
    assert answer.done and not answer.busy
    assert github.state()["runners"] == {}
    assert [{k: v for k, v in r.items() if k != "at"} for r in github.requests] == [
        {
            "method": "DELETE",
            "path": f"/repos/acme/api/actions/runners/{runner_id}",
            "query": "",
            "status": 204,
        }
    ]


async def test_unknown_runner_is_already_gone(client: GitHubClient) -> None:
    answer = await client.remove_runner(REPO_SCOPE, 424242)
    assert answer.outcome is Out.ALREADY_GONE
    assert answer.status_code == 404
    assert answer.done


async def test_runner_auto_removed_by_github_is_already_gone(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "stale")
    github.set_gone(runner_id)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.ALREADY_GONE


async def test_runner_of_another_scope_is_not_found_here(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/web", "other-repo")
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.ALREADY_GONE
    assert github.runner(runner_id)["name"] == "other-repo"


async def test_busy_runner_answers_422_and_stays_until_idle(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "builder")
    github.set_busy(runner_id, True)
    for _ in range(3):
        answer = await client.remove_runner(REPO_SCOPE, runner_id)
        assert answer.outcome is Out.BUSY
        assert answer.status_code == 422
        assert answer.busy and not answer.done and not answer.retryable
        assert answer.message == '422: Bad request - Runner "builder" is still running a job"'
    assert github.runner(runner_id)["busy"] is True
    github.set_busy(runner_id, False)
    assert (await client.remove_runner(REPO_SCOPE, runner_id)).outcome is Out.REMOVED


async def test_scale_set_job_still_running_400_is_busy(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "scale-set-runner")
    github.inject(400, runner_id=runner_id)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.BUSY
    assert answer.status_code == 400
    assert "JobStillRunningException" in answer.message
    assert github.runner(runner_id)["name"] == "scale-set-runner"


async def test_other_400_is_a_client_error_not_retried(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(400, message="Problems parsing JSON")
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.CLIENT_ERROR
    assert answer.message == "400: Problems parsing JSON"
    assert not answer.retryable and not answer.done


async def test_wrong_token_is_auth(github: GitHubEmulator) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    async with GitHubClient(github.url, SecretStr("ghp_wrong")) as wrong:
        answer = await wrong.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.AUTH
    assert answer.status_code == 401
    assert answer.message == "401: Bad credentials"
    assert answer.retryable
    assert github.runner(runner_id)["name"] == "r"


async def test_injected_401_is_auth(github: GitHubEmulator, client: GitHubClient) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(401)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert (answer.outcome, answer.status_code) == (Out.AUTH, 401)


async def test_plain_403_is_auth(github: GitHubEmulator, client: GitHubClient) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(403)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.AUTH
    assert answer.status_code == 403
    assert answer.retry_after_s is None
    assert answer.message == "403: Resource not accessible by integration"


async def test_rate_limited_403_waits_until_reset(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(403, rate_limited=True, retry_after=120)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.RATE_LIMITED
    assert answer.status_code == 403
    assert answer.retryable
    # x-ratelimit-reset is whole epoch seconds, rounded up.
    assert answer.retry_after_s is not None
    assert 118.0 <= answer.retry_after_s <= 121.5


async def test_429_honours_retry_after(github: GitHubEmulator, client: GitHubClient) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(429, retry_after=7)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.RATE_LIMITED
    assert answer.status_code == 429
    assert answer.retry_after_s == 7.0


async def test_a_day_long_retry_after_is_capped_and_both_are_kept(
    github: GitHubEmulator,
) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(429, retry_after=100000)
    async with GitHubClient(github.url, SecretStr(TOKEN), max_retry_after=90) as gh:
        answer = await gh.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.RATE_LIMITED
    assert (answer.retry_after_s, answer.asked_retry_after_s) == (90.0, 100000.0)
    assert answer.retry_capped


def test_max_retry_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_retry_after"):
        GitHubClient("https://api.github.com", SecretStr(TOKEN), max_retry_after=0)


async def test_502_is_a_retryable_server_error_then_removal_succeeds(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(502, scope="repo:acme/api", runner_id=runner_id)
    answer = await client.remove_runner(REPO_SCOPE, runner_id)
    assert answer.outcome is Out.SERVER_ERROR
    assert answer.status_code == 502
    assert answer.retryable and not answer.done
    assert github.state()["faults"] == []
    assert (await client.remove_runner(REPO_SCOPE, runner_id)).outcome is Out.REMOVED


async def test_injected_422_is_busy(github: GitHubEmulator, client: GitHubClient) -> None:
    runner_id = github.add_runner("repo:acme/api", "named")
    github.inject(422, times=2)
    outcomes = [(await client.remove_runner(REPO_SCOPE, runner_id)).outcome for _ in range(3)]
    assert outcomes == [Out.BUSY, Out.BUSY, Out.REMOVED]


async def test_faults_are_used_first_in_first_out(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    github.inject(502)
    github.inject(429, retry_after=3)
    github.inject(401)
    outcomes = [(await client.remove_runner(REPO_SCOPE, runner_id)).outcome for _ in range(4)]
    assert outcomes == [Out.SERVER_ERROR, Out.RATE_LIMITED, Out.AUTH, Out.REMOVED]
    assert [entry["status"] for entry in github.requests] == [502, 429, 401, 204]


async def test_faults_only_hit_their_scope_and_runner(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    first = github.add_runner("repo:acme/api", "first")
    second = github.add_runner("repo:acme/api", "second")
    github.inject(502, runner_id=second)
    github.inject(502, scope="org:acme")
    assert (await client.remove_runner(REPO_SCOPE, first)).outcome is Out.REMOVED
    assert (await client.remove_runner(REPO_SCOPE, second)).outcome is Out.SERVER_ERROR
    assert [fault["scope"] for fault in github.state()["faults"]] == ["org:acme"]


async def test_delete_faults_do_not_touch_lists(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    github.add_runner("repo:acme/api", "r")
    github.inject(502)
    assert len(await client.list_runners(REPO_SCOPE)) == 1
    assert len(github.state()["faults"]) == 1


async def test_a_closed_port_is_a_retryable_transport_answer_without_the_token(
    github: GitHubEmulator,
) -> None:
    async with GitHubClient(f"http://127.0.0.1:{closed_port()}", SecretStr(TOKEN)) as gh:
        answer = await gh.remove_runner(REPO_SCOPE, 1000)
    assert answer.outcome is Out.TRANSPORT
    assert answer.status_code is None
    assert answer.message.startswith("ConnectError: ")
    assert answer.retryable
    assert TOKEN not in answer.model_dump_json()


async def test_timeout_is_a_transport_answer() -> None:
    release = asyncio.Event()

    # A listener that accepts the request and never answers it.
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await release.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with GitHubClient(f"http://127.0.0.1:{port}", SecretStr(TOKEN), timeout=0.2) as gh:
            started = time.monotonic()
            answer = await gh.remove_runner(REPO_SCOPE, 1000)
            elapsed = time.monotonic() - started
    finally:
        release.set()
        server.close()
        await server.wait_closed()
    assert answer.outcome is Out.TRANSPORT
    assert answer.status_code is None
    assert answer.message.startswith("ReadTimeout")
    assert elapsed < 3


# ------------------------------------------------------------------ scopes, lists, get


@pytest.mark.parametrize("scope", ALL_SCOPES, ids=str)
async def test_every_scope_lists_gets_and_removes(
    github: GitHubEmulator, client: GitHubClient, scope: GitHubScope
) -> None:
    kept = github.add_runner(str(scope), "kept", labels=["self-hosted", "Linux", "gpu"])
    removed = github.add_runner(str(scope), "removed", busy=True)
    github.add_runner("repo:elsewhere/x", "not-listed")
    github.set_status(kept, "offline")

    runners = await client.list_runners(scope)
    assert runners == [
        GitHubRunner(
            id=kept,
            name="kept",
            status="offline",
            busy=False,
            labels=["self-hosted", "Linux", "gpu"],
        ),
        GitHubRunner(
            id=removed,
            name="removed",
            status="online",
            busy=True,
            labels=["self-hosted", "Linux", "X64"],
        ),
    ]
    got = await client.get_runner(scope, kept)
    assert got is not None and got.name == "kept" and got.status == "offline"

    github.set_busy(removed, False)
    assert (await client.remove_runner(scope, removed)).outcome is Out.REMOVED
    assert await client.get_runner(scope, removed) is None
    assert [entry["path"] for entry in github.requests] == [
        scope.runners_path,
        f"{scope.runners_path}/{kept}",
        f"{scope.runners_path}/{removed}",
        f"{scope.runners_path}/{removed}",
    ]


async def test_list_follows_pagination_over_100_runners(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    ids = [github.add_runner("org:acme", f"r-{i:03d}") for i in range(250)]
    runners = await client.list_runners(GitHubScope.parse("org:acme"))
    assert [r.id for r in runners] == ids
    assert [r.name for r in runners][-1] == "r-249"
    assert [(e["method"], e["query"], e["status"]) for e in github.requests] == [
        ("GET", "per_page=100&page=1", 200),
        ("GET", "per_page=100&page=2", 200),
        ("GET", "per_page=100&page=3", 200),
    ]


async def test_the_emulator_pages_with_link_headers_and_a_total_count_as_github_does(
    github: GitHubEmulator,
) -> None:
    for i in range(5):
        github.add_runner("repo:acme/api", f"r{i}")
    async with httpx.AsyncClient(
        base_url=github.url, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as raw:
        response = await raw.get(
            "/repos/acme/api/actions/runners", params={"per_page": 2, "page": 2}
        )
    assert response.status_code == 200
    body = response.json()
    assert body["total_count"] == 5
    assert [r["name"] for r in body["runners"]] == ["r2", "r3"]
    assert body["runners"][0]["labels"][0] == {"id": 1, "name": "self-hosted", "type": "read-only"}
    links = {rel: link["url"] for rel, link in response.links.items()}
    assert set(links) == {"next", "last", "prev", "first"}
    assert links["next"].endswith("/repos/acme/api/actions/runners?per_page=2&page=3")
    assert links["last"].endswith("page=3")


async def test_empty_scope_lists_nothing(client: GitHubClient) -> None:
    assert await client.list_runners(GitHubScope.parse("enterprise:nobody")) == []


async def test_list_raises_github_error_on_injected_get_fault(
    github: GitHubEmulator, client: GitHubClient
) -> None:
    github.inject(502, method="GET")
    with pytest.raises(GitHubError) as info:
        await client.list_runners(REPO_SCOPE)
    assert info.value.status_code == 502
    assert info.value.message == "Server Error"
    assert str(info.value) == "502: Server Error"


async def test_get_runner_raises_on_auth_failure(github: GitHubEmulator) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    async with GitHubClient(github.url, SecretStr("ghp_wrong")) as wrong:
        with pytest.raises(GitHubError) as info:
            await wrong.get_runner(REPO_SCOPE, runner_id)
    assert info.value.status_code == 401
    assert info.value.message == "Bad credentials"


# ------------------------------------------------------------------ the token stays secret


async def test_token_never_appears_in_reprs_answers_or_errors(github: GitHubEmulator) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    # A server that echoes the request's credentials must not leak them through us either.
    github.inject(403, message=f"token {TOKEN} lacks admin:org", method="*", times=2)
    async with GitHubClient(github.url, SecretStr(TOKEN)) as gh:
        answer = await gh.remove_runner(REPO_SCOPE, runner_id)
        with pytest.raises(GitHubError) as info:
            await gh.list_runners(REPO_SCOPE)
        texts = [
            repr(gh),
            str(gh),
            repr(gh._http.auth),
            str(dict(gh._http.headers)),
            repr(answer),
            answer.model_dump_json(),
            str(info.value),
            repr(info.value),
            info.value.message,
        ]
    assert answer.message == "403: token *** lacks admin:org"
    for text in texts:
        assert TOKEN not in text, text


async def test_client_sends_github_headers() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    async with GitHubClient(
        "https://ghe.example.com/api/v3", SecretStr(TOKEN), transport=httpx.MockTransport(handler)
    ) as gh:
        answer = await gh.remove_runner(GitHubScope.parse("org:acme"), 7)
    assert answer.outcome is Out.REMOVED
    [request] = seen
    assert str(request.url) == "https://ghe.example.com/api/v3/orgs/acme/actions/runners/7"
    assert request.headers["Accept"] == "application/vnd.github+json"
    assert request.headers["X-GitHub-Api-Version"] == "2022-11-28"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"


async def test_next_link_to_another_host_is_not_followed() -> None:
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return httpx.Response(
            200,
            json={"total_count": 2, "runners": []},
            headers={"Link": '<https://evil.example/orgs/acme/actions/runners?page=2>; rel="next"'},
        )

    async with GitHubClient(
        "https://api.github.com", SecretStr(TOKEN), transport=httpx.MockTransport(handler)
    ) as gh:
        with pytest.raises(GitHubError, match=r"leaves api\.github\.com"):
            await gh.list_runners(GitHubScope.parse("org:acme"))
    assert hosts == ["api.github.com"]


def test_client_rejects_a_non_http_base_url() -> None:
    with pytest.raises(ValueError, match="base_url 'ftp://x'"):
        GitHubClient("ftp://x", SecretStr(TOKEN))


async def test_without_a_token_calls_go_out_anonymously_and_get_auth(
    github: GitHubEmulator,
) -> None:
    runner_id = github.add_runner("repo:acme/api", "r")
    async with GitHubClient(github.url, SecretStr("")) as anonymous:
        answer = await anonymous.remove_runner(REPO_SCOPE, runner_id)
    assert (answer.outcome, answer.message) == (Out.AUTH, "401: Bad credentials")


# ------------------------------------------------------------------ token loading


def test_token_env_wins_over_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    token = load_github_token({"KEEPER_GITHUB_TOKEN": " from-env "}, token_file)
    assert token is not None and token.get_secret_value() == "from-env"


def test_token_file_is_read_stripped(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  ghp_fromfile\n")
    token = load_github_token({"KEEPER_GITHUB_TOKEN": ""}, token_file)
    assert token is not None and token.get_secret_value() == "ghp_fromfile"
    assert "ghp_fromfile" not in repr(token)


def test_no_token_anywhere_is_none() -> None:
    assert load_github_token({}, None) is None


def test_missing_token_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "token"
    with pytest.raises(ValueError) as info:
        load_github_token({}, missing)
    assert str(missing) in str(info.value)
    assert "does not exist" in str(info.value)
    assert "KEEPER_GITHUB_TOKEN" in str(info.value)


def test_empty_token_file_names_the_path(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text(" \n")
    with pytest.raises(ValueError, match="is empty") as info:
        load_github_token({}, empty)
    assert str(empty) in str(info.value)


def test_unreadable_token_file_names_the_path(tmp_path: Path) -> None:
    # A directory cannot be read as a file, even by root.
    with pytest.raises(ValueError, match="cannot be read") as info:
        load_github_token({}, tmp_path)
    assert str(tmp_path) in str(info.value)


# ------------------------------------------------------------------ the decision table

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("status", "message", "headers", "outcome", "retry_after"),
    [
        (204, "", {}, Out.REMOVED, None),
        (404, "Not Found", {}, Out.ALREADY_GONE, None),
        (422, 'Bad request - Runner "r" is still running a job"', {}, Out.BUSY, None),
        (400, "JobStillRunningException: Runner r is still running a job.", {}, Out.BUSY, None),
        (400, "Problems parsing JSON", {}, Out.CLIENT_ERROR, None),
        (401, "Bad credentials", {}, Out.AUTH, None),
        (403, "Resource not accessible", {"X-RateLimit-Remaining": "4999"}, Out.AUTH, None),
        (
            403,
            "API rate limit exceeded",
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 90)},
            Out.RATE_LIMITED,
            90.0,
        ),
        (403, "secondary", {"Retry-After": "30"}, Out.RATE_LIMITED, 30.0),
        (403, "You have exceeded a secondary rate limit", {}, Out.RATE_LIMITED, 60.0),
        (429, "slow down", {"retry-after": "12"}, Out.RATE_LIMITED, 12.0),
        (429, "slow down", {}, Out.RATE_LIMITED, 60.0),
        (
            429,
            "slow down",
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 5)},
            Out.RATE_LIMITED,
            0.0,
        ),
        (500, "Server Error", {}, Out.SERVER_ERROR, None),
        (502, "Bad Gateway", {}, Out.SERVER_ERROR, None),
        (503, "Unavailable", {"retry-after": "5"}, Out.SERVER_ERROR, 5.0),
        (409, "Conflict", {}, Out.CLIENT_ERROR, None),
        (410, "Gone", {}, Out.CLIENT_ERROR, None),
    ],
)
def test_each_github_answer_reads_as_its_outcome_with_the_wait_it_asks_for(
    status: int,
    message: str,
    headers: dict[str, str],
    outcome: DeregistrationOutcome,
    retry_after: float | None,
) -> None:
    answer = classify_deregistration(status, message, headers, NOW)
    assert answer.outcome is outcome
    assert answer.status_code == status
    assert answer.retry_after_s == retry_after


def test_a_retry_after_date_waits_until_then_and_an_unreadable_one_a_minute() -> None:
    # NOW is Tue, 14 Nov 2023 22:13:20 GMT.
    later = classify_deregistration(429, "", {"retry-after": "Tue, 14 Nov 2023 22:14:20 GMT"}, NOW)
    assert later.retry_after_s == 60.0
    past = classify_deregistration(429, "", {"retry-after": "Tue, 14 Nov 2023 22:00:00 GMT"}, NOW)
    assert past.retry_after_s == 0.0
    garbage = classify_deregistration(429, "", {"retry-after": "soon"}, NOW)
    assert garbage.retry_after_s == 60.0


HOUR = 3600.0


@pytest.mark.parametrize(
    ("status", "headers", "cap", "retry_after", "asked", "capped"),
    [
        (429, {"retry-after": "100000"}, 600.0, 600.0, 100000.0, True),
        (429, {"retry-after": "30"}, 600.0, 30.0, 30.0, False),
        (429, {"retry-after": "600"}, 600.0, 600.0, 600.0, False),
        (429, {}, 600.0, 60.0, None, False),  # GitHub's advice, not the server's ask
        (429, {}, 30.0, 30.0, None, False),
        (
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW + 2 * HOUR))},
            600.0,
            600.0,
            2 * HOUR,
            True,
        ),
        (429, {"retry-after": "Thu, 16 Nov 2023 22:13:20 GMT"}, 600.0, 600.0, 48 * HOUR, True),
        (503, {"retry-after": "5000"}, 120.0, 120.0, 5000.0, True),
        (503, {}, 120.0, None, None, False),
        (404, {"retry-after": "100000"}, 600.0, None, None, False),
    ],
    ids=[
        "429-day",
        "429-short",
        "429-at-cap",
        "429-none",
        "429-none-low-cap",
        "403-reset-2h",
        "429-date-2d",
        "503-capped",
        "503-none",
        "404-ignores",
    ],
)
def test_retry_after_is_capped_and_the_ask_is_kept(
    status: int,
    headers: dict[str, str],
    cap: float,
    retry_after: float | None,
    asked: float | None,
    capped: bool,
) -> None:
    answer = classify_deregistration(status, "", headers, NOW, max_retry_after_s=cap)
    assert answer.retry_after_s == retry_after
    assert answer.asked_retry_after_s == asked
    assert answer.retry_capped is capped


def test_wait_text_shows_the_ask_the_next_try_and_the_cap() -> None:
    answer = classify_deregistration(429, "", {"retry-after": "100000"}, NOW)
    at = datetime.fromtimestamp(NOW, UTC) + timedelta(seconds=answer.retry_after_s or 0)
    assert (
        answer.wait_text(at) == "GitHub asked for 27.8h; next try at 2023-11-14T22:23:20Z (capped)"
    )
    short = classify_deregistration(429, "", {"retry-after": "90"}, NOW)
    assert short.wait_text(at) == "GitHub asked for 1.5m; next try at 2023-11-14T22:23:20Z"
    assert classify_deregistration(502, "", {}, NOW).wait_text(at) == (
        "next try at 2023-11-14T22:23:20Z"
    )


def test_classify_messages_are_short_and_human() -> None:
    assert classify_deregistration(204, "", {}, NOW).message == "204: runner removed"
    assert classify_deregistration(404, "", {}, NOW).message == "404: runner already gone"
    long = classify_deregistration(500, "x" * 1000, {}, NOW).message
    assert len(long) <= 210 and long.endswith("...")
    busy = classify_deregistration(422, "Runner is still running a job", {}, NOW)
    assert busy.message == "422: Runner is still running a job"


@pytest.mark.parametrize(
    ("outcome", "done", "busy", "retryable"),
    [
        (Out.REMOVED, True, False, False),
        (Out.ALREADY_GONE, True, False, False),
        (Out.BUSY, False, True, False),
        (Out.AUTH, False, False, True),
        (Out.RATE_LIMITED, False, False, True),
        (Out.SERVER_ERROR, False, False, True),
        (Out.TRANSPORT, False, False, True),
        (Out.CLIENT_ERROR, False, False, False),
    ],
)
def test_removed_and_gone_are_done_busy_is_busy_and_all_but_a_client_error_are_retried(
    outcome: DeregistrationOutcome, done: bool, busy: bool, retryable: bool
) -> None:
    answer = DeregistrationAnswer(outcome=outcome, status_code=None, message="m")
    assert (answer.done, answer.busy, answer.retryable) == (done, busy, retryable)


# ------------------------------------------------------------------ scopes


@pytest.mark.parametrize(
    ("text", "kind", "name", "path"),
    [
        ("repo:acme/api", ScopeKind.REPO, "acme/api", "/repos/acme/api/actions/runners"),
        ("repo:my_emu-user/web.site", ScopeKind.REPO, "my_emu-user/web.site", None),
        ("org:acme", ScopeKind.ORG, "acme", "/orgs/acme/actions/runners"),
        ("ORG:Acme-Labs", ScopeKind.ORG, "Acme-Labs", "/orgs/Acme-Labs/actions/runners"),
        (
            "enterprise:acme-corp",
            ScopeKind.ENTERPRISE,
            "acme-corp",
            "/enterprises/acme-corp/actions/runners",
        ),
    ],
)
def test_a_repo_org_or_enterprise_scope_parses_to_its_runners_path_and_prints_back_alike(
    text: str, kind: ScopeKind, name: str, path: str | None
) -> None:
    scope = GitHubScope.parse(text)
    assert (scope.kind, scope.name) == (kind, name)
    if path is not None:
        assert scope.runners_path == path
    assert str(scope) == f"{kind.value}:{name}"
    assert GitHubScope.parse(str(scope)) == scope


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("acme/api", "must look like"),
        ("", "must look like"),
        ("team:acme", "kind 'team' must be one of repo, org, enterprise"),
        ("repo:acme", "name: a repo scope needs exactly one '/'"),
        ("repo:acme/api/x", "name: a repo scope needs exactly one '/'"),
        ("repo:-acme/api", "name: repository owner '-acme'"),
        ("repo:acme/..", "name: repository name '..'"),
        ("repo:acme/a b", "name: repository name 'a b'"),
        ("org:", "name: organisation ''"),
        ("org:acme/api", "name: organisation 'acme/api'"),
        ("org:" + "a" * 40, "name: organisation"),
        ("org:acme_", "name: organisation 'acme_'"),
        ("enterprise:-x", "name: enterprise slug '-x'"),
    ],
)
def test_scope_parse_rejects_naming_the_field(text: str, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        GitHubScope.parse(text)
    assert expected in str(info.value)


def test_scope_model_validation_names_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        GitHubScope(kind=ScopeKind.REPO, name="no-slash")
    [error] = info.value.errors()
    assert error["loc"] == ("name",)


def test_scope_is_frozen() -> None:
    with pytest.raises(ValidationError):
        REPO_SCOPE.name = "other/repo"  # type: ignore[misc]


def test_runner_model_flattens_api_labels() -> None:
    runner = GitHubRunner.model_validate(
        {
            "id": 5,
            "name": "r",
            "os": "Linux",
            "status": "online",
            "busy": False,
            "labels": [{"id": 1, "name": "self-hosted", "type": "read-only"}],
        }
    )
    assert runner.labels == ["self-hosted"]


# ------------------------------------------------------------------ the control API


async def test_the_control_api_adds_patches_faults_and_resets_runners_without_a_github_call(
    github: GitHubEmulator,
) -> None:
    async with httpx.AsyncClient(base_url=f"{github.url}/_emulator") as ctl:
        added = await ctl.post(
            "/runners", json={"scope": "org:acme", "name": "c1", "labels": ["self-hosted"]}
        )
        assert added.status_code == 201
        runner_id = added.json()["id"]
        assert runner_id == 1000

        patched = await ctl.patch(f"/runners/{runner_id}", json={"busy": True, "status": "offline"})
        assert patched.json()["runner"]["busy"] is True
        assert patched.json()["runner"]["status"] == "offline"

        fault = await ctl.post("/faults", json={"status": 429, "retry_after": 2, "times": 2})
        assert fault.status_code == 201
        assert fault.json()["fault"]["times"] == 2

        state = (await ctl.get("/state")).json()
        assert state["runners"]["org:acme"][0]["name"] == "c1"
        assert state["faults"][0]["status"] == 429

        assert (await ctl.delete("/faults")).json() == {"faults": []}
        assert (await ctl.delete(f"/runners/{runner_id}")).status_code == 200
        assert (await ctl.delete(f"/runners/{runner_id}")).status_code == 404

        github.add_runner("repo:acme/api", "x")
        assert (await ctl.post("/reset")).json() == {"reset": True}
        assert (await ctl.get("/state")).json()["runners"] == {}
        assert (await ctl.get("/healthz")).json() == {"status": "ok"}
    # Control calls are not GitHub API calls.
    assert github.requests == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/runners", {"scope": "team:x", "name": "r"}, "team"),
        ("/runners", {"scope": "org:acme", "name": ""}, "name"),
        ("/runners", {"scope": "org:acme", "name": "r", "status": "idle"}, "status"),
        ("/faults", {"status": 200}, "status"),
        ("/faults", {"status": 502, "times": 0}, "times"),
        ("/faults", {"status": 502, "colour": "red"}, "colour"),
        ("/faults", {"status": 502, "scope": "repo:nope"}, "scope"),
    ],
)
async def test_control_api_names_bad_fields(
    github: GitHubEmulator, path: str, body: dict[str, object], field: str
) -> None:
    async with httpx.AsyncClient(base_url=f"{github.url}/_emulator") as ctl:
        response = await ctl.post(path, json=body)
    assert response.status_code == 400
    assert field in response.json()["error"]


async def test_control_api_unknown_runner_is_404(github: GitHubEmulator) -> None:
    async with httpx.AsyncClient(base_url=f"{github.url}/_emulator") as ctl:
        response = await ctl.patch("/runners/999999", json={"busy": True})
    assert response.status_code == 404
    assert "999999" in response.json()["error"]


async def test_unknown_api_path_is_a_github_404(github: GitHubEmulator) -> None:
    async with httpx.AsyncClient(base_url=github.url) as raw:
        response = await raw.get("/repos/acme/api/hooks")
    assert response.status_code == 404
    assert response.json()["message"] == "Not Found"


# ------------------------------------------------------------------ as its own process


async def test_emulator_runs_as_a_separate_process() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emulators.github",
        "--port",
        "0",
        "--token",
        TOKEN,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line.startswith("GitHub emulator serving on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient(base_url=url) as ctl:
            added = await ctl.post(
                "/_emulator/runners", json={"scope": "repo:acme/api", "name": "p1", "busy": True}
            )
            runner_id = added.json()["id"]
        async with GitHubClient(url, SecretStr(TOKEN)) as gh:
            assert (await gh.remove_runner(REPO_SCOPE, runner_id)).outcome is Out.BUSY
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)
    assert proc.returncode == 0
