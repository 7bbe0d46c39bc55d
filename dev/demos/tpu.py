"""`keeper-dev demo tpu`: bootstrap a small reserved slice on the local stack, against the TPU
emulator's demo scenarios, and follow it to READY (or through a failure and its
compensation) with the live progress view of `keeper tpu bootstrap --follow`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import Output, exits, json_options
from keeper.cli.tpu.commands import start_bootstrap, wait_and_report
from keeper.cli.tpu.params import SLICE_NAME, build_request


@click.command()
@click.option(
    "--name", "slice_name", default=None, type=SLICE_NAME, help="Slice name (default: demo-HHMMSS)."
)
@json_options
@pass_keeper
@exits
async def demo(keeper: KeeperContext, out: Output, slice_name: str | None) -> int:
    """Bootstrap a small reserved demo slice on the local stack and watch it go READY.

    Uses the emulator's demo scenarios (emulators/scenarios/demo.yaml). Name the slice
    demo-stockout (the queue fails), demo-unhealthy or demo-no-ip (a 10-minute deadline)
    to watch a failure and its compensation.
    """
    settings = keeper.settings
    name = slice_name or f"demo-{datetime.now(UTC):%H%M%S}"
    request = build_request(
        settings,
        {
            "slice_name": name,
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-ubuntu2204-base",
            "capacity": "reserved",
            "reservation_name": "demo-reservation",
            "poll_interval": timedelta(seconds=2),
            "labels": {"purpose": "demo"},
        },
    )
    client = await client_for(settings)
    handle = await start_bootstrap(client, settings, request)
    out.note(
        f"bootstrapping {name}: {settings.temporal.workflow_url(handle.id, handle.result_run_id)}"
    )
    return await wait_and_report(handle, settings, out, show=True, slice_name=name)
