"""The clients the job-watch family uses, built from settings in one place."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from keeper.runtime.secret_source import from_env_or_file
from keeper.runtime.settings.watch import WatchSettings
from keeper.runtime.watch.credentials import TOKEN_ENV, IrisToken
from keeper.runtime.watch.iris_client import IrisController
from keeper.store.watch import LaunchStore, open_launch_store


@dataclass
class WatchDeps:
    """The watch's notifications go through the shared alert channel (runtime/alerts.py),
    which reads the webhook URL; nothing here holds it."""

    settings: WatchSettings
    iris: IrisController
    _launches: LaunchStore | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def launches(self) -> LaunchStore:
        """keeper's launch store (watch.store_url), opened at first use: only a restart of
        a job launched with secrets needs it, so a worker starts without it."""
        with self._lock:
            if self._launches is None:
                self._launches = open_launch_store(self.settings.store_url)
            return self._launches

    async def aclose(self) -> None:
        await self.iris.aclose()
        if self._launches is not None:
            self._launches.close()


def iris_token(settings: WatchSettings, env: Mapping[str, str] | None = None) -> IrisToken:
    """KEEPER_IRIS_TOKEN wins over watch.token_file; with neither, calls go anonymous."""
    return from_env_or_file(IrisToken, TOKEN_ENV, settings.token_file, env)


def iris_controller(settings: WatchSettings, token: IrisToken | None = None) -> IrisController:
    """The controller client the worker and the CLI both use."""
    return IrisController(
        settings.controller_url,
        token=token if token is not None else iris_token(settings),
        timeout=settings.call_timeout.total_seconds(),
    )


def open_watch_deps(settings: WatchSettings) -> WatchDeps:
    return WatchDeps(settings=settings, iris=iris_controller(settings))
