"""Where the Temporal SDK core's own log lines go: through Python logging, never stdout.

The core (Rust) logs a call it retries while the server is down, a worker's poll errors,
and the like. Left to its defaults it writes them to stdout, in the middle of a command's
data (`keeper ... --json | jq`). Every Runtime keeper makes forwards them to the logger
`keeper.temporal_sdk` instead: stderr in the CLI (Python's last-resort handler, WARNING and
up), the worker's log format and stream in `keeper worker`.
"""

from __future__ import annotations

import functools
import logging

from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    PrometheusConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

SDK_LOGGER = logging.getLogger("keeper.temporal_sdk")


def sdk_telemetry(metrics: PrometheusConfig | None = None) -> TelemetryConfig:
    """The telemetry of every Runtime keeper makes: the SDK's default levels (core WARN,
    the rest ERROR), forwarded to SDK_LOGGER."""
    return TelemetryConfig(
        logging=LoggingConfig(
            filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
            forwarding=LogForwardingConfig(logger=SDK_LOGGER),
        ),
        metrics=metrics,
    )


@functools.cache
def default_runtime() -> Runtime:
    """The process's Runtime when nothing serves metrics: what the SDK's default would be,
    but with its logs forwarded."""
    return Runtime(telemetry=sdk_telemetry())
