"""The clients the runner deletion's activities use, built from settings in one place."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from pydantic import SecretStr

from runtime.garm_provider import ExternalProvider
from runtime.github_client import GitHubClient, load_github_token
from runtime.settings import RunnerSettings
from store import RunnerStore, open_store

log = logging.getLogger("keeper.runners")


@dataclass
class RunnerDeps:
    store: RunnerStore
    github: GitHubClient
    provider: ExternalProvider

    async def aclose(self) -> None:
        await self.github.aclose()
        self.store.close()


def github_token(settings: RunnerSettings) -> SecretStr:
    """KEEPER_GITHUB_TOKEN, else the token file. With neither, calls go out unauthenticated
    and GitHub's 401 shows in each deletion's details, which says what to fix."""
    token_file = settings.github.token_file
    if token_file is not None and not token_file.exists():
        log.warning(
            "GitHub token file %s not found; set KEEPER_GITHUB_TOKEN or create it", token_file
        )
        token_file = None
    return load_github_token(os.environ, token_file) or SecretStr("")


def open_runner_deps(settings: RunnerSettings) -> RunnerDeps:
    return RunnerDeps(
        store=open_store(settings.store_url),
        github=GitHubClient(
            settings.github.api_url,
            github_token(settings),
            timeout=settings.github.timeout.total_seconds(),
        ),
        provider=make_provider(settings),
    )


def make_provider(settings: RunnerSettings) -> ExternalProvider:
    if settings.provider.executable is None:
        from emulators.provider import WRAPPER, launcher_env

        return ExternalProvider(
            WRAPPER,
            settings.provider.config_file,
            settings.provider.controller_id,
            extra_env=launcher_env(),
        )
    return ExternalProvider(
        settings.provider.executable,
        settings.provider.config_file,
        settings.provider.controller_id,
    )
