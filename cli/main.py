"""The `keeper` command."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import NoReturn

import click

from keeper.cli.context import KeeperContext
from keeper.cli.lazy import Lazy, LazyGroup
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

# keeper's subcommands, imported only when one runs (cli/lazy.py): where each lives, its
# one-line help and, for a group, its subcommands' (tests/common/test_cli_startup.py holds
# them to the commands' own). `completion` is cli/meta.py's, loaded with this module.
COMMANDS = {
    "admin": Lazy(
        "keeper.cli.admin:admin",
        "Set up a Temporal namespace for keeper (once per namespace, before the workers).",
        {
            "register-search-attributes": "Register every search attribute keeper's "
            "workflows set, in temporal.namespace.",
            "set-current-version": "Make a build of the worker deployment current: Temporal "
            "sends it the tasks.",
        },
    ),
    "job": Lazy(
        "keeper.cli.watch.commands:job",
        "Watch long iris/zephyr jobs: liveness verdicts with evidence, and proposals to stop "
        "or restart that wait for an operator.",
        {
            "approve": "Approve a proposal of the watch of JOB_ID: PROPOSAL is its id "
            "(restart-1) or its kind (stop, restart) when exactly one pending proposal has it.",
            "deny": "Deny a proposal of the watch of JOB_ID: PROPOSAL is its id (restart-1) or "
            "its kind (stop, restart) when exactly one pending proposal has it.",
            "list": "List the job watches (running ones unless --all): job, job state, "
            "verdict, status, started.",
            "run": "Launch CMD as an iris job (LaunchJob at watch.controller_url) and watch it "
            "from the start, as `keeper job watch` does.",
            "status": "Show what the watch of JOB_ID knows: phase, job state, verdict and its "
            "evidence, the attempt judged, progress, stale coordinators, escalations, the "
            "pending proposals with the commands that answer them, and the last timeline "
            "entries.",
            "unwatch": "Stop watching JOB_ID: the watch is cancelled and this waits for it to "
            "close.",
            "watch": "Start watching JOB_ID, an iris job id (/<user>/<job>).",
        },
    ),
    "reclaim": Lazy(
        "keeper.cli.reclaim.commands:reclaim",
        "Release what spur agents hold for jobs the controller has moved on from.",
        {
            "list": "List the reclaims in flight: node, job, step, verdict, and what each did "
            "or (in observe mode) would do.",
            "release": "Vouch that NODE's agent no longer holds JOB: its reclaim ends, lifts "
            "keeper's drain, and answers how it ended.",
            "report": "Report that NODE holds JOB...: decided like a heartbeat, and a reclaim "
            "started for each stale one.",
            "status": "Show the reclaim of JOB on NODE: step, verdict, the controller view it "
            "last read, evidence, cancels sent, drain.",
            "tap": "Run the heartbeat tap in the foreground: agents dial reclaim.tap_address "
            "as their controller; every RPC is forwarded to reclaim.controller_address "
            "unchanged, and what agents report holding goes to the intake (and "
            "reclaim.intake_address's POST /report).",
        },
    ),
    "runner": Lazy(
        "keeper.cli.runners.commands:runner",
        "Delete CI runners through their one durable deletion workflow; read the runner store.",
        {
            "delete": "Delete runner NAME: start its deletion workflow, or join the one that runs.",
            "list": "Runners with their status and lane, and per scale set the live count "
            "(what autoscaling counts: pending_create, creating, running, stopped, error) and "
            "the deletion lane (never counted).",
            "report": "Record what runner NAME's agent reported.",
            "status": "Runner NAME: its record, its status history (audit), and its deletion "
            "workflow, with the next try of any call Temporal retries for it (when, and why).",
        },
    ),
    "tpu": Lazy(
        "keeper.cli.tpu.commands:tpu",
        "Bootstrap TPU slices and release them.",
        {
            "bootstrap": "Start the bootstrap of SLICE_NAME (also its queued-resource and node "
            "id).",
            "cancel": "Cancel the bootstrap of SLICE_NAME; its compensation deletes what it "
            "created.",
            "delete": "Release a ready slice through its own workflow, tpu-teardown-<slice>.",
            "list": "List the slices keeper knows (their bootstraps), newest first.",
            "status": "Show where SLICE_NAME is: phase, deadline, QR state, VM counts, and its "
            "release.",
            "sweep": "Run the sweeper now: delete labelled TPU resources whose owner closed "
            "unsuccessfully.",
        },
    ),
    "worker": Lazy(
        "keeper.cli.worker:worker",
        "Run the worker: the workflows and activities of the families it serves.",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
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


cli.add_command(completion)


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
    except Exception as err:
        lost = _lost_server(err)
        if lost is None:  # a bug: show where, keep the exit code a documented one
            return _internal_error(err)
        # The server went away after the command connected: the SDK retried the call for
        # about 10 s first. An operation that failed, not a bug.
        report_error(
            CommandFailed(
                f"Temporal stopped answering ({lost[0]}): {lost[1]}",
                hint="Check the server (`keeper-dev status` for a checkout's local stack) and run "
                "the command again once it answers.",
            )
        )
        return FAILED


# What a server that is down or restarting answers once the SDK's retries ran out.
_LOST_SERVER = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def _lost_server(err: Exception) -> tuple[str, str] | None:
    """The status name and message of an RPCError that says the server is gone, else None.

    The Temporal SDK is not imported for this: an RPCError can only have been raised by a
    command that loaded it, so a process without temporalio.service has none."""
    service = sys.modules.get("temporalio.service")
    if service is None or not isinstance(err, service.RPCError):
        return None
    return (err.status.name, err.message) if err.status.name in _LOST_SERVER else None


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
    # Tracing is installed only by a command that imported it (a connecting one); any other
    # leaves without loading it, and OpenTelemetry and the SDK with it.
    tracing = sys.modules.get("keeper.runtime.tracing")
    if tracing is not None:
        tracing.shutdown_tracing()
    # `keeper ... | head`: the reader left; there is nothing more to say to it.
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
