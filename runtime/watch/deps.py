"""The clients the job-watch family uses, built from settings in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.secret_source import from_env_or_file
from runtime.settings import WatchSettings
from runtime.watch.credentials import TOKEN_ENV, IrisToken
from runtime.watch.iris_client import IrisController


@dataclass
class WatchDeps:
    """The watch's notifications go through the shared alert channel (runtime/alerts.py),
    which reads the webhook URL; nothing here holds it."""

    settings: WatchSettings
    iris: IrisController

    async def aclose(self) -> None:
        await self.iris.aclose()


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
