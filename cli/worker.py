"""`keeper worker`."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import click
from pydantic import ValidationError

from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import CommandFailed, Output, UsageProblem, json_options
from keeper.domain.common.durations import format_duration
from keeper.runtime import logs
from keeper.runtime.metrics import MetricsEndpointError
from keeper.runtime.settings import FAMILY_NAMES, LogFormat, Settings, SettingsError, WorkerSettings
from keeper.runtime.settings.tpu import TpuEndpoint


@click.command()
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    help="Level of the worker's log lines on stderr.",
)
@click.option(
    "--log-format",
    default=None,
    type=click.Choice([f.value for f in LogFormat]),
    help="text, or json: one object a line with time, level, logger, message and, inside a "
    "workflow or activity, workflow_id and run_id (default worker.log_format, "
    "KEEPER_LOG_FORMAT; text).",
)
@click.option(
    "--family",
    "families",
    metavar="NAMES",
    default=None,
    help=f"Comma-separated workflow families to serve: {', '.join(FAMILY_NAMES)} "
    "(default worker.families, KEEPER_WORKER_FAMILIES; all of them).",
)
@click.option(
    "--metrics-address",
    metavar="HOST:PORT",
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (default "
    'worker.metrics_address, KEEPER_METRICS_ADDRESS; none). "" serves none. `keeper-dev up` '
    "gives its worker dev.metrics_address.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Check the settings and print what the worker would serve, then exit; connects "
    "to nothing.",
)
@json_options
@pass_keeper
def worker(
    keeper: KeeperContext,
    log_level: str,
    log_format: str | None,
    families: str | None,
    metrics_address: str | None,
    check: bool,
    out: Output,
) -> None:
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

    With worker.metrics_address (KEEPER_METRICS_ADDRESS, e.g. 0.0.0.0:9464) it serves
    Prometheus metrics at http://<address>/metrics: the SDK's temporal_* and keeper's
    keeper_* (docs/operations.md#metrics-and-logs).

    The worker logs to stderr and prints no data. `keeper worker --check [--json]` reads
    the settings and prints the plan (server, build, each family's task queue, workflows,
    activity slots and schedules) without connecting: exit 0 when the settings hold, 1
    when they do not. A setting that holds but cannot work here (tpu.endpoint: emulator in
    an install without the emulators) is a warning on stderr and in the JSON's `warnings`.
    """
    if out.json and not check:
        raise UsageProblem("only `keeper worker --check` prints JSON", "--json")

    settings = keeper.settings
    given = {"families": families, "metrics_address": metrics_address}
    overrides = {key: value for key, value in given.items() if value is not None}
    if overrides:
        try:
            settings = settings.model_copy(
                update={
                    "worker": WorkerSettings.model_validate(
                        {**settings.worker.model_dump(), **overrides}
                    )
                }
            )
        except ValidationError as err:
            error = err.errors()[0]
            problem = error["msg"].removeprefix("Value error, ")
            option = "--metrics-address" if "metrics_address" in error["loc"] else "--family"
            raise UsageProblem(problem, option) from None
    if check:
        _print_plan(worker_plan(settings), out)
        return
    from keeper.workers.main import run_worker

    logs.configure(log_level, LogFormat(log_format) if log_format else settings.worker.log_format)
    try:
        asyncio.run(run_worker(settings))
    except MetricsEndpointError as err:
        problem = str(err)
        if metrics_address is not None:
            # The address came from the option, not from the setting the error names.
            problem = problem.replace("worker.metrics_address", "--metrics-address")
        raise CommandFailed(problem) from None
    except SettingsError as err:
        # Found while opening a family's clients (a provider this install lacks, say).
        raise CommandFailed(str(err), hint="Fix the settings and restart the worker.") from None


def worker_plan(settings: Settings) -> dict[str, Any]:
    """What `keeper worker` with these settings serves, as run_worker sets it up."""
    from temporalio import workflow

    from keeper.workers.main import served_families

    families = served_families(settings)
    every_family = len(families) == len(FAMILY_NAMES)
    return {
        "status": "ok",
        "address": settings.temporal.address,
        "namespace": settings.temporal.namespace,
        "versioned": settings.worker.versioned,
        "deployment_name": settings.worker.deployment_name,
        "build_id": settings.worker.build_id,
        "tpu_endpoint": settings.tpu.endpoint.value,
        "families": [
            {
                "name": family.name,
                "task_queue": family.task_queue(settings),
                "activity_slots": family.activity_slots(settings),
                "workflows": [
                    workflow._Definition.must_from_class(cls).name for cls in family.workflows
                ],
                "schedules": [spec.schedule_id for spec in schedules],
                # The worker sets each schedule's interval at start, whatever it was.
                "schedule_intervals": {
                    spec.schedule_id: spec.schedule.spec.intervals[0].every for spec in schedules
                },
            }
            for family in families
            for schedules in [family.schedules(settings, family.task_queue(settings))]
        ],
        # Runs started before the families had queues of their own (docs/operations.md).
        "legacy_task_queue": settings.temporal.task_queue if every_family else None,
        "metrics_address": settings.worker.metrics_address or None,
        "log_format": settings.worker.log_format.value,
        # The settings hold (exit 0), but the worker would not do what they seem to ask.
        "warnings": _plan_warnings(settings, [family.name for family in families]),
    }


def _plan_warnings(settings: Settings, families: list[str]) -> list[str]:
    warnings = []
    if (
        "tpu" in families
        and settings.tpu.endpoint is TpuEndpoint.EMULATOR
        and not _tpu_emulator_here()
    ):
        # The default endpoint, in an installed wheel: nothing of keeper's serves that
        # address, and the worker would find out only at a bootstrap's first call.
        others = ",".join(name for name in FAMILY_NAMES if name != "tpu")
        warnings.append(
            "tpu.endpoint is emulator, but this installation has no TPU emulator (it runs "
            "from keeper's checkout, `keeper-dev up`, not from the wheel): the TPU family would "
            f"call {settings.tpu.emulator_address} (tpu.emulator_address). For Cloud TPU set "
            f"tpu.endpoint: gcp (KEEPER_TPU_ENDPOINT=gcp); without TPUs, --family {others}"
        )
    return warnings


def _tpu_emulator_here() -> bool:
    """Whether keeper's TPU emulator is importable here: in a checkout (emulators/ on the
    path), not in an installed wheel. Only looked up, never imported."""
    try:
        return importlib.util.find_spec("emulators.tpu") is not None
    except ModuleNotFoundError:
        # find_spec imports the parent package first; without `emulators` that fails.
        return False


def _print_plan(plan: dict[str, Any], out: Output) -> None:
    for warning in plan["warnings"]:
        out.note(f"warning: {warning}")
    if out.json:
        out.data(plan)
        return
    build = (
        f"build {plan['build_id']} of worker deployment {plan['deployment_name']}"
        if plan["versioned"]
        else "unversioned"
    )
    out.line(f"worker settings ok: {plan['address']} namespace {plan['namespace']}, {build}")
    for family in plan["families"]:
        out.line(
            f"  {family['name']:<8} queue {family['task_queue']}, "
            f"{family['activity_slots']} activity slots, "
            f"workflows {', '.join(family['workflows'])}"
            + "".join(
                f", schedule {schedule} every {format_duration(every)} (set at start)"
                for schedule, every in family["schedule_intervals"].items()
            )
        )
    if plan["legacy_task_queue"]:
        out.line(f"  also drains {plan['legacy_task_queue']} (runs from before family queues)")
    if plan["metrics_address"]:
        out.line(f"  metrics on http://{plan['metrics_address']}/metrics")
