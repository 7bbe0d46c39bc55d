"""The emulators (emulators/) come with keeper's checkout, not with its wheel: the commands
that run or seed them say so, in the CLI's words, instead of failing on an import."""

from __future__ import annotations

import importlib.util

from keeper.cli.output import CommandFailed

CHECKOUT_HINT = (
    "The emulators ship with keeper's source, not with the keeper wheel: clone the keeper "
    "repository and run `make venv` there (or `pip install -e '.[dev]'` and put the checkout "
    "on the path), then run this command from that virtualenv."
)


def emulator_installed(module: str) -> bool:
    """Whether `module` (emulators.tpu, emulators.provider, ...) can be imported here."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        # find_spec imports the parent package first; without `emulators` that fails.
        return False


def require_emulator(module: str, needed_by: str) -> None:
    """Raises CommandFailed (exit 1) naming what is missing when `module` is not installed."""
    if not emulator_installed(module):
        raise CommandFailed(
            f"{needed_by} needs keeper's emulator {module}, which this installation does not "
            "include",
            hint=CHECKOUT_HINT,
        )
