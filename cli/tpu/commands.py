"""`keeper tpu`: bootstrap, list, watch, cancel and release TPU slices.

Every command follows cli/output.py: data on stdout (text, or one JSON document with
`--json` / `-o json`), the live view and notes on stderr, exit 0 / 1 (failed, including a
failed or cancelled bootstrap that was waited for, or an unknown slice) / 2 (a bad argument).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from rich.console import Console
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.client import WorkflowExecutionStatus as Status
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import (
    FAILED,
    CommandFailed,
    Output,
    error_document,
    exits,
    json_options,
    rfc3339,
    table,
    workflow_keeps_running,
)
from keeper.cli.tpu.lookup import SliceWorkflows, phase_child, released_after, slice_workflows
from keeper.cli.tpu.params import (
    DURATION,
    SLICE_NAME,
    build_request,
    parse_labels,
    request_problem,
)
from keeper.cli.tpu.progress import look, query_status, render
from keeper.cli.tpu.sweeping import orphan_name, scheduled_sweep, unfinished
from keeper.cli.workflow_view import (
    CLOSED_WORDS,
    closed_status,
    ending,
    follow_option,
    is_running,
    latest_runs,
    list_query,
    result_of,
    status_name,
)
from keeper.cli.workflow_view import follow as follow_workflow
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    BootstrapStatus,
    DeletionReport,
    SweepReport,
    SweepRequest,
    TeardownRequest,
)
from keeper.domain.tpu.naming import (
    BOOTSTRAP_WORKFLOW_TYPE,
    PROJECT_MEMO,
    SWEEPER_WORKFLOW_TYPE,
    TEARDOWN_WORKFLOW_TYPE,
    bootstrap_workflow_id,
    manual_sweep_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.tpu.outcome import (
    FINAL_PHASES,
    cleanup_summary,
    closed_view,
    deletion_summary,
    left_running,
    next_step,
    slice_is_over,
    slice_state,
)
from keeper.domain.tpu.phases import DEFAULT_DEADLINES, Phase, default_budget_text, plan_text
from keeper.domain.tpu.slice_request import Capacity, SliceRequest
from keeper.domain.tpu.status_view import static_summary
from keeper.runtime.settings import Settings
from keeper.runtime.tpu import search_attributes as sa

F = TypeVar("F", bound=Callable[..., Any])
# The live view, notes and a failure's text: diagnostics, never data.
console = Console(stderr=True)


def print_failure(message: str, url: str, cleanup: str | None = None, left: bool = True) -> None:
    """A failed bootstrap on stderr: what happened, what compensation did, what next."""
    # Unwrapped: a log keeps each statement on its line, however long.
    lines = [f"[red]bootstrap failed:[/] {terminal_text(message, markup=True)}"]
    if cleanup is not None:
        lines.append(f"Compensation: {terminal_text(cleanup, markup=True)}.")
    if not left:
        lines.append("Nothing of this bootstrap is left running.")
    lines.append(
        "Fix the cause (capacity, quota, the VMs' health endpoint) and run the bootstrap again."
    )
    lines.append(f"Its details in the Temporal UI: {url}")
    for text in lines:
        console.print(text, soft_wrap=True)


def _handle_fields(
    settings: Settings, handle: WorkflowHandle[Any, Any], run_id: str | None
) -> dict[str, Any]:
    return {
        "workflow_id": handle.id,
        "run_id": run_id,
        "ui_url": settings.temporal.workflow_url(handle.id, run_id),
    }


async def start_bootstrap(
    client: Client, settings: Settings, request: SliceRequest
) -> WorkflowHandle[Any, BootstrapResult]:
    found = await slice_workflows(client, request.slice_name)
    if found.live:
        raise CommandFailed(
            f"slice {request.slice_name} is live: its bootstrap completed and it has not been "
            "released, so a new bootstrap of that name is refused",
            hint=f"Release it first with `keeper tpu delete {request.slice_name}`, "
            "or choose another slice name.",
            workflow_id=found.bootstrap.id,
            status=found.bootstrap_status,
        )
    try:
        return await client.start_workflow(
            BOOTSTRAP_WORKFLOW_TYPE,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=settings.temporal.family_queue("tpu"),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=static_summary(
                request.slice_name, request.accelerator_type, request.capacity.value, request.zone
            ),
            search_attributes=sa.for_slice(request.slice_name, request.zone, Phase.SUBMIT.value),
            # Findable by the sweeper even before the workflow's first task writes it.
            memo={PROJECT_MEMO: request.project},
            result_type=BootstrapResult,
        )
    except WorkflowAlreadyStartedError:
        raise CommandFailed(
            f"a bootstrap of {request.slice_name} is already running",
            hint=f"Watch it with `keeper tpu status {request.slice_name}` or stop it with "
            f"`keeper tpu cancel {request.slice_name}`.",
        ) from None


@dataclass(frozen=True)
class _Failed:
    # The failure's own message: the workflow's error text ends with "; compensation: ...",
    # which the CLI shows once, on a line of its own.
    message: str
    failure: BootstrapFailure | None
    cleanup: str  # what compensation did (older payloads carry only the report)
    left: bool  # whether something of the bootstrap may still run


def failure_of(err: WorkflowFailureError) -> _Failed:
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.details:
        try:
            failure = BootstrapFailure.model_validate(cause.details[0])
        except ValidationError:
            pass
        else:
            cleanup = failure.cleanup or cleanup_summary(failure.compensation, kind=failure.kind)
            left = left_running(failure.compensation, failure.kind)
            return _Failed(failure.message, failure, cleanup, left)
    unknown = "unknown (the failure carries no report; see the history)"
    return _Failed(str(cause or err), None, unknown, True)


async def bootstrap_error(
    err: WorkflowFailureError,
    handle: WorkflowHandle[Any, BootstrapResult],
    fields: dict[str, Any],
    slice_name: str,
) -> CommandFailed:
    """How a command that waited for a bootstrap reports one that did not complete."""
    closed = closed_status(err)
    if closed == "CANCELED":
        final = await query_status(handle)
        cleanup = final.compensation if final and final.compensation else "unknown"
        return CommandFailed(
            f"the bootstrap of slice {slice_name} was cancelled; "
            f"compensation: {terminal_text(cleanup)}",
            hint=f"Its details in the Temporal UI: {fields['ui_url']}",
            **fields,
            slice=slice_name,
            status="CANCELED",
            cleanup=cleanup,
            progress=final,
        )
    if closed != "FAILED":
        # A close Temporal imposed: the bootstrap ran none of its code, its compensation
        # included.
        return CommandFailed(
            f"the bootstrap of slice {slice_name} was {CLOSED_WORDS[closed]} before it ended; "
            "it deleted nothing itself (its phase workflow, cancelled with it, may have)",
            hint=f"`keeper tpu status {slice_name}` shows what it left and who deleted what; "
            f"the sweeper deletes what is left on its next pass, `keeper tpu sweep` now.",
            **fields,
            slice=slice_name,
            status=closed,
        )
    failed = failure_of(err)
    return CommandFailed(
        f"bootstrap failed: {terminal_text(failed.message)}",
        hint=f"Compensation: {terminal_text(failed.cleanup)}.",
        **fields,
        status="FAILED",
        cleanup=failed.cleanup,
        failure=failed.failure,
    )


def _bootstrap_keeps_running(
    handle: WorkflowHandle[Any, Any], slice_name: str, run_id: str | None
) -> None:
    """A Ctrl-C from now on says the bootstrap goes on, and how to follow or cancel it."""
    workflow_keeps_running(
        f"the bootstrap {handle.id} keeps running",
        handle.id,
        follow=f"keeper tpu status {slice_name} --follow",
        cancel=f"keeper tpu cancel {slice_name}",
        run_id=run_id,
    )


async def wait_and_report(
    handle: WorkflowHandle[Any, BootstrapResult],
    settings: Settings,
    out: Output,
    show: bool,
    run_id: str | None = None,
    *,
    slice_name: str,
) -> int:
    """Waits for the bootstrap; 0 when the slice is ready, otherwise raises (exit 1)."""
    run_id = run_id or handle.result_run_id
    _bootstrap_keeps_running(handle, slice_name, run_id)
    if show:
        await follow_workflow(handle, look(handle), console=console, note=out.note)
    fields = _handle_fields(settings, handle, run_id)
    try:
        result: BootstrapResult = await result_of(handle, out.note)
    except WorkflowFailureError as err:
        if out.json or closed_status(err) != "FAILED":
            raise await bootstrap_error(err, handle, fields, slice_name) from None
        failed = failure_of(err)
        print_failure(failed.message, fields["ui_url"], failed.cleanup, failed.left)
        return FAILED
    if out.json:
        out.data({**fields, "status": "COMPLETED", "result": result})
        return 0
    took = ", ".join(f"{k} {v:.0f}s" for k, v in result.phase_seconds.items())
    out.line(
        f"slice {terminal_text(result.slice_name)} is ready: {len(result.vms)} VMs healthy ({took})"
    )
    for vm in result.vms[:8]:
        out.line(f"  {terminal_text(vm.node)}/{vm.index} {terminal_text(vm.ip)}")
    if len(result.vms) > 8:
        out.line(f"  ... {len(result.vms) - 8} more (keeper tpu status --json)")
    out.note(f"UI: {fields['ui_url']}")
    return 0


def deadline_options(func: F) -> F:
    """`--<phase>-deadline` for each budgeted phase, in the phases' order, from their table."""
    for phase in reversed(DEFAULT_DEADLINES):
        func = click.option(
            f"--{phase.value}-deadline",
            type=DURATION,
            help=f"Override the {phase.value} budget (default {default_budget_text(phase)}).",
        )(func)
    return func


@click.group(
    help=f"""Bootstrap TPU slices and release them.

    A bootstrap is the durable workflow `tpu-bootstrap-<slice>`. It walks the phases
    {plan_text()}, each with its own deadline, and deletes the queued resource or node on
    any failure. `keeper tpu list` shows the slices keeper knows.
    """
)
def tpu() -> None:
    pass


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
    "--min-duration",
    "guaranteed_min_duration",
    type=DURATION,
    help="Guaranteed tier minimum, e.g. 24h.",
)
@click.option(
    "--runtime-version",
    default="tpu-ubuntu2204-base",
    show_default=True,
    help="The TPU VM software version (runtime) the nodes boot.",
)
@click.option(
    "--node-count", type=int, default=1, show_default=True, help=">1 asks for a multislice."
)
@click.option("--vms-per-node", type=int, help="Override the VMs-per-node rule for this type.")
@click.option("--project", help="GCP project (default: tpu.project in the settings).")
@click.option("--zone", help="Zone (default: tpu.zone in the settings).")
@click.option(
    "--health-port", type=int, help="Default: emulator.vm_health_port on the emulator, else 8080."
)
@click.option(
    "--health-path",
    default="/health",
    show_default=True,
    help="HTTP path each VM answers 200 on once healthy.",
)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE node label; repeatable.")
@deadline_options
@click.option(
    "--poll-interval",
    type=DURATION,
    help="Time between cloud reads while waiting (default: bootstrap.poll_interval, 30s).",
)
@follow_option("Follow the phases live until the end.", negatable=True)
@json_options
@pass_keeper
@exits
async def bootstrap(keeper: KeeperContext, out: Output, **options: Any) -> int:
    """Start the bootstrap of SLICE_NAME (also its queued-resource and node id).

    The request is validated first; nothing is created when a field is wrong (exit 2). A
    slice that is live (bootstrapped and not released) is refused (exit 1). Exit codes with
    --follow: 0 ready, 1 failed or cancelled (and cleaned up).
    """
    follow = options.pop("follow")
    deadlines = {phase.value: options.pop(f"{phase.value}_deadline") for phase in DEFAULT_DEADLINES}
    options["labels"] = parse_labels(options.pop("labels"))
    options["deadlines"] = {k: v for k, v in deadlines.items() if v}
    if options["node_count"] == 1:
        options.pop("node_count")
    settings = keeper.settings
    request = build_request(settings, options)
    client = await client_for(settings)
    handle = await start_bootstrap(client, settings, request)
    fields = _handle_fields(settings, handle, handle.result_run_id)
    if not follow:
        if out.json:
            out.data({**fields, "status": "RUNNING"})
        else:
            out.line(handle.id)
            out.note(f"started; follow it with `keeper tpu status {request.slice_name} --follow`")
            out.note(f"UI: {fields['ui_url']}")
        return 0
    return await wait_and_report(handle, settings, out, show=True, slice_name=request.slice_name)


async def _known_slice(settings: Settings, slice_name: str) -> tuple[Client, SliceWorkflows]:
    """The slice's workflows; refused (exit 1) when keeper has no bootstrap of that name."""
    client = await client_for(settings)
    found = await slice_workflows(client, slice_name)
    if not found.exists:
        raise CommandFailed(
            f"no slice named {slice_name}: keeper has no bootstrap "
            f"{bootstrap_workflow_id(slice_name)} in namespace {settings.temporal.namespace}",
            hint="List the slices keeper knows with `keeper tpu list`.",
            slice=slice_name,
        )
    return client, found


async def _teardown_view(found: SliceWorkflows) -> dict[str, Any] | None:
    if found.teardown_description is None:
        return None
    view: dict[str, Any] = {
        "workflow_id": found.teardown.id,
        "run_id": found.teardown_description.run_id,
        "status": found.teardown_status,
        "started_at": found.teardown_description.start_time,
        "closed_at": found.teardown_description.close_time,
    }
    if found.teardown_status == "COMPLETED":
        report = await found.teardown.result()
        view["result"] = report
        view["summary"] = deletion_summary(report)
    elif found.teardown_status == "RUNNING":
        view["summary"] = "deleting"
    elif found.teardown_status == "CANCELED":
        view["summary"] = "cancelled after its delete finished"
    elif (error := (await ending(found.teardown)).reason) is not None:
        view["error"] = error
        view["summary"] = f"{found.teardown_status}: {error}"
    else:
        view["summary"] = str(found.teardown_status)
    return view


def _released_view(progress: BootstrapStatus, teardown: dict[str, Any] | None) -> BootstrapStatus:
    """A released slice's last bootstrap status no longer describes the cloud."""
    if teardown is None or teardown["status"] in (None, "RUNNING"):
        return progress
    return progress.model_copy(
        update={"qr_state": "deleted" if progress.qr_state else None, "nodes_ready": 0}
    )


async def slice_status(
    client: Client, settings: Settings, slice_name: str, found: SliceWorkflows
) -> dict[str, Any]:
    """The document of `keeper tpu status --json`; the text view shows the same."""
    handle, description = found.bootstrap, found.bootstrap_description
    progress = await query_status(handle)
    closed_at = description.close_time
    child: str | None = None
    if progress is not None and closed_at is not None and progress.phase not in FINAL_PHASES:
        # Terminated or timed out: the run's last record still reads as a phase running.
        # Its phase child, cancelled with it, records what it deleted itself.
        child, child_view = await phase_child(client, slice_name, handle.id, description.run_id)
        progress = closed_view(progress, found.bootstrap_status, closed_at, child, child_view)
    seen_at = None
    if progress is not None and closed_at is not None and progress.qr_state != "deleted":
        # Nothing reads the cloud once the bootstrap closed.
        seen_at = progress.updated_at or closed_at
    payload: dict[str, Any] = {
        **_handle_fields(settings, handle, description.run_id),
        "slice": slice_name,
        "status": found.bootstrap_status,
        "slice_state": found.state(progress.phase.value if progress else None),
        "started_at": description.start_time,
        "closed_at": closed_at,
        "progress": progress,
        "teardown": await _teardown_view(found),
        "qr_state_seen_at": seen_at if progress is not None and progress.qr_state else None,
        "next_step": next_step(progress, found.bootstrap_status, child),
    }
    if found.bootstrap_status == "COMPLETED":
        payload["result"] = await handle.result()
    return payload


async def _wait_for_status(
    client: Client, settings: Settings, out: Output, slice_name: str, found: SliceWorkflows
) -> int:
    """`status --follow --json`: the live view on stderr, then the document `status --json`
    prints once the bootstrap closed, with `result` (null unless it completed) and, for a
    bootstrap that did not complete, the `error` a failed `--follow` reports (exit 1)."""
    handle = found.bootstrap
    _bootstrap_keeps_running(handle, slice_name, found.bootstrap_description.run_id)
    await follow_workflow(handle, look(handle), console=console, note=out.note)
    problem: CommandFailed | None = None
    try:
        await result_of(handle, out.note)
    except WorkflowFailureError as err:
        fields = _handle_fields(settings, handle, found.bootstrap_description.run_id)
        problem = await bootstrap_error(err, handle, fields, slice_name)
    closed = await slice_workflows(client, slice_name)
    payload = {"result": None, **await slice_status(client, settings, slice_name, closed)}
    if problem is None:
        out.data(payload)
        return 0
    out.data({**payload, "error": error_document(problem)["error"]})
    problem.show()  # its text on stderr, as every failure's
    return FAILED


@tpu.command()
@click.argument("slice_name", type=SLICE_NAME)
@follow_option("Follow it live until it ends.")
@json_options
@pass_keeper
@exits
async def status(keeper: KeeperContext, out: Output, slice_name: str, follow: bool) -> int:
    """Show where SLICE_NAME is: phase, deadline, QR state, VM counts, and its release.

    The slice's state reads the bootstrap and, once it handed the slice over, its teardown
    tpu-teardown-<slice>. A closed bootstrap shows when it closed and the QR state it last
    saw; one terminated or timed out shows the phase it cut short and what to do next.
    With --follow --json, the same document once it closed, with its result or error.
    """
    settings = keeper.settings
    client, found = await _known_slice(settings, slice_name)
    handle, description = found.bootstrap, found.bootstrap_description
    if follow and is_running(description):
        if out.json:
            return await _wait_for_status(client, settings, out, slice_name, found)
        return await wait_and_report(
            handle, settings, out, show=True, run_id=description.run_id, slice_name=slice_name
        )
    shown = await slice_status(client, settings, slice_name, found)
    if out.json:
        out.data(shown)
        return 0
    progress: BootstrapStatus | None = shown["progress"]
    teardown = shown["teardown"]
    console = Console(soft_wrap=True)  # data, on the stdout of this invocation
    say = functools.partial(console.print, markup=False, highlight=False)
    closed = f", closed {rfc3339(shown['closed_at'])}" if shown["closed_at"] else ""
    say(f"{handle.id}: {shown['slice_state']} (bootstrap {shown['status']}){closed}")
    if teardown is not None:
        say(
            f"teardown {teardown['workflow_id']}: {teardown['status']}, "
            f"{terminal_text(teardown['summary'])}"
        )
    if progress:
        console.print(render(_released_view(progress, teardown), seen_at=shown["qr_state_seen_at"]))
        if progress.compensation_stuck:
            say(
                f"compensation stuck since {rfc3339(progress.compensation_stuck_since)}: "
                f"{terminal_text(progress.compensation)}"
            )
    if shown["next_step"]:
        say(f"next: {shown['next_step']}")
    out.note(f"UI: {shown['ui_url']}")
    return 0


@tpu.command(name="list")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Include the slices that are over: failed, cancelled, terminated or released.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="Show at most this many slices, newest first.",
)
@json_options
@pass_keeper
@exits
async def list_slices(keeper: KeeperContext, out: Output, limit: int, show_all: bool) -> int:
    """List the slices keeper knows (their bootstraps), newest first.

    Like the other lists, closed ones only with --all: without it, the slices that are not
    over (a bootstrap running; a ready slice, one being released or whose release failed).
    """
    settings = keeper.settings
    client = await client_for(settings)
    # A bootstrap that failed, was cancelled, terminated or timed out is over; a
    # completed one handed its slice over, which is over only once released.
    not_over = () if show_all else (Status.RUNNING, Status.COMPLETED)
    # One row per slice: its latest run.
    bootstraps = await latest_runs(
        client, list_query(BOOTSTRAP_WORKFLOW_TYPE, statuses=not_over), limit=limit * 4
    )
    teardowns = await latest_runs(client, list_query(TEARDOWN_WORKFLOW_TYPE), limit=limit * 4)
    rows: list[dict[str, Any]] = []
    for wf in sorted(bootstraps.values(), key=lambda w: w.start_time, reverse=True):
        if len(rows) == limit:
            break
        attrs = wf.typed_search_attributes
        name = attrs.get(sa.SLICE_NAME) or wf.id.removeprefix("tpu-bootstrap-")
        phase = attrs.get(sa.KEEPER_STEP)
        bootstrap_state = status_name(wf) or "UNKNOWN"
        teardown = teardowns.get(teardown_workflow_id(name))
        released_by = status_name(teardown) if released_after(teardown, wf) else None
        if not show_all and slice_is_over(bootstrap_state, released_by):
            continue
        rows.append(
            {
                "slice": name,
                "zone": attrs.get(sa.ZONE),
                "phase": phase,
                "status": bootstrap_state,
                "slice_state": slice_state(bootstrap_state, phase, released_by),
                "started_at": wf.start_time,
                "workflow_id": wf.id,
                "run_id": wf.run_id,
            }
        )
    if out.json:
        out.data({"slices": rows})
        return 0
    if not rows:
        if show_all:
            out.note("no slices yet; start one with `keeper tpu bootstrap`")
        else:
            out.note(
                "no slice is running or live; `keeper tpu list --all` also shows the "
                "ones that are over"
            )
        return 0
    cells = [
        (
            terminal_text(r["slice"]),
            terminal_text(r["zone"] or "-"),
            terminal_text(r["phase"] or "-"),
            r["status"],
            r["slice_state"],
            rfc3339(r["started_at"]) or "-",
        )
        for r in rows
    ]
    for line in table(("SLICE", "ZONE", "PHASE", "STATUS", "STATE", "STARTED"), cells):
        out.line(line)
    return 0


@tpu.command()
@click.argument("slice_name", type=SLICE_NAME)
@follow_option("Follow the compensation until it ends.", default=True, negatable=True)
@json_options
@pass_keeper
@exits
async def cancel(keeper: KeeperContext, out: Output, slice_name: str, follow: bool) -> int:
    """Cancel the bootstrap of SLICE_NAME; its compensation deletes what it created.

    Exit 0 once the bootstrap is cancelled and compensated (or the cancel was requested,
    with --no-follow); 1 when there is no running bootstrap or it ended another way.
    """
    settings = keeper.settings
    _, found = await _known_slice(settings, slice_name)
    handle, description = found.bootstrap, found.bootstrap_description
    if not is_running(description):
        raise CommandFailed(
            f"no running bootstrap of {slice_name} ({found.bootstrap_status})",
            hint=f"To release a ready slice use `keeper tpu delete {slice_name}`.",
            workflow_id=handle.id,
            status=found.bootstrap_status,
        )
    await handle.cancel()
    fields = _handle_fields(settings, handle, description.run_id)
    if not follow:
        if out.json:
            out.data({**fields, "status": "CANCEL_REQUESTED"})
        else:
            out.line(f"cancel requested for {handle.id}")
            out.note("compensation runs in the workflow; watch it with `keeper tpu status`")
        return 0
    workflow_keeps_running(
        f"the cancel was requested; the bootstrap {handle.id} keeps compensating",
        handle.id,
        follow=f"keeper tpu status {slice_name} --follow",
        run_id=description.run_id,
    )
    # The phases and the compensation as they go (a stuck one with its last error), as
    # `status --follow` shows them: a compensation can take long, and never silently.
    await follow_workflow(handle, look(handle), console=console, note=out.note)
    try:
        await result_of(handle, out.note)
    except WorkflowFailureError as err:
        if closed_status(err) != "CANCELED":
            failed = failure_of(err)
            raise CommandFailed(
                f"the bootstrap failed before the cancel took effect: {failed.message}",
                hint=f"Compensation: {failed.cleanup}.",
                **fields,
                status="FAILED",
                failure=failed.failure,
            ) from None
    else:
        raise CommandFailed(
            f"the bootstrap of {slice_name} completed before the cancel took effect",
            hint=f"Release the slice with `keeper tpu delete {slice_name}`.",
            **fields,
            status="COMPLETED",
        )
    final = await query_status(handle)
    cleanup = final.compensation if final and final.compensation else "unknown"
    if out.json:
        out.data({**fields, "status": "CANCELED", "cleanup": cleanup, "progress": final})
    else:
        out.line(f"{slice_name}: cancelled; compensation: {terminal_text(cleanup)}")
        out.note(f"UI: {fields['ui_url']}")
    return 0


@tpu.command()
@click.argument("slice_name", type=SLICE_NAME)
@click.option("--project", help="GCP project (default: tpu.project in the settings).")
@click.option("--zone", help="Zone (default: tpu.zone in the settings).")
@click.option("--node-count", type=int, default=1, show_default=True, help="Nodes of a multislice.")
@click.option(
    "--reason",
    default="operator teardown",
    show_default=True,
    help="Why the slice is released; shown in the teardown's history.",
)
@follow_option(
    "Follow the teardown until it confirms every resource deleted.",
    default=True,
    negatable=True,
)
@json_options
@pass_keeper
@exits
async def delete(
    keeper: KeeperContext,
    out: Output,
    slice_name: str,
    project: str | None,
    zone: str | None,
    node_count: int,
    reason: str,
    follow: bool,
) -> int:
    """Release a ready slice through its own workflow, tpu-teardown-<slice>.

    Only resources labelled as created by tpu-bootstrap-<slice> are deleted. A bootstrap
    still running is cancelled with `keeper tpu cancel` instead. A name keeper has no
    bootstrap of is refused (exit 1) and nothing is started.
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
        raise request_problem(err, what="teardown request") from None

    client, found = await _known_slice(settings, slice_name)
    if is_running(found.bootstrap_description):
        raise CommandFailed(
            f"the bootstrap of {slice_name} is still running",
            hint=f"Stop it with `keeper tpu cancel {slice_name}` (that deletes the slice too).",
            workflow_id=found.bootstrap.id,
            status="RUNNING",
        )
    handle = await client.start_workflow(
        TEARDOWN_WORKFLOW_TYPE,
        request,
        id=teardown_workflow_id(slice_name),
        task_queue=settings.temporal.family_queue("tpu"),
        # Joins a teardown already running (the type was checked above).
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"release TPU slice {slice_name} ({request.zone})",
        result_type=DeletionReport,
    )
    fields = _handle_fields(settings, handle, handle.result_run_id)
    if not follow:
        if out.json:
            out.data({**fields, "status": "RUNNING"})
        else:
            out.line(handle.id)
            out.note(f"started: {fields['ui_url']}")
        return 0
    workflow_keeps_running(
        f"the teardown {handle.id} keeps running",
        handle.id,
        follow=f"keeper tpu status {slice_name}",
        run_id=fields["run_id"],
    )
    try:
        report: DeletionReport = await result_of(handle, out.note)
    except WorkflowFailureError as err:
        raise CommandFailed(
            f"the teardown of {slice_name} did not finish: {err.cause or err}",
            hint=f"The sweeper deletes what a closed teardown released; see {fields['ui_url']}",
            **fields,
            status="FAILED",
        ) from None
    if out.json:
        out.data({**fields, "status": "COMPLETED", "result": report})
    else:
        out.line(f"{terminal_text(slice_name)}: {terminal_text(deletion_summary(report))}")
    return 0


@tpu.command()
@click.option(
    "--dry-run",
    is_flag=True,
    help="Report what would be deleted; delete nothing (runs on its own, beside any sweep).",
)
@json_options
@pass_keeper
@exits
async def sweep(keeper: KeeperContext, out: Output, dry_run: bool) -> int:
    """Run the sweeper now: delete labelled TPU resources whose owner closed unsuccessfully.

    Sweeps run one at a time: this runs the worker's schedule tpu-sweeper now (it also runs
    every sweeper.interval), and when a sweep is already running it waits for that one and
    reports it instead of starting another. Exits 1 when an orphan could not be deleted or a
    location could not be listed, naming them.
    """
    settings = keeper.settings
    client = await client_for(settings)
    handle: WorkflowHandle[Any, SweepReport]
    if dry_run:
        # Deletes nothing, so it needs no turn: its own run, under its own id.
        handle = await client.start_workflow(
            SWEEPER_WORKFLOW_TYPE,
            SweepRequest(project=settings.tpu.project, zone=settings.tpu.zone, dry_run=True),
            id=manual_sweep_workflow_id(f"{datetime.now(UTC):%Y%m%dT%H%M%S}"),
            task_queue=settings.temporal.family_queue("tpu"),
            result_type=SweepReport,
        )
        started = True
    else:
        found = await scheduled_sweep(client)
        handle, started = found.handle, found.started
        if not started:
            out.note(
                f"a sweep is already running: {handle.id}; sweeps run one at a time, so "
                "this waits for that one and reports it"
            )
    fields = {
        **_handle_fields(settings, handle, handle.run_id or handle.result_run_id),
        "started": started,
    }
    try:
        report: SweepReport = await result_of(handle, out.note)
    except WorkflowFailureError as err:
        raise CommandFailed(
            f"the sweep {handle.id} failed: {err.cause or err}",
            hint=f"See {fields['ui_url']}; the next scheduled sweep tries again.",
            **fields,
            status="FAILED",
        ) from None
    here = f"{settings.tpu.project}/{settings.tpu.zone}"
    if report.locations and here not in report.locations:
        # The schedule's request names the worker's location, not this shell's.
        out.note(
            f"{here} (this shell's tpu.project/tpu.zone) was not swept: the schedule "
            "sweeps the worker's location and every one keeper bootstrapped in; "
            "`keeper tpu sweep --dry-run` lists what keeper labelled there"
        )
    undone = unfinished(report)
    if out.json:
        if undone is None:
            # The report's fields at the top, as before, next to the shared ones.
            out.data({**report.model_dump(mode="python"), **fields, "status": "COMPLETED"})
    else:
        verb = "would delete" if dry_run else "deleted"
        out.line(f"examined {report.examined}; {verb} {len(report.deleted)}")
        for what, items in (
            (verb, report.deleted),
            ("unknown owner, left alone", report.unknown_owner),
            ("not deleted (the next sweep tries again)", report.failed),
            ("error", report.errors),
        ):
            # Items name cloud resources and owners read from their labels: outside text.
            for item in items:
                out.line(f"  {what}: {terminal_text(item)}")
    if undone is not None:
        raise CommandFailed(
            f"the sweep {handle.id} did not finish its work: {undone}",
            hint="Fix what each error says (the cloud's own words: a PermissionDenied "
            "means the worker's account lacks a role), then run `keeper tpu sweep` "
            f"again; the scheduled sweep also retries them. The sweep: {fields['ui_url']}",
            **report.model_dump(mode="python"),
            **fields,
            status="COMPLETED",
            not_deleted=[orphan_name(item) for item in report.failed],
        )
    return 0
