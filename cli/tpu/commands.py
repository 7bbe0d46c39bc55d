"""`keeper tpu`: bootstrap, watch, cancel and release TPU slices."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from pydantic import ValidationError
from rich.console import Console
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, CancelledError, WorkflowAlreadyStartedError

from cli.context import KeeperContext, pass_keeper
from cli.temporal_ops import client_for, describe_as, is_running
from cli.tpu.progress import follow, query_status
from domain.common.untrusted import terminal_text
from domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    DeletionReport,
    SweepReport,
    SweepRequest,
    TeardownRequest,
)
from domain.tpu.naming import (
    BOOTSTRAP_WORKFLOW_TYPE,
    PROJECT_MEMO,
    TEARDOWN_WORKFLOW_TYPE,
    bootstrap_workflow_id,
    manual_sweep_workflow_id,
    teardown_workflow_id,
)
from domain.tpu.phases import DEFAULT_DEADLINES, Phase
from domain.tpu.slice_request import Capacity, SliceRequest
from domain.tpu.status_view import static_summary
from runtime.settings import Settings
from runtime.tpu import search_attributes as sa
from workflows.tpu.bootstrap import TpuSliceBootstrap
from workflows.tpu.sweeper import TpuSweeper
from workflows.tpu.teardown import TpuSliceTeardown

EXIT_FAILED = 1
EXIT_CANCELLED = 2

console = Console(stderr=True)


def _emit_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, default=str))


def _shown(value: object) -> str:
    """Outside text (GCP errors, resource and VM names, labels) as inert rich markup."""
    return terminal_text(value, markup=True)


def print_failure(message: str, url: str) -> None:
    console.print(f"[red]bootstrap failed:[/] {_shown(message)}")
    console.print(
        "Nothing is left running: compensation deleted the slice. Fix the cause "
        "(capacity, quota, the VMs' health endpoint) and run the bootstrap again."
    )
    console.print(f"History: {url}")


def validation_message(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        field = ".".join(str(p) for p in problem["loc"]) or "request"
        lines.append(f"  {field}: {problem['msg']}")
    return "invalid slice request; nothing was started:\n" + "\n".join(lines)


def parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    labels = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="--label")
        labels[key] = text
    return labels


def build_request(settings: Settings, fields: dict[str, Any]) -> SliceRequest:
    """Validates the whole request before anything is started."""
    configured = {
        Phase.ASSIGN: settings.bootstrap.assign,
        Phase.PROVISION: settings.bootstrap.provision,
        Phase.READY: settings.bootstrap.ready,
        Phase.HEALTH: settings.bootstrap.health,
    }
    # Only budgets that differ from the defaults become overrides, so the size rule for
    # ready/health still applies to a stock configuration.
    deadlines = {
        phase.value: value
        for phase, value in configured.items()
        if value != DEFAULT_DEADLINES[phase]
    }
    deadlines.update(fields.pop("deadlines", {}) or {})
    merged = {
        "project": settings.tpu.project,
        "zone": settings.tpu.zone,
        "poll_interval": settings.bootstrap.poll_interval,
        "health_port": settings.default_health_port(),
        **{k: v for k, v in fields.items() if v not in (None, (), {})},
        "deadlines": deadlines,
    }
    try:
        return SliceRequest.model_validate(merged)
    except ValidationError as err:
        raise click.ClickException(validation_message(err)) from None


async def start_bootstrap(
    client: Client, settings: Settings, request: SliceRequest
) -> WorkflowHandle[Any, BootstrapResult]:
    try:
        return await client.start_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=settings.temporal.family_queue("tpu"),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=static_summary(
                request.slice_name,
                request.accelerator_type,
                request.capacity.value,
                request.zone,
            ),
            search_attributes=sa.for_slice(request.slice_name, request.zone, Phase.SUBMIT.value),
            # Findable by the sweeper even before the workflow's first task writes it.
            memo={PROJECT_MEMO: request.project},
            result_type=BootstrapResult,
        )
    except WorkflowAlreadyStartedError:
        raise click.ClickException(
            f"a bootstrap of {request.slice_name} is already running; watch it with "
            f"`keeper tpu status {request.slice_name}` or stop it with "
            f"`keeper tpu cancel {request.slice_name}`"
        ) from None


def failure_of(err: WorkflowFailureError) -> tuple[str, BootstrapFailure | None]:
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        try:
            return cause.message, BootstrapFailure.model_validate(cause.details[0])
        except ValidationError:
            pass
    return str(cause or err), None


async def wait_and_report(
    handle: WorkflowHandle[Any, BootstrapResult], settings: Settings, as_json: bool, show: bool
) -> int:
    if show and not as_json:
        await follow(handle, console)
    url = settings.temporal.workflow_url(handle.id)
    try:
        result = await handle.result()
    except WorkflowFailureError as err:
        final = await query_status(handle)
        if isinstance(err.cause, CancelledError):
            if as_json:
                _emit_json(
                    {
                        "workflow_id": handle.id,
                        "status": "CANCELED",
                        "progress": _dump(final),
                        "ui": url,
                    }
                )
            else:
                compensation = _shown(final.compensation) if final else "?"
                console.print(f"[yellow]cancelled[/]; compensation: {compensation}")
                console.print(f"History: {url}")
            return EXIT_CANCELLED
        message, failure = failure_of(err)
        if as_json:
            _emit_json(
                {
                    "workflow_id": handle.id,
                    "status": "FAILED",
                    "error": message,
                    "failure": failure.model_dump(mode="json") if failure else None,
                    "ui": url,
                }
            )
        else:
            print_failure(message, url)
        return EXIT_FAILED
    if as_json:
        _emit_json(
            {
                "workflow_id": handle.id,
                "status": "COMPLETED",
                "result": result.model_dump(mode="json"),
                "ui": url,
            }
        )
    else:
        took = ", ".join(f"{k} {v:.0f}s" for k, v in result.phase_seconds.items())
        console.print(
            f"[green]slice {_shown(result.slice_name)} is ready[/]: {len(result.vms)} VMs healthy "
            f"({took})"
        )
        for vm in result.vms[:8]:
            console.print(f"  {_shown(vm.node)}/{vm.index} {_shown(vm.ip)}")
        if len(result.vms) > 8:
            console.print(f"  ... {len(result.vms) - 8} more (keeper tpu status --json)")
        console.print(f"History: {url}")
    return 0


async def bootstrap_handle(
    settings: Settings, slice_name: str
) -> tuple[WorkflowHandle[Any, BootstrapResult], Any]:
    """The bootstrap of `slice_name` and its description (None when there is none).

    Refuses (exit 1) when the id holds a workflow of another type.
    """
    client = await client_for(settings)
    handle = client.get_workflow_handle(
        bootstrap_workflow_id(slice_name), result_type=BootstrapResult
    )
    return handle, await describe_as(handle, BOOTSTRAP_WORKFLOW_TYPE)


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json") if model is not None else None


@click.group()
def tpu() -> None:
    """Bootstrap TPU slices and release them.

    A bootstrap is the durable workflow `tpu-bootstrap-<slice>`. It walks the phases
    assign (4h), provision (1h), ready (10m) and health (10m), each with its own deadline,
    and deletes the queued resource or node on any failure.
    """


@tpu.command()
@click.argument("slice_name")
@click.option("--accelerator-type", "-a", required=True, help="e.g. v4-32, v5litepod-16, v5p-128.")
@click.option(
    "--capacity",
    "-c",
    required=True,
    type=click.Choice([c.value for c in Capacity]),
    help="reserved, spot and guaranteed are queued; on-demand and preemptible create a node.",
)
@click.option("--reservation", "reservation_name", help="Reservation id (capacity reserved).")
@click.option(
    "--min-duration", "guaranteed_min_duration", help="Guaranteed tier minimum, e.g. 24h."
)
@click.option("--runtime-version", default="tpu-ubuntu2204-base", show_default=True)
@click.option(
    "--node-count", type=int, default=1, show_default=True, help=">1 asks for a multislice."
)
@click.option("--vms-per-node", type=int, help="Override the VMs-per-node rule for this type.")
@click.option("--project", help="GCP project (default: tpu.project in the settings).")
@click.option("--zone", help="Zone (default: tpu.zone in the settings).")
@click.option(
    "--health-port", type=int, help="Default: emulator.vm_health_port on the emulator, else 8080."
)
@click.option("--health-path", default="/health", show_default=True)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE node label; repeatable.")
@click.option("--assign-deadline", help="Override the assign budget (default 4h).")
@click.option("--provision-deadline", help="Override the provision budget (default 1h).")
@click.option(
    "--ready-deadline", help="Override the ready budget (default 10m, more for big slices)."
)
@click.option(
    "--health-deadline", help="Override the health budget (default 10m, more for big slices)."
)
@click.option("--poll-interval", help="Time between cloud reads while waiting (default 30s).")
@click.option("--wait/--no-wait", default=False, help="Follow the phases live until the end.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def bootstrap(keeper: KeeperContext, **options: Any) -> None:
    """Start the bootstrap of SLICE_NAME (also its queued-resource and node id).

    The request is validated first; nothing is created when a field is wrong. Exit codes
    with --wait: 0 ready, 1 failed (and cleaned up), 2 cancelled.
    """
    as_json = options.pop("as_json")
    wait = options.pop("wait")
    deadlines = {
        phase: options.pop(f"{phase}_deadline")
        for phase in ("assign", "provision", "ready", "health")
    }
    options["labels"] = parse_labels(options.pop("labels"))
    options["deadlines"] = {k: v for k, v in deadlines.items() if v}
    if options["node_count"] == 1:
        options.pop("node_count")
    settings = keeper.settings
    request = build_request(settings, options)
    raise SystemExit(asyncio.run(_bootstrap(settings, request, wait, as_json)))


async def _bootstrap(settings: Settings, request: SliceRequest, wait: bool, as_json: bool) -> int:
    client = await client_for(settings)
    handle = await start_bootstrap(client, settings, request)
    url = settings.temporal.workflow_url(handle.id)
    if not wait:
        if as_json:
            _emit_json({"workflow_id": handle.id, "run_id": handle.result_run_id, "ui": url})
        else:
            console.print(
                f"started {handle.id}; follow it with `keeper tpu status {request.slice_name}`"
            )
            console.print(f"History: {url}")
        return 0
    return await wait_and_report(handle, settings, as_json, show=True)


@tpu.command()
@click.option("--name", "slice_name", default=None, help="Slice name (default: demo-HHMMSS).")
@pass_keeper
def demo(keeper: KeeperContext, slice_name: str | None) -> None:
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

    async def run() -> int:
        client = await client_for(settings)
        handle = await start_bootstrap(client, settings, request)
        console.print(f"bootstrapping {name}: {settings.temporal.workflow_url(handle.id)}")
        return await wait_and_report(handle, settings, as_json=False, show=True)

    raise SystemExit(asyncio.run(run()))


@tpu.command()
@click.argument("slice_name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--wait", is_flag=True, help="Follow it live until it ends.")
@pass_keeper
def status(keeper: KeeperContext, slice_name: str, as_json: bool, wait: bool) -> None:
    """Show where the bootstrap of SLICE_NAME is: phase, deadline, QR state, VM counts."""
    settings = keeper.settings

    async def run() -> int:
        handle, description = await bootstrap_handle(settings, slice_name)
        if description is None:
            raise click.ClickException(
                f"no bootstrap of {slice_name} found in namespace {settings.temporal.namespace}; "
                f"start one with `keeper tpu bootstrap {slice_name} ...`"
            )
        if wait and is_running(description):
            return await wait_and_report(handle, settings, as_json, show=True)
        progress = await query_status(handle)
        state = description.status.name if description.status else "UNKNOWN"
        if as_json:
            payload: dict[str, Any] = {
                "workflow_id": handle.id,
                "run_id": description.run_id,
                "status": state,
                "progress": _dump(progress),
                "ui": settings.temporal.workflow_url(handle.id),
            }
            if description.status is WorkflowExecutionStatus.COMPLETED:
                payload["result"] = _dump(await handle.result())
            _emit_json(payload)
            return 0
        from cli.tpu.progress import render

        console.print(f"{handle.id}: [bold]{state}[/]")
        if progress:
            console.print(render(progress))
            if progress.compensation_stuck:
                console.print(
                    f"[red]compensation stuck[/] since {progress.compensation_stuck_since}: "
                    f"{_shown(progress.compensation)}"
                )
        console.print(f"History: {settings.temporal.workflow_url(handle.id)}")
        return 0

    raise SystemExit(asyncio.run(run()))


@tpu.command()
@click.argument("slice_name")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait for compensation.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def cancel(keeper: KeeperContext, slice_name: str, wait: bool, as_json: bool) -> None:
    """Cancel the bootstrap of SLICE_NAME; its compensation deletes what it created."""
    settings = keeper.settings

    async def run() -> int:
        handle, description = await bootstrap_handle(settings, slice_name)
        if not is_running(description):
            state = description.status.name if description and description.status else "not found"
            raise click.ClickException(
                f"no running bootstrap of {slice_name} ({state}); to release a ready slice use "
                f"`keeper tpu delete {slice_name}`"
            )
        await handle.cancel()
        if not wait:
            console.print(f"cancel requested for {handle.id}; compensation runs in the workflow")
            return 0
        return await wait_and_report(handle, settings, as_json, show=False)

    raise SystemExit(asyncio.run(run()))


@tpu.command()
@click.argument("slice_name")
@click.option("--project", help="GCP project (default: tpu.project in the settings).")
@click.option("--zone", help="Zone (default: tpu.zone in the settings).")
@click.option("--node-count", type=int, default=1, show_default=True, help="Nodes of a multislice.")
@click.option("--reason", default="operator teardown", show_default=True)
@click.option("--wait/--no-wait", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def delete(
    keeper: KeeperContext,
    slice_name: str,
    project: str | None,
    zone: str | None,
    node_count: int,
    reason: str,
    wait: bool,
    as_json: bool,
) -> None:
    """Release a ready slice through its own workflow, tpu-teardown-<slice>.

    Only resources labelled as created by tpu-bootstrap-<slice> are deleted. A bootstrap
    still running is cancelled with `keeper tpu cancel` instead.
    """
    settings = keeper.settings
    try:
        request = TeardownRequest(
            slice_name=slice_name,
            project=project or settings.tpu.project,
            zone=zone or settings.tpu.zone,
            node_count=node_count,
            reason=reason,
        )
    except ValidationError as err:
        raise click.ClickException(validation_message(err)) from None

    async def run() -> int:
        client = await client_for(settings)
        owner = client.get_workflow_handle(bootstrap_workflow_id(slice_name))
        if is_running(await describe_as(owner, BOOTSTRAP_WORKFLOW_TYPE)):
            raise click.ClickException(
                f"the bootstrap of {slice_name} is still running; stop it with "
                f"`keeper tpu cancel {slice_name}` (that deletes the slice too)"
            )
        # USE_EXISTING below would join whatever runs at the id, of any type.
        await describe_as(
            client.get_workflow_handle(teardown_workflow_id(slice_name)), TEARDOWN_WORKFLOW_TYPE
        )
        handle = await client.start_workflow(
            TpuSliceTeardown.run,
            request,
            id=teardown_workflow_id(slice_name),
            task_queue=settings.temporal.family_queue("tpu"),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=f"release TPU slice {slice_name} ({request.zone})",
            result_type=DeletionReport,
        )
        if not wait:
            console.print(f"started {handle.id}: {settings.temporal.workflow_url(handle.id)}")
            return 0
        report = await handle.result()
        if as_json:
            _emit_json({"workflow_id": handle.id, "report": report.model_dump(mode="json")})
        else:
            from workflows.tpu.compensation import describe

            console.print(f"{_shown(slice_name)}: {_shown(describe(report))}")
        return 0

    raise SystemExit(asyncio.run(run()))


@tpu.command()
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def sweep(keeper: KeeperContext, dry_run: bool, as_json: bool) -> None:
    """Run the sweeper now: delete labelled TPU resources whose owner closed unsuccessfully.

    The worker also runs it on a schedule (sweeper.interval, schedule id tpu-sweeper).
    """
    settings = keeper.settings

    async def run() -> int:
        client = await client_for(settings)
        report: SweepReport = await client.execute_workflow(
            TpuSweeper.run,
            SweepRequest(project=settings.tpu.project, zone=settings.tpu.zone, dry_run=dry_run),
            id=manual_sweep_workflow_id(f"{datetime.now(UTC):%Y%m%dT%H%M%S}"),
            task_queue=settings.temporal.family_queue("tpu"),
            result_type=SweepReport,
        )
        if as_json:
            _emit_json(report.model_dump(mode="json"))
            return 0
        verb = "would delete" if dry_run else "deleted"
        console.print(f"examined {report.examined}; {verb} {len(report.deleted)}")
        # Items name cloud resources and owners read from their labels: outside text.
        for item in report.deleted:
            console.print(f"  {verb}: {_shown(item)}")
        for item in report.unknown_owner:
            console.print(f"  [yellow]unknown owner, left alone:[/] {_shown(item)}")
        for item in report.failed:
            console.print(f"  [red]not deleted (the next sweep tries again):[/] {_shown(item)}")
        for item in report.errors:
            console.print(f"  [red]error:[/] {_shown(item)}")
        return 0

    raise SystemExit(asyncio.run(run()))
