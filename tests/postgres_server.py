"""A throwaway PostgreSQL server for the store tests, from the machine's own binaries.

`make test` installs Debian's `postgresql` package when no server binaries are found, and
sets KEEPER_REQUIRE_POSTGRES=1 so a missing server fails the run instead of skipping.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path


def find_pg_bin() -> Path | None:
    """The newest server's bin directory: Debian keeps it off PATH."""
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if candidates:
        return Path(candidates[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """initdb + postgres on a free loopback port, trust auth, no fsync: a test server."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="keeper-pg-"))
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        # initdb refuses to run as root; Debian's package creates a `postgres` user.
        self.run_as: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError as exc:
                raise RuntimeError("running as root needs the 'postgres' user") from exc
            self.run_as = "postgres"

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *args]
        return list(args)

    def start(self) -> None:
        data = self.root / "data"
        data.mkdir()
        if self.run_as:
            shutil.chown(self.root, self.run_as)
            shutil.chown(data, self.run_as)
        subprocess.run(
            self._cmd(
                str(self.bin_dir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "keeper",
                "--no-sync",
                "-E",
                "UTF8",
            ),
            check=True,
            capture_output=True,
        )
        log = open(self.root / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
        self.proc = subprocess.Popen(
            self._cmd(
                str(self.bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.root),
                "-F",
                "-c",
                "max_connections=200",
                "-c",
                "full_page_writes=off",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"postgres exited: {(self.root / 'server.log').read_text()[-2000:]}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                time.sleep(0.2)  # accepting TCP can precede accepting logins by a moment
                return
            time.sleep(0.1)
        raise RuntimeError("postgres did not start in 30 s")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://keeper@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer | None]:
    bin_dir = find_pg_bin()
    if bin_dir is None:
        yield None
        return
    server = PostgresServer(bin_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
