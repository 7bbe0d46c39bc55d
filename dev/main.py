"""The `keeper-dev` command: `make venv` writes .venv/bin/keeper-dev, which runs `main`, as
`python -m dev` does.

It takes `keeper`'s global options (--config, --address, --namespace, --json / -o,
--version) with the same meaning, and reports errors, interrupts and exit codes as `keeper`
does (cli/main.py's `run`), so a command moved here from `keeper` behaves as it did there."""

from __future__ import annotations

import click

from dev.demos import demo
from dev.emulator import emulator
from dev.stack_commands import down, status, up
from keeper.cli.main import cli, leave
from keeper.cli.main import run as run_group

PROG_NAME = "keeper-dev"
# What click's completion scripts set to ask `keeper-dev` for candidates.
COMPLETE_VAR = "_KEEPER_DEV_COMPLETE"

HELP = """Run keeper's local stack from its checkout, script the emulators, run the demos.

The stack is a Temporal dev server, the emulators, the reclaim tap and a worker.

\b
  keeper-dev up        start whatever is not running yet and wait until it is healthy
  keeper-dev status    show each component (exit 3 when one is not healthy)
  keeper-dev down      stop what `up` started
  keeper-dev emulator  script the TPU, spur and iris emulators
  keeper-dev demo      tpu, runner, reclaim or job: a family's workflow on the stack

Everything comes from the settings file (--config, else ./temporal-dev.yaml, else the
checkout's temporal-dev.yaml) and the environment on top of it. The stack lives beside
that file: relative paths in it are taken from its directory, whatever directory
`keeper-dev` runs in. Each component runs detached in its own process group, in that
directory, logs to <worker.log_dir>/<component>.log (default .dev/logs/) and is
tracked by a pid file in run/ next to temporal.db_file (default .dev/run/).

With --json, `up`, `down` and `status` print the status report (`keeper-dev status
--help`) on stdout and their progress lines on stderr.

\b
Exit codes as `keeper`'s: 0 success, 1 the operation failed, 2 usage error, 130
interrupted; `keeper-dev status` exits 3 when the stack is not healthy.
"""

# keeper's own global options and the callback that applies them: the settings, the
# Temporal overrides and JSON mode mean here what they mean to `keeper`.
keeper_dev = click.Group(
    name=PROG_NAME,
    params=list(cli.params),
    callback=cli.callback,
    help=HELP,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    commands=[up, down, status, emulator, demo],
)


def run(args: list[str] | None = None) -> int:
    """Runs one `keeper-dev` command line and returns its exit code."""
    return run_group(args, group=keeper_dev, prog_name=PROG_NAME, complete_var=COMPLETE_VAR)


def main() -> None:
    leave(run())
