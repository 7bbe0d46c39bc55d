"""Emulator time: real monotonic time plus an offset that tests move forward.

Time is kept as float seconds on the Unix epoch scale so it can be shown as wall-clock
datetimes, but it advances with the monotonic clock so a host clock step cannot make
transitions run backwards.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime


class Clock:
    def __init__(self) -> None:
        self._wall_at_start = time.time()
        self._mono_at_start = time.monotonic()
        self._offset = 0.0

    def now(self) -> float:
        return self._wall_at_start + (time.monotonic() - self._mono_at_start) + self._offset

    def now_dt(self) -> datetime:
        return to_datetime(self.now())

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the emulator clock never goes backwards")
        self._offset += seconds
        return self.now()

    def set_now(self, when: datetime) -> float:
        if when.tzinfo is None:
            raise ValueError("set_now needs a timezone-aware datetime")
        delta = when.timestamp() - self.now()
        if delta < 0:
            raise ValueError("the emulator clock never goes backwards")
        return self.advance(delta)


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else to_datetime(seconds).isoformat()
