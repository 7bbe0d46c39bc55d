"""State shared by every `keeper` subcommand: where the settings come from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from keeper.cli.output import CommandFailed
from keeper.runtime.settings_file import config_path

if TYPE_CHECKING:
    from keeper.runtime.settings import Settings

# The global flags and the variables they stand for: a flag wins over the variable, which
# wins over the settings file.
FLAG_VARIABLES = {"--address": "TEMPORAL_ADDRESS", "--namespace": "TEMPORAL_NAMESPACE"}


@dataclass
class KeeperContext:
    config_file: str | None = None
    # `keeper --address/--namespace`: temporal.address / temporal.namespace for this run.
    address: str | None = None
    namespace: str | None = None
    _settings: Settings | None = field(default=None, repr=False)

    def overrides(self) -> dict[str, str]:
        """The environment variables the global flags set."""
        given = {"--address": self.address, "--namespace": self.namespace}
        return {FLAG_VARIABLES[flag]: value for flag, value in given.items() if value}

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment the settings are read from: `base` with the flags on top."""
        return {**(os.environ if base is None else base), **self.overrides()}

    def export_overrides(self) -> None:
        """Puts the flags into this process's environment, so the processes keeper starts
        (the worker of `keeper-dev up`) talk to the same server as keeper itself."""
        os.environ.update(self.overrides())

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            # Imported here: parsing the settings needs pydantic and every family's models,
            # which `keeper --help` and completion do not.
            from keeper.runtime.settings import SettingsError, load_settings

            env = self.environment()
            try:
                self._settings = load_settings(self.config_file, env=env)
            except SettingsError as err:
                # pydantic's "Value error, " prefix says nothing to an operator.
                problem = str(err).replace("Value error, ", "")
                for flag, var in FLAG_VARIABLES.items():
                    if var in self.overrides():
                        # The flag put the value there; the variable is how keeper passes it on.
                        problem = problem.replace(f"({var})", f"({flag})")
                raise CommandFailed(
                    f"invalid settings: {problem}",
                    hint=self._settings_hint(problem, env),
                    config_file=str(config_path(self.config_file, env)),
                ) from None
        return self._settings

    def _settings_hint(self, problem: str, env: Mapping[str, str]) -> str:
        """Where the wrong value came from: a flag, a variable, or else the file."""
        from keeper.runtime.settings import ENV_OVERRIDES

        file = config_path(self.config_file, env)
        if "no such config file" in problem:
            return "Give an existing file with --config or KEEPER_CONFIG, or neither."
        flags = {var: flag for flag, var in FLAG_VARIABLES.items()}

        def label(var: str) -> str:
            return flags[var] if var in self.overrides() else var

        def source(var: str) -> str:
            return flags[var] if var in self.overrides() else f"the variable {var}"

        # A value whose source the problem names ("temporal.address gives port 1 (--address)
        # but dev.port_base ...") is the one at fault: the port base it contradicts was set
        # for the whole stack, the flag or variable for this value alone.
        named = [
            source(var)
            for var in (*FLAG_VARIABLES.values(), *ENV_OVERRIDES)
            if env.get(var) and f"({label(var)})" in problem
        ]
        if named:
            return f"Fix {' and '.join(dict.fromkeys(named))} and retry."
        overriding = [
            source(var)
            for var, dotted in ENV_OVERRIDES.items()
            if env.get(var) and dotted in problem
        ]
        if overriding:
            return f"Fix {' and '.join(overriding)} (it overrides {file}) and retry."
        return f"Fix {file} and retry (settings and their variables: docs/cli.md#settings)."


pass_keeper = click.make_pass_decorator(KeeperContext)


def current_keeper() -> KeeperContext | None:
    """The KeeperContext of the command running now (None outside one), for the helpers
    that need the global flags without being handed them."""
    context = click.get_current_context(silent=True)
    return context.find_object(KeeperContext) if context is not None else None
