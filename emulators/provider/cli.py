"""The emulated provider's admin CLI.

    python -m emulators.provider --config provider.json admin init [--state-file F] ...
    python -m emulators.provider --config provider.json admin add --name N --pool P \
        [--provider-id ID] [--status S] [--controller-id C] [--mode M --seconds S --fail-times N]
    python -m emulators.provider --config provider.json admin mode ID MODE [--seconds S] \
        [--fail-times N]                    (MODE "default" returns ID to the default mode)
    python -m emulators.provider --config provider.json admin default-mode MODE [...]
    python -m emulators.provider --config provider.json admin remove ID
    python -m emulators.provider --config provider.json admin state | log [--command C] | reset

--config defaults to $GARM_PROVIDER_CONFIG_FILE. Everything prints JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from emulators.provider import state
from emulators.provider.store import ABSENT_DELETE, MODES, ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.provider",
        description=(
            "keeper's emulated GARM external provider. With GARM_COMMAND set and no "
            "arguments it is the provider; with arguments, this admin CLI."
        ),
    )
    parser.add_argument(
        "--config",
        default=os.environ.get("GARM_PROVIDER_CONFIG_FILE"),
        help="provider config file (default: $GARM_PROVIDER_CONFIG_FILE)",
    )
    groups = parser.add_subparsers(dest="group", required=True)
    admin = groups.add_parser("admin", help="inspect and steer the emulated provider")
    commands = admin.add_subparsers(dest="action", required=True)

    init = commands.add_parser("init", help="write a JSON config at --config")
    init.add_argument("--state-file", default="provider-state.json")
    init.add_argument("--default-mode", choices=MODES, default="normal")
    init.add_argument("--seconds", type=float, default=0.0, dest="default_mode_seconds")
    init.add_argument("--fail-times", type=int, default=None, dest="default_fail_times")
    init.add_argument("--absent-delete", choices=ABSENT_DELETE, default="not-found")

    add = commands.add_parser("add", help="add an instance as if CreateInstance had made it")
    add.add_argument("--name", required=True)
    add.add_argument("--pool", required=True)
    add.add_argument("--provider-id")
    add.add_argument("--status", default="running")
    add.add_argument("--controller-id")
    _mode_options(add, mode_flag=True)

    mode = commands.add_parser("mode", help="set one instance's delete mode")
    mode.add_argument("instance_id", help="provider_id or name")
    mode.add_argument("mode", choices=(*MODES, "default"))
    _mode_options(mode, mode_flag=False)

    default = commands.add_parser("default-mode", help="set the mode for everything else")
    default.add_argument("mode", choices=MODES)
    _mode_options(default, mode_flag=False)

    remove = commands.add_parser("remove", help="drop an instance without a provider call")
    remove.add_argument("instance_id")

    commands.add_parser("state", help="print the state and the invocation log")
    log = commands.add_parser("log", help="print the invocation log")
    log.add_argument("--command")
    log.add_argument("--instance-id")
    commands.add_parser("reset", help="forget every instance, mode and invocation")
    return parser


def _mode_options(parser: argparse.ArgumentParser, *, mode_flag: bool) -> None:
    if mode_flag:
        parser.add_argument("--mode", choices=MODES, default=None)
    parser.add_argument("--seconds", type=float, default=0.0, help="for slow and the like")
    parser.add_argument("--fail-times", type=int, default=None, help="failing: then behave")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.config:
        print("error: --config (or GARM_PROVIDER_CONFIG_FILE) is required", file=sys.stderr)
        return 2
    try:
        result = _run(args)
    except (ConfigError, LookupError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if result is not None:
        print(json.dumps(result, indent=2))
    return 0


def _run(args: argparse.Namespace) -> Any:
    config = args.config
    match args.action:
        case "init":
            path = state.write_config(
                config,
                state_file=args.state_file,
                default_mode=args.default_mode,
                default_mode_seconds=args.default_mode_seconds,
                default_fail_times=args.default_fail_times,
                absent_delete=args.absent_delete,
            )
            return {"config": str(path)}
        case "add":
            return state.add_instance(
                config,
                args.name,
                args.pool,
                provider_id=args.provider_id,
                status=args.status,
                controller_id=args.controller_id,
                mode=args.mode,
                mode_seconds=args.seconds,
                fail_times=args.fail_times,
            )
        case "mode":
            return state.set_mode(
                config,
                args.instance_id,
                None if args.mode == "default" else args.mode,
                seconds=args.seconds,
                fail_times=args.fail_times,
            )
        case "default-mode":
            state.set_default_mode(
                config, args.mode, seconds=args.seconds, fail_times=args.fail_times
            )
            return state.snapshot(config)["default"]
        case "remove":
            return {"removed": state.remove_instance(config, args.instance_id)}
        case "state":
            return state.snapshot(config)
        case "log":
            return state.invocations(config, command=args.command, instance_id=args.instance_id)
        case "reset":
            state.reset(config)
            return None
    raise AssertionError(args.action)
