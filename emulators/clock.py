"""Emulator time: float seconds on the Unix epoch scale, so it shows as wall-clock datetimes.

`EmulatorClock` advances with the monotonic clock (a host clock step cannot run transitions
backwards) plus whatever a test skips; `ManualClock` moves only when told, for tests that
need exact times. Shared by the emulators.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    def advance(self, seconds: float) -> float: ...


class EmulatorClock:
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
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the emulator clock never goes backwards")
        self._now += seconds
        return self._now


def to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else to_datetime(seconds).isoformat()
