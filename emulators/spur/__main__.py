"""python -m emulators.spur --controller-port 6817 --control-port 6820 --agents 4 ..."""

from __future__ import annotations

import asyncio

from emulators.lifecycle import command_line, parse
from emulators.spur.config import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_KILL_GRACE,
    SCENARIOS,
    SpurEmulatorConfig,
    numbered_agents,
)
from emulators.spur.emulator import serve


def parse_args(argv: list[str] | None = None) -> SpurEmulatorConfig:
    parser = command_line(
        "python -m emulators.spur",
        "Local spur controller and node agents speaking spur's gRPC protocol.",
    )
    parser.add_argument("--controller-port", type=int, default=6817)
    parser.add_argument("--control-port", type=int, default=6820)
    parser.add_argument("--agent-base-port", type=int, default=6830, help="agent i: base + i")
    parser.add_argument("--follower-port", type=int, default=None, help="serve a follower too")
    agents = parser.add_mutually_exclusive_group()
    agents.add_argument("--agents", type=int, default=2, help="gpu-node-01 .. gpu-node-NN")
    agents.add_argument("--scenario", choices=sorted(SCENARIOS), default=None)
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=DEFAULT_HEARTBEAT_INTERVAL,
        help="seconds; 0 means only on demand (POST /agents/<node>/beat)",
    )
    parser.add_argument(
        "--controller-address", default=None, help="where agents dial (e.g. a proxy)"
    )
    parser.add_argument("--kill-grace", type=float, default=DEFAULT_KILL_GRACE)
    parser.add_argument(
        "--heartbeat-timeout", type=float, default=None, help="silent nodes go DOWN on advance"
    )
    parser.add_argument("--token", default=None, help="require this Bearer token")
    options = parse(parser, argv)
    scenario, count = options.pop("scenario"), options.pop("agents")
    options["agents"] = SCENARIOS[scenario]() if scenario else numbered_agents(count)
    options["heartbeat_interval"] = options["heartbeat_interval"] or None
    return SpurEmulatorConfig(**options)


if __name__ == "__main__":
    asyncio.run(serve(parse_args()))
