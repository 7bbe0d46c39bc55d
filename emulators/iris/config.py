"""Settings of one iris emulator instance."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_PORT = 10000
DEFAULT_SPEED = 60.0  # scenario seconds per wall second: one wall second is a minute
SCENARIO_ENV = "IRIS_EMULATOR_SCENARIO"  # in a LaunchJobRequest's env_vars: pick the scenario

# Where log lines can be read. The controller serves them only through its proxy to the log
# server it embeds, `proxy`: POST /proxy/system.log-server/finelog.logging.LogService/FetchLogs.
# Older controllers also answered `get_task_logs` (ControllerService.GetTaskLogs) and
# `fetch_logs` (LogService.FetchLogs at the controller's own paths, under iris.logging and
# finelog.logging).
LOG_ROUTES = ("get_task_logs", "fetch_logs", "proxy")
CURRENT_LOG_ROUTES = ("proxy",)


@dataclass
class IrisEmulatorConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; the chosen one is on IrisEmulator.url
    speed: float = DEFAULT_SPEED
    scenario_file: str | None = None
    # The scenario LaunchJob plays when neither the request nor the control API chose one.
    default_scenario: str = "healthy"
    # The log routes offered (LOG_ROUTES); the default is the controller's own: `proxy` only.
    log_routes: tuple[str, ...] = CURRENT_LOG_ROUTES
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
        self.log_routes = check_log_routes(self.log_routes)


def check_log_routes(routes: Iterable[str]) -> tuple[str, ...]:
    """The routes in LOG_ROUTES' order, or ValueError naming one that is not a route."""
    wanted = set(routes)
    unknown = sorted(wanted - set(LOG_ROUTES))
    if unknown:
        raise ValueError(f"unknown log route(s) {unknown}; known: {', '.join(LOG_ROUTES)}")
    return tuple(route for route in LOG_ROUTES if route in wanted)
