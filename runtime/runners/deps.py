"""The clients the runner deletion's activities use, built from settings in one place."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta

from pydantic import SecretStr

from keeper.domain.runners.provider import DEFAULT_LEASE_MARGIN
from keeper.runtime.runners.garm_provider import ExternalProvider
from keeper.runtime.runners.github_client import TOKEN_ENV, GitHubClient, load_github_token
from keeper.runtime.runners.instance_lease import InstanceLeases
from keeper.runtime.settings import SettingsError
from keeper.runtime.settings.runners import RunnerSettings
from keeper.store import RunnerStore, open_store

log = logging.getLogger("keeper.runners")


@dataclass
class RunnerDeps:
    store: RunnerStore
    github: GitHubClient
    provider: ExternalProvider
    lease_margin: timedelta = DEFAULT_LEASE_MARGIN
    # Where the GitHub token was read from, for an answer that refuses it (never the token).
    github_token_source: str | None = None

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


def github_token_source(settings: RunnerSettings, env: dict[str, str] | None = None) -> str:
    """Where the worker's GitHub token comes from, named for an operator who must fix it."""
    env = dict(os.environ) if env is None else env
    token_file = settings.github.token_file
    if env.get(TOKEN_ENV, "").strip():
        return f"{TOKEN_ENV} (set in the worker's environment)"
    if token_file is None:
        return f"{TOKEN_ENV} or runners.github.token_file (neither is set, so none is sent)"
    if not token_file.exists():
        return (
            f"{TOKEN_ENV} or runners.github.token_file ({token_file}, which does not exist, "
            "so none is sent)"
        )
    return f"runners.github.token_file ({token_file}), unless {TOKEN_ENV} is set"


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
        github_token_source=github_token_source(settings),
    )


def make_provider(settings: RunnerSettings) -> ExternalProvider:
    executable, extra_env = settings.provider.executable, None
    if executable is None:
        try:
            from emulators.provider import WRAPPER, launcher_env
        except ModuleNotFoundError:
            # A wheel install: the emulated provider stays in keeper's checkout.
            raise SettingsError(
                "runners.provider.executable is unset and keeper's emulated provider "
                "(emulators.provider) is not installed here: set it (KEEPER_PROVIDER_EXECUTABLE) "
                "to a GARM external provider, or leave the runners family out "
                "(keeper worker --family, KEEPER_WORKER_FAMILIES)"
            ) from None
        executable, extra_env = WRAPPER, launcher_env()
    return ExternalProvider(
        executable,
        settings.provider.config_file,
        settings.provider.controller_id,
        extra_env=extra_env,
    )
