"""The emulated provider speaking GARM's external-provider protocol.

GARM runs the executable with no arguments; the call is in the environment
(GARM_COMMAND, GARM_CONTROLLER_ID, GARM_PROVIDER_CONFIG_FILE, GARM_POOL_ID,
GARM_INSTANCE_ID, GARM_INTERFACE_VERSION), CreateInstance's bootstrap parameters arrive on
stdin, answers go to stdout as JSON, errors to stderr, and the exit code says how it went:
0 success, 30 not found, 31 duplicate, anything else failure. The checks on the environment
follow garm-provider-common's, so an adapter that would upset a real Go provider upsets this
one too.

Only DeleteInstance has failure modes (see docs/provider.md); the other commands always
behave.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

from emulators.provider.store import (
    Config,
    ConfigError,
    Locked,
    append_log,
    compact,
    field,
    find_instance,
    load_config,
    new_instance,
    now,
    public_view,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NOT_FOUND = 30  # garm-provider-common's ExitCodeNotFound
EXIT_DUPLICATE = 31  # ExitCodeDuplicate

VERSION = "v0.1.0-keeper-emulated"
INTERFACE_VERSIONS = ("v0.1.0", "v0.1.1")

Handler = Callable[["Call", Config], int]

_NEEDS_INSTANCE = ("DeleteInstance", "GetInstance", "StartInstance", "StopInstance")
_NEEDS_POOL = ("CreateInstance", "ListInstances")


class Call:
    """One invocation: what was asked, and its line(s) in the invocation log."""

    def __init__(self, state_file: str, command: str) -> None:
        env = os.environ
        self.state_file = state_file
        self.command = command
        self.controller_id = env.get("GARM_CONTROLLER_ID", "")
        self.instance_id = env.get("GARM_INSTANCE_ID", "")
        self.pool_id = env.get("GARM_POOL_ID", "")
        self.entry: dict[str, object] = {
            "call": f"{os.getpid()}-{time.time_ns()}",
            "command": command,
            "instance_id": self.instance_id or None,
            "pool_id": self.pool_id or None,
            "pid": os.getpid(),
            "started": now(),
            "exit_code": None,
        }

    def begin(self, mode: str) -> None:
        """Log the call before a sleep, so a caller sees the attempt (and the pid to check)
        even when the process is killed before it exits."""
        self.entry["mode"] = mode
        append_log(self.state_file, self.entry)

    def end(self, exit_code: int, message: str = "") -> int:
        self.entry["exit_code"] = exit_code
        self.entry["ended"] = now()
        if message:
            self.entry["message"] = message
            sys.stderr.write(f"emulated provider: {message}\n")
        append_log(self.state_file, self.entry)
        return exit_code


def main() -> int:
    env = os.environ
    command = env.get("GARM_COMMAND", "")
    config_file = env.get("GARM_PROVIDER_CONFIG_FILE", "")
    # Checked before anything else, as garm-provider-common does; nothing is logged since
    # without a config there is no state to log into.
    problem = _missing_environment(command)
    if problem:
        sys.stderr.write(f"emulated provider: {problem}\n")
        return EXIT_FAILED
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        sys.stderr.write(f"emulated provider: {exc}\n")
        return EXIT_FAILED
    call = Call(config.state_file, command)
    handler = _HANDLERS.get(command)
    if handler is None:
        return call.end(EXIT_FAILED, f"unknown GARM_COMMAND {command!r}")
    try:
        return handler(call, config)
    except (ConfigError, OSError, ValueError, KeyError) as exc:
        return call.end(EXIT_FAILED, f"{command} failed: {type(exc).__name__}: {exc}")


def _missing_environment(command: str) -> str:
    env = os.environ
    if not env.get("GARM_PROVIDER_CONFIG_FILE"):
        return "missing GARM_PROVIDER_CONFIG_FILE"
    if not env.get("GARM_CONTROLLER_ID"):
        return "missing GARM_CONTROLLER_ID"
    if command in _NEEDS_INSTANCE:
        if not env.get("GARM_INSTANCE_ID"):
            return "missing GARM_INSTANCE_ID"
        # Interface v0.1.1 sends the pool with every per-instance command, and Go providers
        # built on it refuse to run without one.
        if env.get("GARM_INTERFACE_VERSION") == "v0.1.1" and not env.get("GARM_POOL_ID"):
            return "missing GARM_POOL_ID (required by interface v0.1.1)"
    if command in _NEEDS_POOL and not env.get("GARM_POOL_ID"):
        return "missing GARM_POOL_ID"
    return ""


def _delete(call: Call, config: Config) -> int:
    ident = call.instance_id
    with Locked(config.state_file) as tx:
        mode, seconds, outcome = _delete_now(tx, ident, config)
    if outcome is not None:
        return call.end(*outcome)

    # The lock is released: a sleeping provider never holds up the others.
    call.begin(mode)
    if mode == "hanging":
        while True:
            time.sleep(3600)
    time.sleep(seconds)
    if mode == "succeeds-after-timeout":
        return call.end(EXIT_OK)
    with Locked(config.state_file) as tx:
        outcome = _remove(tx, find_instance(tx.state, ident), ident, config.absent_delete)
    return call.end(*outcome)


def _delete_now(
    tx: Locked, ident: str, config: Config
) -> tuple[str, float, tuple[int, str] | None]:
    """The mode that applies, its seconds, and the exit if the call ends without a sleep."""
    state = tx.state
    key = find_instance(state, ident)
    record = state["instances"][key] if key is not None else None
    # An instance's own mode wins. Failures count where the mode was set, so fail_times of
    # the default mode spans every instance it applies to.
    if record is not None and record.get("mode"):
        holder, counter = record, "failures"
        mode = record["mode"]
        seconds = field(record, "mode_seconds")
        fail_times = field(record, "fail_times")
    else:
        holder, counter = state, "default_failures"
        default = state["default"] or {
            "mode": config.default_mode,
            "seconds": config.default_mode_seconds,
            "fail_times": config.default_fail_times,
        }
        mode, seconds, fail_times = default["mode"], default["seconds"], default["fail_times"]

    if mode == "failing":
        failed = holder.get(counter, 0)
        if fail_times is None or failed < fail_times:
            holder[counter] = failed + 1
            tx.save()
            of = f" of {fail_times}" if fail_times is not None else ""
            why = f"DeleteInstance {ident} failed: emulated failure {failed + 1}{of}"
            return mode, seconds, (EXIT_FAILED, f"{why} (mode failing)")
        mode = "normal"  # it has failed fail_times times: from now on it behaves
    if mode == "normal":
        return mode, seconds, _remove(tx, key, ident, config.absent_delete)
    if mode == "not-found":
        return mode, seconds, (EXIT_NOT_FOUND, f"instance {ident} not found (mode not-found)")
    if mode == "succeeds-after-timeout" and key is not None:
        # Gone at once; only the exit comes late, past a short caller's deadline.
        del state["instances"][key]
        tx.save()
    elif mode not in ("slow", "hanging", "succeeds-after-timeout"):
        return mode, seconds, (EXIT_FAILED, f"unknown mode {mode!r} in the state file")
    return mode, seconds, None


def _remove(tx: Locked, key: str | None, ident: str, absent_delete: str) -> tuple[int, str]:
    if key is None:
        if absent_delete == "no-op":
            return EXIT_OK, ""
        return EXIT_NOT_FOUND, f"instance {ident} not found"
    del tx.state["instances"][key]
    tx.save()
    return EXIT_OK, ""


def _get(call: Call, config: Config) -> int:
    with Locked(call.state_file, shared=True) as tx:
        key = find_instance(tx.state, call.instance_id)
        record = tx.state["instances"][key] if key is not None else None
    if key is None or record is None:
        return call.end(EXIT_NOT_FOUND, f"instance {call.instance_id} not found")
    print(json.dumps(public_view(key, record)))
    return call.end(EXIT_OK)


def _list(call: Call, config: Config) -> int:
    with Locked(call.state_file, shared=True) as tx:
        found = [
            public_view(k, r)
            for k, r in tx.state["instances"].items()
            if r["pool_id"] == call.pool_id
        ]
    print(json.dumps(found))
    return call.end(EXIT_OK)


def _create(call: Call, config: Config) -> int:
    raw = sys.stdin.read()
    if not raw.strip():
        return call.end(EXIT_FAILED, "CreateInstance requires bootstrap params on stdin")
    try:
        params = json.loads(raw)
    except ValueError as exc:
        return call.end(EXIT_FAILED, f"failed to decode bootstrap params: {exc}")
    name = params.get("name") if isinstance(params, dict) else None
    if not name:
        return call.end(EXIT_FAILED, "missing bootstrap params: no name")
    with Locked(config.state_file) as tx:
        state = tx.state
        if find_instance(state, name) is not None:
            return call.end(EXIT_DUPLICATE, f"an instance named {name} already exists")
        state["created"] += 1
        provider_id = f"emu-{os.urandom(6).hex()}"
        record = new_instance(
            name,
            call.pool_id,
            serial=state["created"],
            os_type=params.get("os_type") or config.os_type,
            os_arch=params.get("arch") or config.os_arch,
            controller_id=call.controller_id,
        )
        state["instances"][provider_id] = record
        tx.save()
    print(json.dumps(public_view(provider_id, record)))
    return call.end(EXIT_OK)


def _set_status(status: str) -> Handler:
    def handler(call: Call, config: Config) -> int:
        with Locked(call.state_file) as tx:
            key = find_instance(tx.state, call.instance_id)
            if key is not None:
                record = tx.state["instances"][key]
                record["status"] = status
                tx.state["instances"][key] = compact(record)
                tx.save()
        if key is None:
            return call.end(EXIT_NOT_FOUND, f"instance {call.instance_id} not found")
        return call.end(EXIT_OK)

    return handler


def _remove_all(call: Call, config: Config) -> int:
    # Only this controller's instances, and those created outside any controller.
    with Locked(call.state_file) as tx:
        instances = tx.state["instances"]
        for key in [
            k
            for k, r in instances.items()
            if field(r, "controller_id") in (None, call.controller_id)
        ]:
            del instances[key]
        tx.save()
    return call.end(EXIT_OK)


def _printing(text: str) -> Handler:
    def handler(call: Call, config: Config) -> int:
        print(text)
        return call.end(EXIT_OK)

    return handler


_HANDLERS: dict[str, Handler] = {
    "CreateInstance": _create,
    "DeleteInstance": _delete,
    "GetInstance": _get,
    "ListInstances": _list,
    "StartInstance": _set_status("running"),
    "StopInstance": _set_status("stopped"),
    "RemoveAllInstances": _remove_all,
    "GetVersion": _printing(VERSION),
    "GetSupportedInterfaceVersions": _printing(json.dumps(list(INTERFACE_VERSIONS))),
}
