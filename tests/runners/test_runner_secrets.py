"""Secrets never leak: a token that cannot be sent is refused where it is loaded, naming the
source and the problem but none of its characters; any form of a secret that reaches an
error is cut out; and the runner store's password never reaches the CLI's output."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from keeper.cli.main import cli
from keeper.domain.common.secret_text import MIN_FRAGMENT, REDACTED, header_secret_problem, scrub
from keeper.domain.runners.github import DeregistrationOutcome, GitHubScope
from keeper.runtime.runners.github_client import (
    TOKEN_ENV,
    GitHubClient,
    GitHubError,
    load_github_token,
)
from keeper.runtime.settings import SettingsError, load_settings
from keeper.store import StoreUnavailable, open_store, redacted_url
from tests.postgres_server import PostgresServer

TOKEN = "ghp_Zq8Xw2Lm9Rt4Vb7Nc1Kd5Hs3Jf6Gy0Pa"
SCOPE = GitHubScope.parse("org:acme")
PASSWORD = "S3cret-Pw_4417"


def fragments(secret: str, length: int = 6) -> list[str]:
    """Every run of `length` characters of the secret: none may appear in a message."""
    return [secret[i : i + length] for i in range(len(secret) - length + 1)]


def assert_no_piece_of(secret: str, text: str) -> None:
    for piece in fragments(secret):
        assert piece not in text, f"{piece!r} of the secret is in {text!r}"


# ------------------------------------------------------------------ what a secret may hold


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("ghp_fine0123456789", None),
        ("", "is empty"),
        ("ghp_first\nghp_second", "has 2 lines"),
        ("a\r\nb\r\nc", "has 3 lines"),
        ("ghp_abc\rdef", "contains a control character (U+000D) at position 8"),
        ("ghp_abc\x00def", "contains a control character (U+0000) at position 8"),
        ("ghp_abc\x7fdef", "contains a control character (U+007F) at position 8"),
        ("ghp_abc\tdef", "contains a control character (U+0009) at position 8"),
        ("ghp_abcédef", "contains a non-ASCII character at position 8"),
        ("ghp_abc def", "contains a space at position 8"),
    ],
)
def test_a_secret_with_lines_controls_spaces_or_non_ascii_cannot_be_a_header_and_says_where(
    value: str, problem: str | None
) -> None:
    assert header_secret_problem(value) == problem


@pytest.mark.parametrize(
    "form",
    [
        TOKEN,
        repr(TOKEN + "\n")[1:-1],
        repr((TOKEN + "\x00").encode())[2:-1],
        json.dumps(TOKEN + '"')[1:-1],
        TOKEN[3 : 3 + MIN_FRAGMENT + 2],  # a fragment long enough to matter
    ],
    ids=["exact", "str-repr", "bytes-repr", "json", "fragment"],
)
def test_scrub_cuts_every_form(form: str) -> None:
    text = f"before {form} after"
    cleaned = scrub(text, [TOKEN + "\n", TOKEN + "\x00", TOKEN + '"', TOKEN])
    assert cleaned.startswith("before ") and cleaned.endswith(" after")
    assert REDACTED in cleaned
    assert_no_piece_of(TOKEN, cleaned.replace(REDACTED, " "))


def test_scrub_cuts_percent_encoded_forms_and_leaves_other_text() -> None:
    secret = "ghp_a/b+c=d?e&f0123"
    text = f"GET /?t={quote(secret, safe='')} and /?t={quote(secret, safe='').lower()} failed"
    assert scrub(text, [secret]) == f"GET /?t={REDACTED} and /?t={REDACTED} failed"
    assert scrub("nothing secret here", [secret]) == "nothing secret here"
    assert scrub("ghp_ is a common prefix", [secret]) == "ghp_ is a common prefix"


# ------------------------------------------------------------------ refused where loaded


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (f"{TOKEN}\nghp_OtherSecondLineToken99\n", "has 2 lines"),
        (f"{TOKEN[:12]}\r{TOKEN[12:]}\n", "contains a control character (U+000D) at position 13"),
        (f"{TOKEN[:12]}\x00{TOKEN[12:]}", "contains a control character (U+0000) at position 13"),
        (f"{TOKEN[:12]}\x7f{TOKEN[12:]}", "contains a control character (U+007F) at position 13"),
    ],
    ids=["two-lines", "cr", "nul", "del"],
)
def test_a_token_file_that_cannot_be_sent_is_refused_without_its_bytes(
    tmp_path: Path, content: str, problem: str
) -> None:
    token_file = tmp_path / "github-token"
    token_file.write_bytes(content.encode())
    with pytest.raises(ValueError) as info:
        load_github_token({}, token_file)
    message = str(info.value)
    assert f"GitHub token file {token_file} {problem}" in message
    assert TOKEN_ENV in message  # and what else to do
    assert_no_piece_of(TOKEN, message)
    assert_no_piece_of("ghp_OtherSecondLineToken99", message)


@pytest.mark.parametrize("bad", ["\r", "\x00", "\x7f", "\n"], ids=["cr", "nul", "del", "lf"])
def test_a_token_variable_that_cannot_be_sent_is_refused_without_its_bytes(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        load_github_token({TOKEN_ENV: TOKEN[:12] + bad + TOKEN[12:]}, None)
    message = str(info.value)
    assert message.startswith(f"{TOKEN_ENV} ")
    assert "position 13" in message or "has 2 lines" in message
    assert_no_piece_of(TOKEN, message)


def test_the_client_refuses_a_token_it_cannot_send() -> None:
    with pytest.raises(ValueError, match="control character") as info:
        GitHubClient("https://api.github.com", SecretStr(TOKEN[:12] + "\x00" + TOKEN[12:]))
    assert_no_piece_of(TOKEN, str(info.value))


def test_a_temporal_api_key_that_cannot_be_sent_is_refused_without_its_bytes(
    tmp_path: Path,
) -> None:
    key = "tmprl_ApiKeySecretValue0123456789"
    env = {
        "KEEPER_CONFIG": str(tmp_path / "absent.yaml"),
        "TEMPORAL_API_KEY": key[:10] + "\n" + key[10:],
    }
    with pytest.raises(SettingsError) as info:
        load_settings(None, env)
    assert "TEMPORAL_API_KEY has 2 lines" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert_no_piece_of(key, str(info.value))


# ------------------------------------------------------------------ scrubbed wherever it shows


def echoing_transport(kind: str) -> httpx.MockTransport:
    """A transport whose every failure quotes the Authorization header, as httpx and
    some proxies do, in one of the forms a secret takes in text."""

    def handler(request: httpx.Request) -> httpx.Response:
        header = request.headers["Authorization"]
        secret = header.removeprefix("Bearer ")
        forms = {
            "bytes-repr": f"Illegal header value {header.encode()!r}",
            "percent": f"proxy refused /auth?token={quote(secret, safe='')}",
            "fragment": f"token starting {secret[:14]} was revoked",
            "json": json.dumps({"authorization": header}),
        }
        if kind == "transport":
            raise httpx.LocalProtocolError(forms["bytes-repr"], request=request)
        return httpx.Response(400, json={"message": forms[kind]})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("kind", ["transport", "bytes-repr", "percent", "fragment", "json"])
async def test_no_form_of_the_token_reaches_an_answer_or_an_error(kind: str) -> None:
    async with GitHubClient(
        "https://api.github.com", SecretStr(TOKEN), transport=echoing_transport(kind)
    ) as gh:
        answer = await gh.remove_runner(SCOPE, 7)
        with pytest.raises(GitHubError) as listed:
            await gh.list_runners(SCOPE)
        with pytest.raises(GitHubError) as got:
            await gh.get_runner(SCOPE, 7)
    assert answer.outcome in (DeregistrationOutcome.TRANSPORT, DeregistrationOutcome.CLIENT_ERROR)
    for text in (
        answer.model_dump_json(),
        str(listed.value),
        repr(listed.value),
        str(got.value),
    ):
        assert REDACTED in text
        assert_no_piece_of(TOKEN, text)
    if kind == "transport":
        assert listed.value.status_code is None
        assert str(listed.value).startswith("LocalProtocolError: Illegal header value")


# ------------------------------------------------------------------ the store's password


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keeper(args: list[str], store_url: str, tmp_path: Path) -> tuple[int, str]:
    """`keeper --config FILE ARGS` with the store URL from the environment; stdout and
    stderr together."""
    config = tmp_path / "keeper.yaml"
    config.write_text("temporal: {address: '127.0.0.1:1'}\n")
    result = CliRunner().invoke(
        cli,
        ["--config", str(config), *args],
        env={"KEEPER_RUNNER_STORE_URL": store_url},
        catch_exceptions=False,
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://keeper:{PASSWORD}@127.0.0.1:{closed_port()}/keeper",
        f"postgresql://keeper:{PASSWORD}@127.0.0.1:notaport/keeper",
        f"mysql://keeper:{PASSWORD}@db.internal/keeper",
    ],
    ids=["unreachable", "bad-port", "unsupported"],
)
@pytest.mark.parametrize("command", [["runner", "list"], ["runner", "status", "r-1"]])
def test_a_store_that_cannot_be_opened_is_named_without_its_password(
    url: str, command: list[str], tmp_path: Path
) -> None:
    code, output = keeper(command, url, tmp_path)
    assert code == 1
    assert "keeper:***@" in output
    assert PASSWORD not in output
    assert "runners.store_url" in output  # what to check next


def test_open_store_errors_never_carry_the_password() -> None:
    url = f"postgresql://keeper:{PASSWORD}@127.0.0.1:{closed_port()}/keeper"
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    assert "postgresql://keeper:***@127.0.0.1" in str(info.value)
    assert PASSWORD not in str(info.value) and info.value.__cause__ is None
    assert redacted_url("postgresql://u:p@ss/w@rd@host/db") == "postgresql://u:***@host/db"


def test_an_open_store_is_named_without_its_password(
    pg_server: PostgresServer | None, tmp_path: Path
) -> None:
    if pg_server is None:
        pytest.skip("PostgreSQL server binaries not found")
    # The test server trusts loopback logins, so the password is carried but never checked.
    url = pg_server.create_database().replace("//keeper@", f"//keeper:{PASSWORD}@")
    code, output = keeper(["runner", "status", "r-1"], url, tmp_path)
    assert code == 1 and "no runner named 'r-1'" in output and "keeper:***@" in output
    assert PASSWORD not in output
    for command in (["runner", "list"], ["runner", "list", "--json"]):
        code, output = keeper(command, url, tmp_path)
        assert code == 0, output
        assert PASSWORD not in output
