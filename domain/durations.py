"""Durations as operators write them: "90s", "10m", "4h", "1h30m", ISO-8601, or seconds."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> Any:
    """Turns "1h30m" into a timedelta; leaves anything else to pydantic's own parsing."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if not text or text.startswith("p"):
        return value
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            return value
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        return value
    return timedelta(seconds=total)


def format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds == 0:
        return f"{value.total_seconds():g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


HumanDuration = Annotated[timedelta, BeforeValidator(parse_duration)]
# Written back as seconds so every tool (temporal CLI, jq, the UI) reads the same number.
SecondsDuration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(lambda v: v.total_seconds(), return_type=float, when_used="json"),
]
