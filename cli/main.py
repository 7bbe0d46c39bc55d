"""The `keeper` command."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import NoReturn

import click
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.admin import admin
from keeper.cli.context import KeeperContext
from keeper.cli.meta import COMPLETE_VAR, PROG_NAME, completion, print_version
from keeper.cli.output import (
    FAILED,
    INTERRUPTED,
    OK,
    CommandFailed,
    forget_running,
    format_options,
    report_error,
    report_interrupt,
    use_json,
)
from keeper.cli.reclaim.commands import reclaim
from keeper.cli.runners.commands import runner
from keeper.cli.tpu.commands import tpu
from keeper.cli.watch.commands import job
from keeper.cli.worker import worker


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    invoke_without_command=True,
)
@click.option(
    "--config",
    "config_file",
    envvar="KEEPER_CONFIG",
    type=click.Path(dir_okay=False),
    default=None,
    help="Settings file (default: ./temporal-dev.yaml, or KEEPER_CONFIG). Environment "
    "variables override it.",
)
@click.option(
    "--address",
    metavar="HOST:PORT",
    default=None,
    help="Temporal frontend for this command: overrides temporal.address and TEMPORAL_ADDRESS.",
)
@click.option(
    "--namespace",
    metavar="NAME",
    default=None,
    help="Temporal namespace for this command: overrides temporal.namespace and "
    "TEMPORAL_NAMESPACE.",
)
@format_options(
    "Every command prints one JSON document.",
    "Output format of every command (`-o json` is `--json`).",
)
@click.option(
    "--version",
    "show_version",
    is_flag=True,
    help="Print keeper's version and the worker build id, then exit (with --json: as JSON).",
)
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: str | None,
    address: str | None,
    namespace: str | None,
    as_json: bool,
    output_format: str | None,
    show_version: bool,
) -> None:
    """keeper runs cloud-resource lifecycles as durable Temporal workflows.

    Every workflow owns one resource from request to release and compensates on every
    failure path. Run `keeper worker`, then start with `keeper tpu bootstrap --help`
    (in a checkout, `keeper-dev up` runs a local stack to try it on).

    \b
    Exit codes: 0 success, 1 the operation failed, 2 usage error, 130 interrupted.
    Data goes to stdout, progress and errors to stderr. Conventions: docs/cli.md.
    """
    if address is not None:
        _check_address(address)
    if namespace is not None and (not namespace.strip() or any(c.isspace() for c in namespace)):
        raise click.BadParameter(f"{namespace!r} is not a namespace name", param_hint="--namespace")
    use_json(as_json or output_format == "json")
    keeper = KeeperContext(config_file=config_file, address=address, namespace=namespace)
    keeper.export_overrides()
    ctx.obj = keeper
    if show_version:
        print_version(keeper)
        ctx.exit(OK)
    if ctx.invoked_subcommand is None:
        # Like `temporal` and `kubectl`: the bare command shows its help.
        click.echo(ctx.get_help())
        ctx.exit(OK)


def _check_address(address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or any(c.isspace() for c in address) or not port.isdigit():
        raise click.BadParameter(f"{address!r} is not HOST:PORT", param_hint="--address")
    if not 0 < int(port) < 65536:
        raise click.BadParameter(f"port {port} is not between 1 and 65535", param_hint="--address")


cli.add_command(admin)
cli.add_command(completion)
cli.add_command(job)
cli.add_command(reclaim)
cli.add_command(runner)
cli.add_command(tpu)
cli.add_command(worker)


def run(
    args: list[str] | None = None,
    *,
    group: click.Group = cli,
    prog_name: str = PROG_NAME,
    complete_var: str = COMPLETE_VAR,
) -> int:
    """Runs one command line and returns its exit code (docs/cli.md#exit-codes).

    `group` is `keeper`, or the checkout's `keeper-dev` (dev/), which keeps the same
    conventions: the same errors, interrupts and exit codes."""
    forget_running()
    try:
        returned = group.main(
            args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False
        )
        return returned if isinstance(returned, int) else OK
    except click.exceptions.NoArgsIsHelpError as err:
        # A group without its subcommand: its help is what was asked for.
        click.echo(err.ctx.get_help())
        return OK
    except click.ClickException as err:
        report_error(err)
        return err.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt):
        # A workflow the command started or followed goes on: say so, and how to reach it.
        report_interrupt()
        return INTERRUPTED
    except SystemExit as done:
        return _exit_code(done.code)
    except RPCError as err:
        if err.status not in _LOST_SERVER:
            return _internal_error(err)
        # The server went away after the command connected: the SDK retried the call for
        # about 10 s first. An operation that failed, not a bug.
        report_error(
            CommandFailed(
                f"Temporal stopped answering ({err.status.name}): {err.message}",
                hint="Check the server (`keeper-dev status` for a checkout's local stack) and run "
                "the command again once it answers.",
            )
        )
        return FAILED
    except Exception as err:  # a bug: show where, keep the exit code a documented one
        return _internal_error(err)


# What a server that is down or restarting answers once the SDK's retries ran out.
_LOST_SERVER = {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED}


def _internal_error(err: Exception) -> int:
    traceback.print_exc()
    report_error(
        CommandFailed(
            f"internal error: {type(err).__name__}: {err}",
            hint="This is a bug in keeper; the traceback above shows where.",
        )
    )
    return FAILED


def _exit_code(code: object) -> int:
    if code is None:
        return OK
    if isinstance(code, int):
        return code
    # `SystemExit("message")`: a failure in words; shown like any other.
    report_error(CommandFailed(str(code)))
    return FAILED


def main() -> None:
    leave(run())


def leave(code: int) -> NoReturn:
    """Exits with `code` once output and spans are flushed."""
    # Leave without interpreter finalisation: the Temporal SDK's core threads can abort a
    # finalising interpreter ("PyGILState_Release ... must be current"), which would turn
    # a successful command into exit code -6. Spans and output are flushed first.
    from keeper.runtime.tracing import shutdown_tracing

    shutdown_tracing()
    # `keeper ... | head`: the reader left; there is nothing more to say to it.
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
