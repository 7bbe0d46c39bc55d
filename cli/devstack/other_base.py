"""What to say when nothing answers where the settings point: the usual reason on a developer's
machine is a stack `keeper dev up` started on another port base, and this shell without it."""

from __future__ import annotations

import os
from pathlib import Path

from keeper.cli.context import current_keeper
from keeper.cli.devstack.layout import stack_record_file
from keeper.cli.devstack.procs import StackRecord
from keeper.runtime.dev_ports import PORT_BASE_ENV
from keeper.runtime.settings import Settings, config_path


def recorded_stack(settings: Settings, config_file: str | None = None) -> StackRecord | None:
    """The record `keeper dev up` left in the run dir of these settings, if any.

    Its relative paths are taken from the settings file's directory, as `keeper dev` takes
    them, so a command run beside temporal-dev.yaml finds the stack started there."""
    file = config_path(config_file, os.environ)
    home = file.resolve().parent if file.is_file() else Path.cwd()
    db_file = settings.temporal.db_file.expanduser()
    if not db_file.is_absolute():
        db_file = home / db_file
    moved = settings.temporal.model_copy(update={"db_file": db_file})
    return StackRecord.load(stack_record_file(settings.model_copy(update={"temporal": moved})))


def other_base_advice(settings: Settings, config_file: str | None = None) -> str:
    """One sentence on reaching a stack on another port base, naming the base when the
    stack recorded here has one other than these settings'."""
    if config_file is None:
        keeper = current_keeper()
        config_file = keeper.config_file if keeper is not None else None
    record = recorded_stack(settings, config_file)
    ours = settings.dev.port_base
    if record is not None and record.port_base != ours:
        if record.port_base is not None:
            return (
                f"`keeper dev up` started the stack here on port base {record.port_base}: "
                f"export {PORT_BASE_ENV}={record.port_base} (or set dev.port_base: "
                f"{record.port_base}) to reach it"
            )
        return (
            f"`keeper dev up` started the stack here without a port base: unset {PORT_BASE_ENV}"
            " (and dev.port_base) to reach it"
        )
    return f"a stack on another port base: set {PORT_BASE_ENV} (or dev.port_base) to its base"
