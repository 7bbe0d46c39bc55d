"""The `keeper` command."""

from __future__ import annotations

import os
import sys

import click

from cli.context import KeeperContext
from cli.dev import dev
from cli.emulator import emulator
from cli.output import INTERRUPTED, OK, report_error
from cli.runners.commands import runner
from cli.runners.demo import demo as _runner_demo  # noqa: F401 - registers `runner demo`
from cli.tpu.commands import tpu
from cli.worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    envvar="KEEPER_CONFIG",
    type=click.Path(dir_okay=False),
    default=None,
    help="Settings file (default: ./temporal-dev.yaml). Environment variables override it.",
)
@click.pass_context
def cli(ctx: click.Context, config_file: str | None) -> None:
    """keeper runs cloud-resource lifecycles as durable Temporal workflows.

    Every workflow owns one resource from request to release and compensates on every
    failure path. Start with `keeper dev up`, then `keeper tpu bootstrap --help`.
    """
    ctx.obj = KeeperContext(config_file=config_file)


cli.add_command(dev)
cli.add_command(emulator)
cli.add_command(runner)
cli.add_command(tpu)
cli.add_command(worker)


def main() -> None:
    try:
        returned = cli.main(standalone_mode=False)
        code: int | str | None = returned if isinstance(returned, int) else OK
    except click.ClickException as err:
        report_error(err)
        code = err.exit_code
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        code = INTERRUPTED
    except SystemExit as done:
        code = done.code
    # Leave without interpreter finalisation: the Temporal SDK's core threads can abort a
    # finalising interpreter ("PyGILState_Release ... must be current"), which would turn
    # a successful command into exit code -6. Spans and output are flushed first.
    from runtime.tracing import shutdown_tracing

    shutdown_tracing()
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(code, str):
        print(code, file=sys.stderr, flush=True)
        code = 1
    os._exit(code or 0)


if __name__ == "__main__":
    main()
