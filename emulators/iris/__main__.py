"""python -m emulators.iris --port 10000 [--scenario-file FILE] [--token SECRET=alice] ..."""

from __future__ import annotations

import argparse
import asyncio

from emulators.iris.config import (
    CURRENT_LOG_ROUTES,
    DEFAULT_PORT,
    DEFAULT_SPEED,
    LOG_ROUTES,
    IrisEmulatorConfig,
    check_log_routes,
)
from emulators.iris.emulator import serve
from emulators.lifecycle import command_line, parse


def _token(text: str) -> tuple[str, str]:
    token, _, user = text.partition("=")
    if not token:
        raise argparse.ArgumentTypeError("a token must not be empty")
    return token, user or "alice"


def _log_routes(text: str) -> tuple[str, ...]:
    try:
        return check_log_routes(part.strip() for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> IrisEmulatorConfig:
    parser = command_line(
        "python -m emulators.iris",
        "Local iris controller (Connect JSON) playing zephyr job scenarios.",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--scenario-file", default=None, help="YAML: default + scenarios")
    parser.add_argument("--scenario", default="healthy", help="what LaunchJob plays by default")
    parser.add_argument("--speed", type=float, default=DEFAULT_SPEED, help="scenario x wall")
    parser.add_argument(
        "--log-routes",
        type=_log_routes,
        default=CURRENT_LOG_ROUTES,
        metavar="ROUTE[,ROUTE...]",
        help=f"where logs are served, of {', '.join(LOG_ROUTES)} (default: proxy, as iris)",
    )
    parser.add_argument(
        "--token",
        type=_token,
        action="append",
        default=[],
        metavar="TOKEN[=USER]",
        help="require a bearer token (repeatable); the token's user launches jobs",
    )
    options = parse(parser, argv)
    scenario, tokens = options.pop("scenario"), dict(options.pop("token"))
    return IrisEmulatorConfig(**options, default_scenario=scenario, tokens=tokens)


if __name__ == "__main__":
    asyncio.run(serve(parse_args()))
