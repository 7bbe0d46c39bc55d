"""Settings of one iris emulator instance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_PORT = 10000
DEFAULT_SPEED = 60.0  # scenario seconds per wall second: one wall second is a minute
SCENARIO_ENV = "IRIS_EMULATOR_SCENARIO"  # in a LaunchJobRequest's env_vars: pick the scenario


@dataclass
class IrisEmulatorConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; the chosen one is on IrisEmulator.url
    speed: float = DEFAULT_SPEED
    scenario_file: str | None = None
    # The scenario LaunchJob plays when neither the request nor the control API chose one.
    default_scenario: str = "healthy"
    # False: GetTaskLogs is absent, as in the newest iris (404, code unimplemented).
    get_task_logs: bool = True
    # token -> user. Empty: null-auth mode, every caller is `default_user`.
    tokens: Mapping[str, str] = field(default_factory=dict)
    default_user: str = "anonymous"
    # How long a hanging RPC waits at most before it answers anyway (wall seconds).
    hang_limit: float = 60.0
    # Wall seconds between two CPU settles in the background (0: only on reads).
    settle_interval: float = 0.25

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError("speed must be positive")
