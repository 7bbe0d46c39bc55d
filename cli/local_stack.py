"""What keeper's commands know of the local development stack that `keeper-dev up` runs from a
checkout (dev/): where it records the settings it was started with, and what to say when
nothing answers where the settings point. The usual reason on a developer's machine is a
stack started on another port base, and this shell without it. keeper never imports dev/, so
the record's format lives here, and dev/ writes it through this module."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from keeper.cli.context import current_keeper
from keeper.runtime.dev_ports import PORT_BASE_ENV
from keeper.runtime.settings import Settings, config_path

STACK_RECORD = "stack.json"


def run_dir(settings: Settings) -> Path:
    """Pid files live in `run/` beside the dev database (`.dev/run` by default)."""
    return settings.temporal.db_file.parent / "run"


def stack_record_file(settings: Settings) -> Path:
    """Where `keeper-dev up` records the settings the running stack was started with."""
    return run_dir(settings) / STACK_RECORD


@dataclass(frozen=True)
class StackRecord:
    """What `keeper-dev up` was started with, in `<run dir>/stack.json`: `status` and `down`
    given no settings of their own read the running stack's, not the defaults."""

    config_file: str | None  # absolute, or None for ./temporal-dev.yaml and the defaults
    port_base: int | None
    cwd: str
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def dump(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    def describe(self) -> str:
        parts = [f"--config {self.config_file}"] if self.config_file else []
        if self.port_base is not None:
            parts.append(f"--port-base {self.port_base}")
        return " ".join(parts) or "the default settings"

    @classmethod
    def load(cls, path: Path) -> StackRecord | None:
        """The record in `path`; None when there is none or it is unreadable."""
        try:
            data = json.loads(path.read_text())
            base = data.get("port_base")
            return cls(
                config_file=str(data["config_file"]) if data.get("config_file") else None,
                port_base=int(base) if base is not None else None,
                cwd=str(data.get("cwd", "")),
                started_at=str(data.get("started_at", "")),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def recorded_stack(settings: Settings, config_file: str | None = None) -> StackRecord | None:
    """The record `keeper-dev up` left in the run dir of these settings, if any.

    Its relative paths are taken from the settings file's directory, as `keeper-dev` takes
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
                f"`keeper-dev up` started the stack here on port base {record.port_base}: "
                f"export {PORT_BASE_ENV}={record.port_base} (or set dev.port_base: "
                f"{record.port_base}) to reach it"
            )
        return (
            f"`keeper-dev up` started the stack here without a port base: unset {PORT_BASE_ENV}"
            " (and dev.port_base) to reach it"
        )
    return f"a stack on another port base: set {PORT_BASE_ENV} (or dev.port_base) to its base"
