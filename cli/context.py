"""State shared by every `keeper` subcommand: where the settings come from."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from runtime.settings import Settings, SettingsError, load_settings


@dataclass
class KeeperContext:
    config_file: str | None = None
    _settings: Settings | None = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            try:
                self._settings = load_settings(self.config_file)
            except SettingsError as err:
                message = f"{err}\nFix the file or the variable and retry."
                raise click.ClickException(message) from None
        return self._settings


pass_keeper = click.make_pass_decorator(KeeperContext)
