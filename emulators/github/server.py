"""GitHubEmulator: the REST endpoints and the control API on one aiohttp server.

Usable in-process (start/stop on the caller's event loop) or as its own process through
`serve` (python -m emulators.github).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from emulators.control_json import error_middleware
from emulators.faults import FaultBook
from emulators.github import api, control
from emulators.github.api import EMULATOR_KEY
from emulators.github.state import (
    DEFAULT_LABELS,
    Fault,
    RequestLog,
    RunnerBook,
    RunnerStatus,
)
from emulators.lifecycle import Served, start_site, until_stop_signal

log = logging.getLogger("emulators.github")

DEFAULT_TOKEN = "keeper-emulator-token"
DEFAULT_PORT = 8472


class GitHubEmulator(Served):
    def __init__(self, token: str = DEFAULT_TOKEN) -> None:
        if not token:
            raise ValueError("token must not be empty")
        self.token = token
        self.runners = RunnerBook()
        self.faults: FaultBook[Fault] = FaultBook("times")
        self.log = RequestLog()
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    def __repr__(self) -> str:
        return f"GitHubEmulator(url={self._url!r})"

    # ------------------------------------------------------------- lifecycle

    def make_app(self) -> web.Application:
        # The API's own answers are GitHub's; only control calls answer {"error": ...}.
        control_errors = error_middleware({KeyError: 404}, prefix=control.PREFIX)
        app = web.Application(middlewares=[api.record_requests, control_errors])
        app[EMULATOR_KEY] = self
        # Control routes first: the API's catch-all answers GitHub's 404 for anything else.
        app.add_routes(control.routes())
        app.add_routes(api.routes())
        app.add_routes([web.route("*", "/{tail:.*}", api.not_found)])
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on host:port (0 picks a free port) and return the base URL."""
        if self._runner is not None:
            raise RuntimeError(f"emulator already serving on {self._url}")
        self._runner, bound = await start_site(self.make_app(), host, port)
        shown = f"[{host}]" if ":" in host else host
        self._url = f"http://{shown}:{bound}"
        log.info("GitHub emulator: serving on %s", self._url)
        return self._url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._url = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("emulator not started")
        return self._url

    # ------------------------------------------------------------- driving it

    def add_runner(
        self,
        scope: str,
        name: str,
        *,
        labels: Sequence[str] = DEFAULT_LABELS,
        status: RunnerStatus = "online",
        busy: bool = False,
        os: str = "Linux",
    ) -> int:
        """Register a runner in scope ("repo:acme/api", "org:acme", "enterprise:slug")."""
        runner = self.runners.add(scope, name, labels=labels, status=status, busy=busy, os=os)
        return runner.id

    def runner(self, runner_id: int) -> dict[str, Any]:
        """The runner's state; KeyError when there is none."""
        return self.runners.get(runner_id).to_json()

    def set_busy(self, runner_id: int, busy: bool = True) -> None:
        # A runner that stays busy makes every DELETE answer 422, like a job that never ends.
        self.runners.get(runner_id).busy = busy

    def set_status(self, runner_id: int, status: RunnerStatus) -> None:
        if status not in ("online", "offline"):
            raise ValueError(f"invalid field status: {status!r} is not 'online' or 'offline'")
        self.runners.get(runner_id).status = status

    def set_gone(self, runner_id: int) -> None:
        """Remove the runner without an API call, as GitHub does with stale runners."""
        self.runners.remove(runner_id)

    def inject(
        self,
        status: int,
        *,
        scope: str | None = None,
        runner_id: int | None = None,
        times: int = 1,
        retry_after: float | None = None,
        rate_limited: bool = False,
        message: str | None = None,
        method: str = "DELETE",
    ) -> Fault:
        """The next `times` matching requests answer `status`; faults are used in FIFO order.

        See docs/github-emulator.md for the bodies and headers each status gets.
        """
        fault = Fault.model_validate(
            {
                "status": status,
                "scope": scope,
                "runner_id": runner_id,
                "times": times,
                "retry_after": retry_after,
                "rate_limited": rate_limited,
                "message": message,
                "method": method,
            }
        )
        self.faults.add(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def reset(self) -> None:
        """Forget every runner, fault and logged request; ids start from 1000 again."""
        self.runners.clear()
        self.faults.clear()
        self.log.clear()

    # ------------------------------------------------------------- inspection

    @property
    def requests(self) -> list[dict[str, Any]]:
        """GitHub API requests so far: method, path, query, status, at (epoch seconds)."""
        return [dict(entry) for entry in self.log.entries]

    def state(self) -> dict[str, Any]:
        return {
            "url": self._url,
            "runners": self.runners.to_json(),
            "next_id": self.runners.next_id,
            "faults": self.faults.to_json(),
            "requests": self.requests,
        }


async def _serve_until_signal(host: str, port: int, token: str) -> None:
    emulator = GitHubEmulator(token)
    url = await emulator.start(host, port)
    # A parent process that asked for port 0 reads the address from this line.
    print(f"GitHub emulator serving on {url}", flush=True)
    try:
        await until_stop_signal()
        log.info("GitHub emulator: stopping")
    finally:
        await emulator.stop()


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str = DEFAULT_TOKEN) -> None:
    """Serve until SIGTERM/SIGINT (blocking)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        # The control API has no auth, so anything but loopback hands the emulator to the LAN.
        print(f"warning: GitHub emulator control API is unauthenticated on {host}", file=sys.stderr)
    asyncio.run(_serve_until_signal(host, port, token))
