"""python -m emulators.spur --controller-port 6817 --control-port 6820 --agents 4 ..."""

from __future__ import annotations

import argparse
import asyncio
import logging

from emulators.spur.config import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_KILL_GRACE,
    SCENARIOS,
    SpurEmulatorConfig,
    numbered_agents,
)
from emulators.spur.serve import serve


def parse_args(argv: list[str] | None = None) -> SpurEmulatorConfig:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.spur",
        description="Local spur controller and node agents speaking spur's gRPC protocol.",
    )
    parser.add_argument("--host", default="127.0.0.1")
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
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    specs = SCENARIOS[args.scenario]() if args.scenario else numbered_agents(args.agents)
    return SpurEmulatorConfig(
        host=args.host,
        controller_port=args.controller_port,
        control_port=args.control_port,
        agent_base_port=args.agent_base_port,
        follower_port=args.follower_port,
        agents=specs,
        heartbeat_interval=args.heartbeat_interval or None,
        controller_address=args.controller_address,
        kill_grace=args.kill_grace,
        heartbeat_timeout=args.heartbeat_timeout,
        token=args.token,
    )


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
