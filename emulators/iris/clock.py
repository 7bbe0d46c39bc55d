"""Two times for the iris emulator: wall time and scenario time.

Wall time drives the per-process CPU counters, so a probe that reads /proc/PID/stat twice a
few real seconds apart sees exactly `cores x CLK_TCK x seconds` more ticks. Scenario time
drives everything a pipeline does (stages, log lines, retries): it runs at `speed` times
wall time and a test or the control API can fast-forward it without touching the CPU
counters. Both count on the monotonic clock, so a host clock step cannot run them backwards.

What iris stamps (a log line's timestamp, a job's submitted and started times) is wall time:
the time the thing happened. `wall_at` maps a scenario time back to the wall time at which
the scenario clock passed it (what a skip jumped over happened at the skip), and `scene_at`
maps a wall time forward, so nothing the emulator stamps is ever later than now.
"""

from __future__ import annotations

from emulators.clock import Clock


class ScenarioClock:
    """Scenario seconds on the Unix scale: `speed` x wall time since start, plus skips."""

    def __init__(self, wall: Clock, speed: float = 60.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.wall = wall
        self.speed = speed
        self._wall_at_start = wall.now()
        self._skipped = 0.0
        # (wall time of a skip, seconds skipped), oldest first.
        self._skips: list[tuple[float, float]] = []

    def now(self) -> float:
        return (
            self._wall_at_start
            + (self.wall.now() - self._wall_at_start) * self.speed
            + (self._skipped)
        )

    def fast_forward(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the scenario clock never goes backwards")
        self._skips.append((self.wall.now(), seconds))
        self._skipped += seconds
        return self.now()

    def wall_at(self, scene: float) -> float:
        """The wall time at which the scenario clock read `scene`; a scene time a skip jumped
        over maps to the skip, and one before the clock started to itself."""
        base_wall = base_scene = self._wall_at_start
        if scene <= base_scene:
            return scene
        for at_wall, seconds in self._skips:
            at_scene = base_scene + (at_wall - base_wall) * self.speed
            if scene <= at_scene:
                break
            if scene <= at_scene + seconds:
                return at_wall
            base_wall, base_scene = at_wall, at_scene + seconds
        return base_wall + (scene - base_scene) / self.speed

    def scene_at(self, wall: float) -> float:
        """The scenario time at wall time `wall` (the inverse of `wall_at`, a skip's end)."""
        base_wall = base_scene = self._wall_at_start
        if wall <= base_wall:
            return wall
        for at_wall, seconds in self._skips:
            if wall < at_wall:
                break
            base_scene += (at_wall - base_wall) * self.speed + seconds
            base_wall = at_wall
        return base_scene + (wall - base_wall) * self.speed

    @property
    def skipped(self) -> float:
        return self._skipped
