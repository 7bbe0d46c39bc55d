"""Detached processes tracked by pid files, and who holds a TCP port."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from keeper.cli.local_stack import StackRecord

_PROC = Path("/proc")


@dataclass(frozen=True)
class PidRecord:
    """What `keeper-dev up` writes to `<run dir>/<component>.pid`."""

    pid: int
    argv: list[str]
    cwd: str
    log_file: str
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def dump(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def load(cls, path: Path) -> PidRecord | None:
        """The record in `path`; None when there is none or it is unreadable."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            return cls(
                pid=int(data["pid"]),
                argv=[str(a) for a in data.get("argv", [])],
                cwd=str(data.get("cwd", "")),
                log_file=str(data.get("log_file", "")),
                started_at=str(data.get("started_at", "")),
            )
        except (ValueError, KeyError, TypeError):
            # A bare pid (written by hand or by an older keeper) is still honoured.
            with contextlib.suppress(ValueError):
                return cls(pid=int(text.strip()), argv=[], cwd="", log_file="")
            return None


def write_pid_file(path: Path, record: PidRecord | StackRecord) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(record.dump())
    tmp.replace(path)


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return True  # no /proc (macOS): kill(0) is all we can know
    # The state letter follows the parenthesised command name, which may contain spaces.
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def process_cmdline(pid: int) -> list[str] | None:
    """The argv of `pid`, or None where /proc does not tell."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_ours(record: PidRecord) -> bool:
    """Whether `record.pid` is still the process `keeper-dev up` started (not a reused pid)."""
    if not pid_alive(record.pid):
        return False
    if not record.argv:
        return True
    cmdline = process_cmdline(record.pid)
    return cmdline is None or cmdline == record.argv


def spawn_detached(
    argv: Sequence[str], log_file: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Starts `argv` in its own session (so its own process group), output to `log_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    # The previous run's log stays as `<name>.1`, so a restart does not lose a crash report.
    if log_file.exists() and log_file.stat().st_size > 0:
        log_file.replace(log_file.with_name(log_file.name + ".1"))
    with log_file.open("ab") as log:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def _group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = [e for e in os.listdir(_PROC) if e.isdigit()]
    except OSError:
        return True  # no /proc: killpg(0) is all we can know
    for entry in entries:
        try:
            stat = (_PROC / entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        # fields: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


@dataclass(frozen=True)
class StopResult:
    killed: bool  # True when SIGTERM was not enough
    seconds: float


def stop_group(pid: int, grace: float) -> StopResult:
    """SIGTERM to the process group led by `pid`, SIGKILL after `grace` seconds.

    `keeper-dev up` starts every component as a session leader, so its pgid is its pid and
    its children (if any) are in the same group.
    """
    started = time.monotonic()

    def leader_or_group_alive() -> bool:
        return pid_alive(pid) or _group_alive(pid)

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    while time.monotonic() - started < grace:
        if not leader_or_group_alive():
            return StopResult(killed=False, seconds=time.monotonic() - started)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return StopResult(killed=True, seconds=time.monotonic() - started)


@contextlib.contextmanager
def exclusive(lock_file: Path, on_wait: Callable[[], None]) -> Iterator[None]:
    """Serialises `keeper-dev up`/`down` runs that share a run directory."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def tail(path: Path, lines: int = 20) -> list[str]:
    """The last `lines` lines of a text file; empty when it does not exist."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-lines:]


# -- ports -----------------------------------------------------------------------------


def _bind_host(host: str) -> tuple[int, str]:
    host = host.strip("[]")
    if host in ("localhost", ""):
        return socket.AF_INET, "127.0.0.1"
    if ":" in host:
        return socket.AF_INET6, host
    return socket.AF_INET, host


def port_problem(host: str, port: int) -> str | None:
    """None when `host:port` can be listened on; otherwise why not."""
    family, bind_host = _bind_host(host)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError as err:
            return err.strerror or str(err)
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = LISTEN
                continue
            with contextlib.suppress(ValueError):
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def process_cwd(pid: int) -> Path | None:
    """The working directory of `pid`, where /proc tells (a dev stack's components run in
    the stack's home)."""
    try:
        return Path(os.readlink(_PROC / str(pid) / "cwd"))
    except OSError:
        return None


def port_holder(port: int) -> tuple[int, str] | None:
    """(pid, command line) of the process listening on `port`, where /proc can tell."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not wanted:
        return None
    try:
        pids = [entry for entry in os.listdir(_PROC) if entry.isdigit()]
    except OSError:
        return None
    for pid in pids:
        fd_dir = _PROC / pid / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if target in wanted:
                cmdline = process_cmdline(int(pid)) or []
                return int(pid), " ".join(cmdline)[:120]
    return None
