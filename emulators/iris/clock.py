"""Two times for the iris emulator: wall time and scenario time.

Wall time drives the per-process CPU counters, so a probe that reads /proc/PID/stat twice a
few real seconds apart sees exactly `cores x CLK_TCK x seconds` more ticks. Scenario time
drives everything a pipeline does (stages, log lines, retries): it runs at `speed` times
wall time and a test or the control API can fast-forward it without touching the CPU
counters. Both count on the monotonic clock, so a host clock step cannot run them backwards.
"""

from __future__ import annotations

import time
from typing import Protocol


class WallClock(Protocol):
    def now(self) -> float: ...


class SystemWallClock:
    """Unix seconds that advance with the monotonic clock."""

    def __init__(self) -> None:
        self._wall_at_start = time.time()
        self._mono_at_start = time.monotonic()

    def now(self) -> float:
        return self._wall_at_start + (time.monotonic() - self._mono_at_start)


class ManualWallClock:
    """Wall time that moves only when told: for tests that read CPU counters exactly."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("wall time never goes backwards")
        self._now += seconds
        return self._now


class ScenarioClock:
    """Scenario seconds on the Unix scale: `speed` x wall time since start, plus skips."""

    def __init__(self, wall: WallClock, speed: float = 60.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.wall = wall
        self.speed = speed
        self._wall_at_start = wall.now()
        self._skipped = 0.0

    def now(self) -> float:
        return (
            self._wall_at_start
            + (self.wall.now() - self._wall_at_start) * self.speed
            + (self._skipped)
        )

    def fast_forward(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the scenario clock never goes backwards")
        self._skipped += seconds
        return self.now()

    @property
    def skipped(self) -> float:
        return self._skipped
