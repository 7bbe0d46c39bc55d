"""Durations as operators write them: "90s", "10m", "4h", "1h30m", ISO-8601, or seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, TypeAdapter, ValidationError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_ISO = re.compile(r"^-?P", re.IGNORECASE)
# Far beyond any budget keeper runs, and far enough from datetime's limits that adding one
# to the current time never overflows inside a workflow (which would fail its task forever).
LONGEST = timedelta(days=3650)
_ISO_8601 = TypeAdapter(timedelta)
FORMS = 'a duration such as "30s", "5m", "1h30m", ISO-8601 "PT15M" or a number of seconds'


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


def documented_duration(value: Any) -> Any:
    """Accepts only the documented forms, so a typo or a quoted number fails naming the field.

    | input                          | result                      |
    |--------------------------------|-----------------------------|
    | timedelta                      | itself                      |
    | int or float (not bool)        | that many seconds           |
    | "90s", "10m", "1h30m", "250ms" | the sum of the parts        |
    | ISO-8601 ("PT15M", "P1DT2H")   | as ISO-8601 reads           |
    | true/false, "30", "0:00:30"    | rejected                    |
    | longer than LONGEST either way | rejected                    |

    Numbers of seconds stay accepted: keeper writes SecondsDuration fields as floats, and
    those recorded payloads are decoded again whenever a history replays.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected {FORMS}, got {str(value).lower()}")
    if not isinstance(value, timedelta | int | float | str):
        return value  # pydantic names the type it expected
    try:
        parsed = _to_timedelta(value)
    except OverflowError:
        # Not a ValueError, so pydantic would let it escape and fail the workflow task.
        raise ValueError(f"{value!r} is longer than {LONGEST.days} days") from None
    if abs(parsed) > LONGEST:
        raise ValueError(f"{value!r} is longer than {LONGEST.days} days")
    return parsed


def _to_timedelta(value: timedelta | int | float | str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"expected {FORMS}, got {value}")
        return timedelta(seconds=value)
    parsed = parse_duration(value)
    if isinstance(parsed, timedelta):
        return parsed
    if _ISO.match(value.strip()):
        try:
            return _ISO_8601.validate_python(value.strip().upper())
        except ValidationError:
            pass
    raise ValueError(f"expected {FORMS}, got {value!r}")


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


HumanDuration = Annotated[timedelta, BeforeValidator(documented_duration)]
# Written back as seconds so every tool (temporal CLI, jq, the UI) reads the same number.
SecondsDuration = Annotated[
    timedelta,
    BeforeValidator(documented_duration),
    PlainSerializer(lambda v: v.total_seconds(), return_type=float, when_used="json"),
]
