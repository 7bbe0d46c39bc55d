"""About keeper itself: `keeper --version` and `keeper completion SHELL`."""

from __future__ import annotations

import platform

import click
from click.shell_completion import get_completion_class

from keeper.cli.context import KeeperContext
from keeper.cli.output import CommandFailed, Output, json_options, json_requested

PROG_NAME = "keeper"
# What click's completion scripts set to ask `keeper` for candidates.
COMPLETE_VAR = "_KEEPER_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def _version(package: str) -> str:
    from importlib import metadata  # the email package with it: only --version needs it

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def print_version(keeper: KeeperContext) -> None:
    """`keeper --version`: the package version and the build id a worker polls as.

    The settings are parsed only when they name the build (runtime/settings_file.py):
    otherwise it is the package's own whatever else they say, and the answer needs neither
    pydantic nor any family's models."""
    from keeper.runtime.settings_file import (
        DEFAULT_DEPLOYMENT,
        DISTRIBUTION,
        build_identity_is_default,
        package_build_id,
    )

    out = Output(json_requested())
    build_id, deployment = package_build_id(), DEFAULT_DEPLOYMENT
    if not build_identity_is_default(keeper.config_file, keeper.environment()):
        try:
            worker = keeper.settings.worker
            build_id, deployment = worker.build_id, worker.deployment_name
        except CommandFailed as err:
            # The version is still worth knowing; the build id then is the package's own.
            out.note(f"warning: {err.message}; showing the package's build id")
    about = {
        "version": _version(DISTRIBUTION),
        "build_id": build_id,
        "deployment_name": deployment,
        "temporalio": _version("temporalio"),
        "python": platform.python_version(),
    }
    if out.json:
        out.data(about)
    else:
        out.line(
            f"keeper {about['version']} (build {build_id}, deployment {deployment}; "
            f"temporalio {about['temporalio']}, Python {about['python']})"
        )


@click.command()
@click.argument("shell", type=click.Choice(SHELLS), metavar="SHELL")
@json_options
@click.pass_context
def completion(ctx: click.Context, shell: str, out: Output) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish).

    \b
    Load it in the current shell, or install it once:
      bash  source <(keeper completion bash)      # or add that line to ~/.bashrc
      zsh   source <(keeper completion zsh)       # or add that line to ~/.zshrc
      fish  keeper completion fish > ~/.config/fish/completions/keeper.fish

    The script calls `keeper` for the candidates, so keeper must be on PATH
    (`source .venv/bin/activate` in a checkout). Commands, options, choices such as
    `--capacity` values, and file names complete.
    """
    completer = get_completion_class(shell)
    if completer is None:  # click knows every shell offered above
        raise CommandFailed(f"click has no completion for {shell}")
    script = completer(ctx.find_root().command, {}, PROG_NAME, COMPLETE_VAR).source()
    if out.json:
        out.data({"shell": shell, "script": script})
    else:
        out.line(script.rstrip("\n"))
