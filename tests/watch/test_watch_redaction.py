"""keeper's copy of iris's redaction rules (domain/watch/redaction.py), table by table.

Every row was observed on a real controller (marin-iris 0.2.227.dev40316220070, a local
cluster): a LaunchJob carrying the value, then GetJobStatus's `request` showing what iris made
of it. The `-e KEY VALUE` rows came through iris's own CLI (`iris job run`), which hides them
in `submit_argv` before it sends the request: the controller keeps argv and submit_argv as
received.
"""

from __future__ import annotations

import pytest

from keeper.domain.watch.redaction import (
    REDACTED,
    is_sensitive_name,
    name_words,
    redact_env,
    redact_text,
    redact_value,
    redaction_marks,
)
from keeper.wire.iris.messages import LaunchJobRequest

KEY = "q8Zx3Lm9Pw2Rt7Yk4Nv6Bc1Df5Gh0Js8"  # 32 characters, high entropy
SK = "sk-abcdefghijklmnopqrstuvwxyz012345"
SHA = "3f2a9b1c4d5e6f708192a3b4c5d6e7f8091a2b3c"

# (name, whether iris hid the value "x" under it)
NAMES = [
    ("HF_TOKEN", True),
    ("WANDB_API_KEY", True),
    ("TOKENIZERS_PARALLELISM", False),
    ("max_tokens", False),
    ("session_token_count", True),
    ("wandbApiKey", True),
    ("wandb-api-key", True),
    ("HFToken", True),
    ("APIKey", True),
    ("AUTHOR", False),
    ("CACHE_KEY", False),
    ("sort_key", False),
    ("AWS_ACCESS_KEY_ID", True),
    ("AWS_SECRET_ACCESS_KEY", True),
    ("PRIVATE_KEY_PATH", True),
    ("DB_PASSWORD", True),
    ("PGPASSWORD", False),
    ("MY_PASSWD", True),
    ("BEARER", True),
    ("authToken", True),
    ("NUM_TOKENS", False),
    ("TOKEN_BUDGET", False),
    ("MAX_TOKENS_PER_BATCH", False),
    ("tokens", True),
    ("TOKEN", True),
    ("GITHUB_PAT", False),
    ("OPENAI_APIKEY", True),
    ("SESSION_ID", True),
    ("auth_id", True),
    ("CREDENTIALS_FILE", True),
    ("passphrase", True),
    ("X_PWD", True),
    ("TOKENIZER_PATH", False),
    ("HTTPSessionName", True),
    ("api", False),
    ("key_name", False),
    ("ACCESSKEY", False),
    ("access_token_limit", False),
    ("secretName", True),
]


@pytest.mark.parametrize(("name", "sensitive"), NAMES)
def test_a_name_is_secret_bearing_exactly_when_iris_hid_its_value(
    name: str, sensitive: bool
) -> None:
    assert is_sensitive_name(name) is sensitive
    assert redact_env({name: "x"}) == {name: REDACTED if sensitive else "x"}


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("WANDB_API_KEY", ["wandb", "api", "key"]),
        ("wandbApiKey", ["wandb", "api", "key"]),
        ("wandb-api-key", ["wandb", "api", "key"]),
        ("TOKENIZERS_PARALLELISM", ["tokenizers", "parallelism"]),
        ("HTTPSessionName", ["http", "session", "name"]),
        ("APIKey", ["api", "key"]),
        ("v2Token", ["v", "2", "token"]),
    ],
)
def test_a_name_splits_on_separators_and_humps_keeping_a_capital_run_whole(
    name: str, words: list[str]
) -> None:
    assert name_words(name) == words


# (name, value sent, value GetJobStatus returned)
VALUES = [
    # The first look: a token, an API key, two counting names and a key under a plain name.
    ("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123", REDACTED),
    ("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567", REDACTED),
    ("TOKENIZERS_PARALLELISM", "false", "false"),
    ("max_tokens", "4096", "4096"),
    ("OPENAI_BASE", SK, REDACTED),
    ("PLAIN", "hello world", "hello world"),
    # An identifier's name keeps a key-like value; any other name does not.
    ("RUN_ID", KEY, KEY),
    ("RUN_CONFIG", KEY, REDACTED),
    ("ZONE", KEY, KEY),
    ("TASK_IDS", KEY, KEY),
    ("HOSTNAMES", KEY, REDACTED),
    ("URL", f"https://host/x?token={KEY}", f"https://host/x?token={KEY}"),
    ("GIT_SHA", SHA, SHA),
    ("COMMIT_HASH", SHA, REDACTED),
    # ...but not a prefixed key.
    ("JOB_NAME", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", REDACTED),
    # Key-like text: a run of 32+ inside text, or a whole value from 24 characters.
    ("NOTE", f"use {KEY}Qa9 please", f"use {REDACTED} please"),
    ("SHORT_MIXED", KEY[:23], KEY[:23]),
    ("LEN24", KEY[:24], REDACTED),
    ("LOW_ENTROPY", "a" * 40, "a" * 40),
    ("PADDED", KEY + "==", REDACTED),
    ("TOO_PADDED", KEY + "===", KEY + "==="),
    ("PATH", "/usr/local/bin:/usr/bin", "/usr/local/bin:/usr/bin"),
    # Prefixed keys, tokens and blocks.
    ("SLACK_HOOK", "xoxb-1234567890-abcdef", REDACTED),
    ("ID_JWT_BLOB", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc123", REDACTED),
    (
        "PEM_BLOB",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----",
        REDACTED,
    ),
    ("AWS_KEY_HOLDER", "AKIAABCDEFGHIJKLMNOP", REDACTED),
    ("ASIA_HOLDER", "prefix ASIAABCDEFGHIJKLMNOP suffix", f"prefix {REDACTED} suffix"),
    ("AKIA_LONG", "AKIAABCDEFGHIJKLMNOPQ", "AKIAABCDEFGHIJKLMNOPQ"),
]


@pytest.mark.parametrize(("name", "sent", "shown"), VALUES)
def test_an_env_value_is_shown_as_iris_showed_it(name: str, sent: str, shown: str) -> None:
    assert redact_env({name: sent}) == {name: shown}


def test_a_whole_environment_is_redacted_as_each_value_alone() -> None:
    env = {name: sent for name, sent, _ in VALUES}
    assert redact_env(env) == {name: shown for name, _, shown in VALUES}


def test_redact_value_walks_nested_json_by_key() -> None:
    tree = {"env": {"HF_TOKEN": "x", "RUN_ID": KEY}, "args": [SK, "ok"], "n": 3}
    assert redact_value(tree) == {
        "env": {"HF_TOKEN": REDACTED, "RUN_ID": KEY},
        "args": [REDACTED, "ok"],
        "n": 3,
    }


def test_free_text_hides_prefixed_and_key_like_runs_only() -> None:
    # argv is free text: an identifier's value is no exception there.
    assert redact_text(KEY) == REDACTED
    assert redact_text(f"--api-key {SK}") == f"--api-key {REDACTED}"
    assert redact_text(KEY[:24]) == KEY[:24]  # whole-value keys start at 24 only in values
    assert redact_text("hello world") == "hello world"


# `iris job run ... -- python -c ...` as the controller received it from iris's CLI.
def _request(**fields: object) -> LaunchJobRequest:
    return LaunchJobRequest.model_validate({"name": "/alice/job", **fields})


def test_marks_name_every_field_that_holds_redacted_sorted() -> None:
    # What GetJobStatus returned for a job launched through iris's CLI with -e HF_TOKEN x,
    # a secret, and a key in its argv (argv is kept as sent).
    shown = _request(
        environment={
            "envVars": {"HF_TOKEN": REDACTED, "max_tokens": "4096", "PLAIN": REDACTED},
            "secrets": {"DB_PASSWORD": REDACTED},
        },
        entrypoint={"runCommand": {"argv": ["python", "train.py", "--api-key", SK]}},
        submitArgv=["iris", "job", "run", "-e", "HF_TOKEN", REDACTED],
        someNewerField={"deep": [f"a {REDACTED} b"]},
    )
    assert redaction_marks(shown) == [
        "environment.env_vars.HF_TOKEN",
        "environment.env_vars.PLAIN",
        "environment.secrets.DB_PASSWORD",
        "someNewerField.deep[0]",
        "submit_argv[5]",
    ]


def test_a_request_with_nothing_hidden_has_no_marks() -> None:
    assert redaction_marks(_request(environment={"envVars": {"A": "1"}}, replicas=1)) == []
    argv = _request(entrypoint={"runCommand": {"argv": ["echo", REDACTED]}})
    assert redaction_marks(argv) == ["entrypoint.run_command.argv[1]"]
