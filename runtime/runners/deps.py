"""The clients the runner deletion's activities use, built from settings in one place."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta

from pydantic import SecretStr

from domain.runners.provider import DEFAULT_LEASE_MARGIN
from runtime.runners.garm_provider import ExternalProvider
from runtime.runners.github_client import GitHubClient, load_github_token
from runtime.runners.instance_lease import InstanceLeases
from runtime.settings import RunnerSettings
from store import RunnerStore, open_store

log = logging.getLogger("keeper.runners")


@dataclass
class RunnerDeps:
    store: RunnerStore
    github: GitHubClient
    provider: ExternalProvider
    lease_margin: timedelta = DEFAULT_LEASE_MARGIN

    @property
    def leases(self) -> InstanceLeases:
        """The provider's instance leases, in the runner store every worker host shares."""
        return InstanceLeases(self.store, margin=self.lease_margin)

    async def aclose(self) -> None:
        await self.github.aclose()
        self.store.close()


def github_token(settings: RunnerSettings) -> SecretStr:
    """KEEPER_GITHUB_TOKEN, else the token file. With neither, calls go out unauthenticated
    and GitHub's 401 shows in each deletion's details, which says what to fix. A token that
    cannot be sent (two lines, a control character) is refused here, naming its source."""
    token_file = settings.github.token_file
    if token_file is not None and not token_file.exists():
        log.warning(
            "GitHub token file %s not found; set KEEPER_GITHUB_TOKEN or create it", token_file
        )
        token_file = None
    return load_github_token(os.environ, token_file) or SecretStr("")


def open_runner_deps(settings: RunnerSettings) -> RunnerDeps:
    token = github_token(settings)
    return RunnerDeps(
        store=open_store(settings.store_url),
        github=GitHubClient(
            settings.github.api_url,
            token,
            timeout=settings.github.timeout.total_seconds(),
            max_retry_after=settings.github.max_retry_after.total_seconds(),
        ),
        provider=make_provider(settings),
        lease_margin=settings.provider.lease_margin,
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
