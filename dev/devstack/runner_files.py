"""Files the local runner stack needs before it starts: the GitHub token the emulator and
the worker share, and the emulated provider's config. Created once, never overwritten."""

from __future__ import annotations

import os
import secrets

from dev.devstack.layout import github_emulator_serves, github_token_file
from keeper.runtime.settings import Settings


def prepare_runner_files(settings: Settings) -> None:
    if github_emulator_serves(settings):
        token_file = github_token_file(settings)
        if not token_file.exists():
            token_file.parent.mkdir(parents=True, exist_ok=True)
            # Created with 0600 from the start, so the token is never readable by others.
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"ghp_keeperdev_{secrets.token_hex(16)}\n")
    provider = settings.runners.provider
    if provider.executable is None and not provider.config_file.exists():
        from emulators.provider.state import write_config

        write_config(provider.config_file)
