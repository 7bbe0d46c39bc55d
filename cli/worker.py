"""`keeper worker`."""

from __future__ import annotations

import asyncio
import logging

import click

from cli.context import KeeperContext, pass_keeper


@click.command()
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@pass_keeper
def worker(keeper: KeeperContext, log_level: str) -> None:
    """Run the worker: every keeper workflow and activity in one process.

    Connects to settings.temporal (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
    TEMPORAL_TLS_* override the file), polls its task queue, and creates the sweeper
    schedule if it does not exist. SIGTERM or Ctrl-C stops polling and lets running
    activities finish.

    \b
    It polls as build worker.build_id (KEEPER_BUILD_ID; default the package version and a
    fingerprint of the workflow code) of the Worker Deployment worker.deployment_name
    (default keeper), and receives tasks once that version is current or ramping:
      temporal worker deployment set-current-version --deployment-name keeper --build-id B
    Give each release a new build id, such as its image tag. worker.versioned: false
    (KEEPER_WORKER_VERSIONED=false) runs unversioned. Rollouts: docs/operations.md.
    """
    from workers.main import run_worker

    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run_worker(keeper.settings))
