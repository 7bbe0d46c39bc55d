"""What a secret may contain, and every form it can take inside an error message.

Pure: the rules run where a secret is loaded (so a bad one is refused with a message that
names its source and never its content), and `scrub` runs over any text that could carry
one (so a secret that got through anyway is cut out of answers, errors and logs).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "***"
# A run of this many characters of a secret is as good as the secret to an attacker who
# can guess or brute-force the rest; shorter runs ("ghp_") also occur in ordinary text.
MIN_FRAGMENT = 8
# Below this, a secret is scrubbed only where it appears whole.
_MIN_SCRUBBED = 4
_LINE_BREAK = re.compile(r"\r?\n")


def header_secret_problem(value: str) -> str | None:
    """Why `value` cannot be sent as an HTTP or gRPC header credential, or None.

    The answer describes the problem by position and character class only, never by the
    secret's own characters, so it is safe to show.

    | value | answer |
    |---|---|
    | empty | is empty |
    | two or more lines | has N lines |
    | a control character (CR, NUL, DEL) | contains a control character (U+000D) at position N |
    | a character outside ASCII | contains a non-ASCII character at position N |
    | a space | contains a space at position N |
    """
    if not value:
        return "is empty"
    lines = len(_LINE_BREAK.split(value))
    if lines > 1:
        return f"has {lines} lines"
    for position, char in enumerate(value, start=1):
        if unicodedata.category(char) == "Cc":
            return f"contains a control character (U+{ord(char):04X}) at position {position}"
        if not char.isascii():
            return f"contains a non-ASCII character at position {position}"
        if char == " ":
            return f"contains a space at position {position}"
    return None


def secret_forms(secret: str) -> tuple[str, ...]:
    """The secret as it can appear in text: itself, escaped (str and bytes repr, JSON),
    and percent-encoded (both hex cases)."""
    forms = {
        secret,
        repr(secret)[1:-1],
        secret.encode("unicode_escape").decode("ascii"),
        repr(secret.encode("utf-8", "backslashreplace"))[2:-1],
        json.dumps(secret)[1:-1],
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
    }
    for encoded in list(forms):
        if "%" in encoded:
            forms.add(re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded))
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))


def _covered(text: str, form: str, spans: list[tuple[int, int]]) -> None:
    window = min(len(form), MIN_FRAGMENT)
    for start in range(len(form) - window + 1):
        piece = form[start : start + window]
        at = text.find(piece)
        while at != -1:
            spans.append((at, at + window))
            at = text.find(piece, at + 1)


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every form of every secret, and every run of MIN_FRAGMENT or more of
    their characters, replaced by ***."""
    spans: list[tuple[int, int]] = []
    for secret in secrets:
        if not secret or len(secret) < _MIN_SCRUBBED:
            continue
        for form in secret_forms(secret):
            _covered(text, form, spans)
    if not spans:
        return text
    merged: list[list[int]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    out: list[str] = []
    cursor = 0
    for start, stop in merged:
        out += [text[cursor:start], REDACTED]
        cursor = stop
    out.append(text[cursor:])
    return "".join(out)
