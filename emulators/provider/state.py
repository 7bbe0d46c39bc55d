"""Admin operations on an emulated provider, for in-process tests and operators.

Every function takes the provider's config file (the one GARM_PROVIDER_CONFIG_FILE names)
and works on the state it points to, under the same lock the provider processes take, so it
is safe while deletes are running. The admin CLI (`python -m emulators.provider admin ...`)
is a thin shell over these.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from emulators.provider.store import (
    ABSENT_DELETE,
    ConfigError,
    Locked,
    check_fail_times,
    check_mode,
    check_seconds,
    compact,
    empty_state,
    expand,
    find_instance,
    load_config,
    log_file,
    new_instance,
    read_log,
)


def write_config(
    path: str | Path,
    *,
    state_file: str = "provider-state.json",
    default_mode: str = "normal",
    default_mode_seconds: float = 0.0,
    default_fail_times: int | None = None,
    absent_delete: str = "not-found",
    os_type: str = "linux",
    os_arch: str = "amd64",
) -> Path:
    """Write a JSON provider config (a relative state_file lives beside it); returns path."""
    check_mode(default_mode)
    check_seconds(default_mode_seconds)
    check_fail_times(default_fail_times)
    if absent_delete not in ABSENT_DELETE:
        raise ConfigError(f"absent_delete must be one of {ABSENT_DELETE}")
    config = {
        "state_file": state_file,
        "default_mode": default_mode,
        "default_mode_seconds": default_mode_seconds,
        "default_fail_times": default_fail_times,
        "absent_delete": absent_delete,
        "os_type": os_type,
        "os_arch": os_arch,
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return target


def _state_file(config: str | Path) -> str:
    return load_config(os.fspath(config)).state_file


def add_instance(
    config: str | Path,
    name: str,
    pool_id: str,
    *,
    provider_id: str | None = None,
    status: str = "running",
    controller_id: str | None = None,
    mode: str | None = None,
    mode_seconds: float = 0.0,
    fail_times: int | None = None,
) -> dict[str, Any]:
    """Add an instance as if the provider had created it; returns its record.

    provider_id defaults to `emu-<n>`. mode None means the default mode applies to it.
    """
    loaded = load_config(os.fspath(config))
    with Locked(loaded.state_file) as tx:
        state = tx.state
        state["created"] += 1
        pid = provider_id or f"emu-{state['created']:06d}"
        for taken in (pid, name):
            if find_instance(state, taken) is not None:
                raise ConfigError(f"an instance with id or name {taken!r} already exists")
        record = new_instance(
            name,
            pool_id,
            serial=state["created"],
            status=status,
            os_type=loaded.os_type,
            os_arch=loaded.os_arch,
            controller_id=controller_id,
            mode=mode,
            mode_seconds=mode_seconds,
            fail_times=fail_times,
        )
        state["instances"][pid] = record
        tx.save()
    return expand(pid, record)


def set_mode(
    config: str | Path,
    instance_id: str,
    mode: str | None,
    *,
    seconds: float = 0.0,
    fail_times: int | None = None,
) -> dict[str, Any]:
    """Give one instance (by provider_id or name) its own delete mode; None returns it to
    the default. Resets its failure count. Returns the updated record."""
    with Locked(_state_file(config)) as tx:
        key = find_instance(tx.state, instance_id)
        if key is None:
            raise LookupError(f"no instance {instance_id!r}")
        record = tx.state["instances"][key]
        record["mode"] = None if mode is None else check_mode(mode)
        record["mode_seconds"] = check_seconds(seconds)
        record["fail_times"] = check_fail_times(fail_times)
        record["failures"] = 0
        tx.state["instances"][key] = compact(record)
        tx.save()
    return expand(key, record)


def set_default_mode(
    config: str | Path, mode: str, *, seconds: float = 0.0, fail_times: int | None = None
) -> None:
    """The mode for every instance without its own, and for ids the provider does not know;
    overrides the config file's default_mode. Resets the default's failure count."""
    with Locked(_state_file(config)) as tx:
        tx.state["default"] = {
            "mode": check_mode(mode),
            "seconds": check_seconds(seconds),
            "fail_times": check_fail_times(fail_times),
        }
        tx.state["default_failures"] = 0
        tx.save()


def remove_instance(config: str | Path, instance_id: str) -> bool:
    """Drop an instance without a provider call (and without a log line)."""
    with Locked(_state_file(config)) as tx:
        key = find_instance(tx.state, instance_id)
        if key is not None:
            del tx.state["instances"][key]
            tx.save()
    return key is not None


def instances(config: str | Path) -> dict[str, dict[str, Any]]:
    """The instance records by provider_id, with every field filled in."""
    with Locked(_state_file(config), shared=True) as tx:
        return {key: expand(key, stored) for key, stored in tx.state["instances"].items()}


def invocations(
    config: str | Path, *, command: str | None = None, instance_id: str | None = None
) -> list[dict[str, Any]]:
    """Every provider call so far, oldest first: command, instance_id, pool_id, pid, mode,
    started/ended (epoch s), exit_code (None while running, or if it was killed) and the
    stderr message."""
    return [
        call
        for call in read_log(_state_file(config))
        if (command is None or call["command"] == command)
        and (instance_id is None or call["instance_id"] == instance_id)
    ]


def attempts(config: str | Path, instance_id: str) -> int:
    """How many times DeleteInstance was called for instance_id."""
    return len(invocations(config, command="DeleteInstance", instance_id=instance_id))


def snapshot(config: str | Path) -> dict[str, Any]:
    """The whole state plus the invocation log, as `admin state` prints it."""
    state_file = _state_file(config)
    with Locked(state_file, shared=True) as tx:
        state = tx.state
    return {
        "state_file": state_file,
        **state,
        "instances": {key: expand(key, stored) for key, stored in state["instances"].items()},
        "invocations": read_log(state_file),
    }


def reset(config: str | Path) -> None:
    """Forget every instance, the default mode and the invocation log."""
    state_file = _state_file(config)
    with Locked(state_file) as tx:
        tx.state = empty_state()
        tx.save()
        Path(log_file(state_file)).unlink(missing_ok=True)
