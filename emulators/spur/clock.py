"""Emulator time: the wall clock plus an offset tests move forward.

The controller's timestamps (submit, start, end, slurmd start) and terminal aging read this
clock, so a test can age a job past retention without waiting an hour. Agent kill grace and
heartbeat intervals are real asyncio timers: they model delays a caller actually waits on.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def advance(self, seconds: float) -> float: ...


class EmulatorClock:
    """Seconds on the Unix scale that advance with the monotonic clock plus an offset."""

    def __init__(self) -> None:
        self._wall_at_start = time.time()
        self._mono_at_start = time.monotonic()
        self._offset = 0.0

    def now(self) -> float:
        return self._wall_at_start + (time.monotonic() - self._mono_at_start) + self._offset

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the emulator clock never goes backwards")
        self._offset += seconds
        return self.now()


class ManualClock:
    """A clock that moves only when told: for state tests that need exact times."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the emulator clock never goes backwards")
        self._now += seconds
        return self._now


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()
