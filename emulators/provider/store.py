"""The emulated provider's configuration and on-disk state.

A GARM provider is one short-lived process per call, and keeper may run hundreds of deletes
at once, so every process reads and rewrites one JSON state file under an exclusive
`flock`. The lock lives on a separate `<state>.lock` file because the state itself is
replaced by rename (readers never see half a file), which would give each writer a
different inode to lock. The lock is never held across a sleep.

Invocations go to `<state>.log`, one JSON line each, appended with a single O_APPEND write:
the log grows with every call, and keeping it out of the locked state keeps the critical
section as short as the instance table.

Provider processes import this module on every call, so it uses the standard library only
and avoids even pathlib and typing: interpreter start-up is most of a call's cost.
"""

from __future__ import annotations

import fcntl
import json
import os
import time

MODES = ("normal", "slow", "failing", "hanging", "not-found", "succeeds-after-timeout")
# What DeleteInstance does for an instance the emulator does not have: GARM accepts both.
ABSENT_DELETE = ("not-found", "no-op")
STATUSES = ("running", "stopped", "error", "unknown")
# The ProviderInstance fields a provider prints; the rest of a record is emulator bookkeeping.
PUBLIC_FIELDS = (
    "provider_id",
    "name",
    "os_type",
    "os_name",
    "os_version",
    "os_arch",
    "addresses",
    "status",
    "pool_id",
)
_COMPACT = (",", ":")


class ConfigError(Exception):
    pass


CONFIG_KEYS = (
    "state_file",
    "default_mode",
    "default_mode_seconds",
    "default_fail_times",
    "absent_delete",
    "os_type",
    "os_arch",
)


class Config:
    """What the config file says; unset keys take the defaults below."""

    __slots__ = ("path", *CONFIG_KEYS)

    def __init__(self, path: str, raw: dict[str, object]) -> None:
        unknown = set(raw) - set(CONFIG_KEYS)
        if unknown:
            raise ConfigError(f"{path}: unknown keys {sorted(unknown)}")
        self.path = path
        state_file = str(raw.get("state_file") or "provider-state.json")
        # Relative to the config file, so a config and its state travel together.
        self.state_file = os.path.join(os.path.dirname(os.path.abspath(path)), state_file)
        self.default_mode = check_mode(str(raw.get("default_mode") or "normal"))
        self.default_mode_seconds = check_seconds(raw.get("default_mode_seconds") or 0.0)
        self.default_fail_times = check_fail_times(raw.get("default_fail_times"))
        self.absent_delete = str(raw.get("absent_delete") or "not-found")
        if self.absent_delete not in ABSENT_DELETE:
            raise ConfigError(f"{path}: absent_delete must be one of {ABSENT_DELETE}")
        self.os_type = str(raw.get("os_type") or "linux")
        self.os_arch = str(raw.get("os_arch") or "amd64")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}; modes are {', '.join(MODES)}")
    return mode


def check_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"mode seconds must be a number, not {value!r}")
    seconds = float(value)
    if not seconds >= 0:  # also rejects NaN
        raise ConfigError(f"mode seconds must be >= 0, not {value!r}")
    return seconds


def check_fail_times(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"fail_times must be a whole number, not {value!r}")
    times = int(value)
    if times < 0:
        raise ConfigError(f"fail_times must be >= 0, not {times}")
    return times


def load_config(path: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read provider config {path}: {exc.strerror}") from None
    if path.endswith((".yaml", ".yml")):
        raw = _load_yaml(text)
    else:
        try:
            raw = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise ConfigError(f"{path}: not JSON ({exc}); name YAML configs *.yaml") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    try:
        return Config(path, raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _load_yaml(text: str) -> object:
    try:
        import yaml
    except ImportError:
        # The wrapper starts Python with -S (no site-packages) to halve start-up time, and
        # pyyaml lives in site-packages: only YAML configs pay for loading it.
        import site

        site.main()
        import yaml
    return yaml.safe_load(text) or {}


def empty_state() -> dict[str, object]:
    # default: None means the config file's default mode applies.
    return {"default": None, "default_failures": 0, "created": 0, "instances": {}}


def read_state(state_file: str) -> dict:
    try:
        with open(state_file, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return empty_state()


def write_state(state_file: str, state: dict) -> None:
    tmp = f"{state_file}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(state, separators=_COMPACT))
    # No fsync: this is a test double, and rename alone is what concurrent readers need.
    os.replace(tmp, state_file)


class Locked:
    """`with Locked(state_file) as tx:` read tx.state, change it, tx.save()."""

    def __init__(self, state_file: str, *, shared: bool = False) -> None:
        self.state_file = state_file
        self.shared = shared
        self.state: dict = {}
        self._fd = -1

    def __enter__(self) -> Locked:
        lock = self.state_file + ".lock"
        try:
            self._fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a fresh config whose state directory is not there yet
            os.makedirs(os.path.dirname(lock), exist_ok=True)
            self._fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
        self.state = read_state(self.state_file)
        return self

    def save(self) -> None:
        if self.shared:
            raise RuntimeError("a shared lock cannot write")
        write_state(self.state_file, self.state)

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)  # releases the flock


def find_instance(state: dict, ident: str) -> str | None:
    """GARM passes a provider_id, or the instance name when creation failed before one."""
    instances = state["instances"]
    if ident in instances:
        return ident
    for key, record in instances.items():
        if record["name"] == ident:
            return key
    return None


# Instance records keep only what differs from these, and derive addresses and OS details,
# because every call parses and rewrites the whole table under the lock: record size is
# what limits deletes per second once thousands of instances are in play.
RECORD_DEFAULTS: dict[str, object] = {
    "status": "running",
    "os_type": "linux",
    "os_arch": "amd64",
    # None: created outside any controller, so RemoveAllInstances of every one takes it.
    "controller_id": None,
    "mode": None,  # None: the default mode applies
    "mode_seconds": 0.0,
    "fail_times": None,
    "failures": 0,
}
_DERIVED = ("provider_id", "addresses", "os_name", "os_version")


def new_instance(
    name: str,
    pool_id: str,
    *,
    serial: int,
    status: str = "running",
    os_type: str = "linux",
    os_arch: str = "amd64",
    controller_id: str | None = None,
    mode: str | None = None,
    mode_seconds: float = 0.0,
    fail_times: int | None = None,
) -> dict[str, object]:
    """A record as stored, under its provider_id in state["instances"]."""
    if status not in STATUSES:
        raise ConfigError(f"status must be one of {STATUSES}, not {status!r}")
    return compact(
        {
            "name": name,
            "pool_id": pool_id,
            "serial": serial,
            "status": status,
            "os_type": os_type,
            "os_arch": os_arch,
            "controller_id": controller_id,
            "mode": None if mode is None else check_mode(mode),
            "mode_seconds": check_seconds(mode_seconds),
            "fail_times": check_fail_times(fail_times),
        }
    )


def compact(record: dict) -> dict[str, object]:
    missing = object()
    return {
        k: v
        for k, v in record.items()
        if k not in _DERIVED and RECORD_DEFAULTS.get(k, missing) != v
    }


def field(stored: dict, key: str) -> object:
    return stored.get(key, RECORD_DEFAULTS[key])


def expand(provider_id: str, stored: dict) -> dict[str, object]:
    """The whole record: defaults filled in, derived fields added."""
    serial = int(stored.get("serial", 0))
    return {
        "provider_id": provider_id,
        **RECORD_DEFAULTS,
        **stored,
        "os_name": "ubuntu",
        "os_version": "24.04",
        "addresses": [
            {
                "address": f"10.{serial >> 16 & 255}.{serial >> 8 & 255}.{serial & 255}",
                "type": "private",
            }
        ],
    }


def public_view(provider_id: str, stored: dict) -> dict[str, object]:
    """The record as GARM's ProviderInstance JSON."""
    full = expand(provider_id, stored)
    return {k: full[k] for k in PUBLIC_FIELDS if full.get(k) is not None}


def log_file(state_file: str) -> str:
    return state_file + ".log"


def append_log(state_file: str, entry: dict[str, object]) -> None:
    # One write() of one short line on an O_APPEND descriptor: concurrent writers' lines
    # never interleave, so the log needs no lock.
    line = (json.dumps(entry, separators=_COMPACT) + "\n").encode()
    fd = os.open(log_file(state_file), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_log(state_file: str) -> list[dict]:
    """One record per invocation, in start order; a call that logged when it started and
    again when it exited appears once, with its exit code (None if it never exited)."""
    calls: dict[str, dict] = {}
    try:
        with open(log_file(state_file), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    entry = json.loads(line)
                    calls.setdefault(entry["call"], {}).update(entry)
    except FileNotFoundError:
        return []
    return list(calls.values())


def now() -> float:
    return round(time.time(), 3)
