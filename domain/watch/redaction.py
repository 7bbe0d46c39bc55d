"""Which values iris hides as `[REDACTED]`, by the rules the controller applies.

GetJobStatus returns a job's launch request rebuilt from iris's database, and before it
answers it hides every value that looks like a credential (marin-iris
0.2.227.dev40316220070). keeper reads that request, and holds requests of its own, so it
needs the same rules: which names are secret-bearing, which values look like secrets, and
where a request already holds `[REDACTED]`.

A name (an environment variable, a JSON key) is secret-bearing when one of its words is:

| words of the name                                            | secret-bearing           |
|--------------------------------------------------------------|--------------------------|
| apikey, auth, authentication, authorization, bearer,         | yes                      |
| credential(s), passphrase, passwd, password(s), pwd,         |                          |
| secret(s), session(s), token(s)                              |                          |
| token(s) with a counting word (max, num, count, len, ...)    | no: a length, not a key  |
| and nothing else secret-bearing                              | (`max_tokens`)           |
| the adjacent pairs api key, access key, private key          | yes                      |

A name's words split on anything that is not a letter or a digit and on camelCase humps; a
run of capitals stays one word (`TOKENIZERS` is not `TOKEN`, `HTTPSession` is `HTTP` and
`Session`). Whole words only: `PGPASSWORD`, `ACCESSKEY` and `AUTHOR` are not secret-bearing.

A value is hidden, whole or in part, when it

| holds                                                        | hidden                   |
|--------------------------------------------------------------|--------------------------|
| a PEM private key block                                      | the block                |
| `sk-`, `AKIA`, `ASIA`, `gh[pousr]_`, `xox?-` keys, a JWT     | the key                  |
| a key-like run: 32+ of `A-Za-z0-9+/_-` (+ up to two `=`),    | the run                  |
| entropy >= 3.5 bits a character                              |                          |
| is wholly key-like from 24 characters (env values, not text) | the value                |

Values under an identifier's name (`*_id`, `*_name`, `path`, `url`, `zone`, `git_sha`, ...)
skip the key-like rules, so a job id or a commit hash stays; the prefixed keys are still
hidden. A secret-bearing name hides its value whatever it is, identifier or not.

`environment.secrets` values are always hidden. iris keeps a job's argv as it was sent; its
CLI hides the values of `-e KEY VALUE` in `submit_argv` before it sends them.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

REDACTED = "[REDACTED]"

# ---------------------------------------------------------------------------------- names

_SECRET_WORDS = frozenset(
    {
        "apikey", "auth", "authentication", "authorization", "bearer", "credential",
        "credentials", "passphrase", "passwd", "password", "passwords", "pwd", "secret",
        "secrets", "session", "sessions", "token", "tokens",
    }
)  # fmt: skip
_TOKEN_WORDS = frozenset({"token", "tokens"})
_COUNTING_WORDS = frozenset(
    {
        "avg", "budget", "count", "len", "length", "limit", "max", "mean", "min", "num", "per",
        "size", "sum", "total", "window",
    }
)  # fmt: skip
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key")})

# A word: a run of capitals not followed by a lowercase letter (which would start the next
# word), a lowercase run with at most one capital before it, or a run of digits.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def name_words(name: str) -> list[str]:
    """`WANDB_API_KEY`, `wandbApiKey`, `wandb-api-key` -> `["wandb", "api", "key"]`."""
    return [word.lower() for word in _WORD.findall(name)]


def is_sensitive_name(name: str) -> bool:
    """Whether iris hides the value under `name` whatever it is (`HF_TOKEN`: yes;
    `TOKENIZERS_PARALLELISM`, `max_tokens`: no)."""
    words = name_words(name)
    found = {word for word in words if word in _SECRET_WORDS}
    counting = any(word in _COUNTING_WORDS for word in words)
    if found and not (found <= _TOKEN_WORDS and counting):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


# Names whose values are identifiers, labels or places: the key-like rules skip them.
_IDENTIFIER_NAME = re.compile(
    r".*_(?:id|name|index|idx|no|num)s?$"
    r"|^(?:name|namespace|hostname|username|address|ip_address|zone|region|status|state|phase"
    r"|stage|shard|kind|mode|reason|url|uri|path|file|filename|filepath|scale_group|image_tag"
    r"|git_hash|git_sha|commit|commit_sha|target|peer|user_agent)$",
    re.IGNORECASE,
)


def is_safe_name(name: str) -> bool:
    """Whether `name` holds an identifier (`RUN_ID`, `PATH`, `zone`), whose value only the
    prefixed-key rule may hide. A secret-bearing name (`auth_id`) is hidden all the same."""
    return _IDENTIFIER_NAME.match(name) is not None


# ---------------------------------------------------------------------------------- values

_KEY_CHAR = "A-Za-z0-9+/_-"
_MIN_ENTROPY = 3.5
_WHOLE_KEY = re.compile(rf"[{_KEY_CHAR}]+={{0,2}}")
_KEY_RUN = re.compile(
    rf"(?<![{_KEY_CHAR}])[{_KEY_CHAR}]{{32,}}={{0,2}}(?![={_KEY_CHAR}])",
)
_PREFIXED = re.compile(
    r"-----BEGIN [A-Z ]+PRIVATE KEY-----[\s\S]+?-----END [A-Z ]+PRIVATE KEY-----"
    r"|(?<![A-Za-z0-9_-])"
    r"(?:sk-[A-Za-z0-9_-]{20,}"
    r"|A[KS]IA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{36,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)"
    r"(?![A-Za-z0-9_-])"
)


def entropy(text: str) -> float:
    """Shannon entropy of `text`, in bits a character."""
    if not text:
        return 0.0
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values())


def looks_like_key(value: str, min_length: int = 24) -> bool:
    """A whole value that is one key-like token of `min_length`+ characters."""
    return (
        len(value) >= min_length
        and _WHOLE_KEY.fullmatch(value) is not None
        and entropy(value) >= _MIN_ENTROPY
    )


def _hide_key_run(match: re.Match[str]) -> str:
    run = match.group(0)
    return REDACTED if entropy(run) >= _MIN_ENTROPY else run


def redact_prefixed(text: str) -> str:
    """`text` with the prefixed keys, JWTs and PEM private keys hidden (the rule that also
    applies under an identifier's name)."""
    return _PREFIXED.sub(REDACTED, text)


def redact_text(value: str) -> str:
    """Free text with every secret in it hidden: prefixed keys, then key-like runs."""
    return _KEY_RUN.sub(_hide_key_run, redact_prefixed(value))


def _under_safe_name(value: object) -> object:
    if isinstance(value, str):
        return redact_prefixed(value)
    if isinstance(value, list | tuple):
        return type(value)(_under_safe_name(child) for child in value)
    return redact_value(value)


def redact_value(value: object) -> object:
    """A JSON-like value as iris shows it: under a secret-bearing name, hidden whole; under
    an identifier's name, prefixed keys only; a key-like string, hidden whole; other text,
    its secrets hidden. Dicts, lists and tuples are walked; anything else is kept."""
    if isinstance(value, dict):
        shown: dict[Any, Any] = {}
        for key, child in value.items():
            if isinstance(key, str) and is_sensitive_name(key):
                shown[key] = REDACTED
            elif isinstance(key, str) and is_safe_name(key):
                shown[key] = _under_safe_name(child)
            else:
                shown[key] = redact_value(child)
        return shown
    if isinstance(value, list | tuple):
        return type(value)(redact_value(child) for child in value)
    if isinstance(value, str):
        return REDACTED if looks_like_key(value) else redact_text(value)
    return value


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """`environment.env_vars` as GetJobStatus returns it."""
    shown = redact_value(dict(env))
    assert isinstance(shown, dict)
    return {str(key): str(value) for key, value in shown.items()}


# ---------------------------------------------------------------------------------- requests


def redaction_marks(request: BaseModel | Mapping[str, Any]) -> list[str]:
    """The dotted paths of the fields of `request` (a LaunchJobRequest, or its JSON) that
    hold `[REDACTED]`, sorted: its fields' names (`environment.env_vars.HF_TOKEN`,
    `environment.secrets.DB_PASSWORD`; a JSON's own spelling, `environment.envVars.HF_TOKEN`),
    `[i]` for a list's items (`submit_argv[12]`, `entrypoint.run_command.argv[3]`), and
    fields keeper does not declare by the name they arrived with. Empty: nothing hidden."""
    found: list[str] = []
    data = (
        request.model_dump(mode="json", exclude_none=True)
        if isinstance(request, BaseModel)
        else request
    )
    _marks(data, "", found)
    return sorted(found)


def _marks(value: object, path: str, found: list[str]) -> None:
    if isinstance(value, str):
        if REDACTED in value:
            found.append(path)
    elif isinstance(value, Mapping):
        for key, child in value.items():
            _marks(child, f"{path}.{key}" if path else str(key), found)
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            _marks(child, f"{path}[{index}]", found)
