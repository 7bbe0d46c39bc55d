"""The runner family's settings: its store, GitHub, the GARM provider, the deletion policy."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field

from keeper.domain.common.durations import HumanDuration
from keeper.domain.runners.github import DEFAULT_MAX_RETRY_AFTER_S
from keeper.domain.runners.models import DeletionPolicy
from keeper.domain.runners.provider import DEFAULT_LEASE_MARGIN
from keeper.runtime.settings.base import SCHEDULE_MIN_INTERVAL, Section


class GitHubSettings(Section):
    # The GitHub emulator by default (derived from emulator.host and emulator.github_port
    # when unset); https://api.github.com (or GHES) in production.
    api_url: str = "http://127.0.0.1:8472"
    # The token comes from KEEPER_GITHUB_TOKEN or this file, never from a workflow payload.
    token_file: Path | None = Path(".dev/github-token")
    timeout: HumanDuration = timedelta(seconds=10)
    # The longest wait GitHub's retry-after (or a rate-limit reset) may impose on a retry.
    max_retry_after: HumanDuration = Field(
        default=timedelta(seconds=DEFAULT_MAX_RETRY_AFTER_S), gt=timedelta(0)
    )
    # The reconciler removes only registrations that carry this label and have no record.
    managed_label: str = "keeper-managed"
    # Scopes the reconciler lists: "repo:owner/name", "org:name" or "enterprise:slug".
    scopes: list[str] = Field(default_factory=list)


class ProviderSettings(Section):
    """A GARM external-provider executable and its config file."""

    # Unset: keeper's emulated provider (emulators/provider), for the local stack and tests.
    executable: Path | None = None
    config_file: Path = Path(".dev/provider/config.json")
    controller_id: str = "keeper"
    # How long an instance's lease outlives its provider call's timeout, so a retry on
    # another host never runs beside a straggler (runtime/runners/instance_lease.py).
    lease_margin: HumanDuration = Field(default=DEFAULT_LEASE_MARGIN, ge=timedelta(0))


class RunnerSettings(Section):
    # sqlite:///path (embedded, WAL) or postgresql://user@host:5432/db for several hosts.
    store_url: str = "sqlite:///.dev/runners.db"
    github: GitHubSettings = Field(default_factory=GitHubSettings)
    provider: ProviderSettings = Field(default_factory=ProviderSettings)
    deletion: DeletionPolicy = Field(default_factory=DeletionPolicy)
    reconcile_interval: HumanDuration = Field(
        default=timedelta(minutes=5), ge=SCHEDULE_MIN_INTERVAL
    )
    tombstone_retention: HumanDuration = timedelta(days=7)
    # Deletion workflows in flight at once per worker; each provider call is a process.
    max_concurrent_deletions: int = Field(default=200, ge=1, le=5000)
