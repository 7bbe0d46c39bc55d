"""python -m emulators.tpu --grpc-port 8470 --control-port 8471 ..."""

from __future__ import annotations

import asyncio

from emulators.lifecycle import command_line, parse
from emulators.tpu.config import EmulatorConfig
from emulators.tpu.emulator import serve


def parse_args(argv: list[str] | None = None) -> EmulatorConfig:
    parser = command_line(
        "python -m emulators.tpu", "Local Cloud TPU v2 API emulator with a simulated VM fleet."
    )
    parser.add_argument("--grpc-port", type=int, default=8470)
    parser.add_argument("--control-port", type=int, default=8471)
    parser.add_argument("--ip-prefix", default="127.20", help="loopback prefix for VM IPs")
    parser.add_argument("--vm-health-port", type=int, default=8080)
    parser.add_argument("--vm-health-path", default="/healthz")
    parser.add_argument("--scenario-file", default=None, help="YAML: default + slices")
    parser.add_argument(
        "--registration-url", default=None, help="phone-home URL (default: control API)"
    )
    return EmulatorConfig(**parse(parser, argv))


if __name__ == "__main__":
    asyncio.run(serve(parse_args()))
