"""`keeper worker`."""

from __future__ import annotations

import asyncio
import logging

import click
from pydantic import ValidationError

from cli.context import KeeperContext, pass_keeper
from runtime.settings import FAMILY_NAMES, WorkerSettings


@click.command()
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
)
@click.option(
    "--family",
    "families",
    metavar="NAMES",
    default=None,
    help=f"Comma-separated workflow families to serve: {', '.join(FAMILY_NAMES)} "
    "(default worker.families, KEEPER_WORKER_FAMILIES; all of them).",
)
@pass_keeper
def worker(keeper: KeeperContext, log_level: str, families: str | None) -> None:
    """Run the worker: the workflows and activities of the families it serves.

    Connects to settings.temporal (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
    TEMPORAL_TLS_* override the file). Each family runs on its own task queue,
    <temporal.task_queue>-<family> (keeper-tpu, keeper-runners), with its own activity
    slots, and keeps its schedules (tpu: the sweeper; runners: the reconciler). A family
    that is not served opens none of its clients and creates none of its schedules. A
    worker that serves every family also drains temporal.task_queue itself, where runs
    started before the families had queues of their own live. SIGTERM or Ctrl-C stops
    polling and lets running activities finish.

    \b
    It polls as build worker.build_id (KEEPER_BUILD_ID; default the package version and a
    fingerprint of the workflow code) of the Worker Deployment worker.deployment_name
    (default keeper), and receives tasks once that version is current or ramping:
      temporal worker deployment set-current-version --deployment-name keeper --build-id B
    Give each release a new build id, such as its image tag. worker.versioned: false
    (KEEPER_WORKER_VERSIONED=false) runs unversioned. Rollouts: docs/operations.md.
    """
    from workers.main import run_worker

    settings = keeper.settings
    if families is not None:
        try:
            settings = settings.model_copy(
                update={
                    "worker": WorkerSettings.model_validate(
                        {**settings.worker.model_dump(), "families": families}
                    )
                }
            )
        except ValidationError as err:
            raise click.BadParameter(err.errors()[0]["msg"], param_hint="--family") from None
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run_worker(settings))
