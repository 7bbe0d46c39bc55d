"""python -m emulators.tpu --grpc-port 8470 --control-port 8471 ..."""

from __future__ import annotations

import argparse
import asyncio
import logging

from emulators.tpu.config import EmulatorConfig
from emulators.tpu.serve import serve


def parse_args(argv: list[str] | None = None) -> EmulatorConfig:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.tpu",
        description="Local Cloud TPU v2 API emulator with a simulated VM fleet.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--grpc-port", type=int, default=8470)
    parser.add_argument("--control-port", type=int, default=8471)
    parser.add_argument("--ip-prefix", default="127.20", help="loopback prefix for VM IPs")
    parser.add_argument("--vm-health-port", type=int, default=8080)
    parser.add_argument("--vm-health-path", default="/healthz")
    parser.add_argument("--scenario-file", default=None, help="YAML: default + slices")
    parser.add_argument(
        "--registration-url", default=None, help="phone-home URL (default: control API)"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return EmulatorConfig(
        host=args.host,
        grpc_port=args.grpc_port,
        control_port=args.control_port,
        ip_prefix=args.ip_prefix,
        vm_health_port=args.vm_health_port,
        vm_health_path=args.vm_health_path,
        scenario_file=args.scenario_file,
        registration_url=args.registration_url,
    )


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
