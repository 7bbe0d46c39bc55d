"""`keeper reclaim`: the reclaims in flight, one reclaim's status, reports, an operator's
release, and the heartbeat tap.

Every command follows cli/output.py: data on stdout, diagnostics on stderr, `--json` /
`-o json` for one JSON document, exit 0 (done), 1 (failed) or 2 (a bad argument).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from datetime import UTC, datetime
from functools import partial
from typing import Any

import click
from rich.console import Console
from rich.text import Text
from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import (
    FAILED,
    OK,
    CommandFailed,
    Output,
    UsageProblem,
    json_options,
    rfc3339,
    table,
    workflow_keeps_running,
)
from keeper.cli.reclaim.runs import query_of, reclaims_of, run_json
from keeper.cli.workflow_view import (
    Look,
    describe,
    follow_option,
    is_running,
    patiently,
    query,
    status_name,
)
from keeper.cli.workflow_view import follow as follow_workflow
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.reclaim.calls import OperatorRelease
from keeper.domain.reclaim.identity import NodeNameError, canonical_node
from keeper.domain.reclaim.models import RELEASE_UPDATE, STATUS_QUERY
from keeper.domain.reclaim.state import JobReclaimResult
from keeper.domain.reclaim.view import ReclaimView, render_details
from keeper.runtime.metrics import MetricsEndpointError
from keeper.runtime.reclaim import search_attributes as sa
from keeper.runtime.reclaim.credentials import SpurTokenError
from keeper.runtime.reclaim.intake import Report
from keeper.runtime.reclaim.service import handled_json, open_intake, run_tap
from keeper.runtime.reclaim.spur_errors import SpurDenied, SpurError
from keeper.runtime.settings import Settings
from keeper.store import StoreUnavailable

JOB_ID = click.IntRange(0, 2**32 - 1)
REASON_LIMIT = OperatorRelease.model_fields["reason"].metadata[0].max_length
BY_LIMIT = OperatorRelease.model_fields["by"].metadata[0].max_length
# How long `release` waits for a worker to take the Update, then for the reclaim to close
# (lift keeper's drain, remember the outcome).
UPDATE_TIMEOUT = 60.0


@click.group()
def reclaim() -> None:
    """Release what spur agents hold for jobs the controller has moved on from.

    `keeper reclaim tap` runs the heartbeat tap agents use as their controller address; its
    intake starts one JobReclaim workflow per stale holding. reclaim.mode `observe` (the
    default) decides and shows every step without sending anything; `act` cancels, kills
    and drains (docs/reclaim.md).
    """


_MD_ESCAPE = re.compile(r"\\([\\`*_\[\]()!|~#$:.+=-])")


def _plain(markdown_line: str) -> str:
    """A details line as a terminal shows it: no bold markers, no markdown escapes (the text
    stays inert: terminal_text still makes every control character visible)."""
    return _MD_ESCAPE.sub(r"\1", markdown_line.replace("**", ""))


def _node(settings: Settings, name: str, param: str = "NODE") -> str:
    try:
        return canonical_node(name, settings.reclaim.node_aliases)
    except NodeNameError as err:
        raise UsageProblem(f"{err}; nothing was done", param) from None


def _job_id(value: str | None) -> int | None:
    # The JobId search attribute is a keyword; every command shows job ids as numbers.
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _spur_failure(settings: Settings, err: Exception) -> CommandFailed:
    """A report that could not be decided: what failed and which setting to check."""
    controller = settings.reclaim.controller_address
    if isinstance(err, StoreUnavailable):
        hint = "Check reclaim.store_url (or KEEPER_RECLAIM_STORE_URL)."
    elif isinstance(err, SpurTokenError | SpurDenied):
        hint = (
            "Check the spur token: KEEPER_SPUR_TOKEN, or the file reclaim.token_file "
            "(KEEPER_SPUR_TOKEN_FILE) names."
        )
    else:
        hint = (
            f"Check that the spur controller answers at {controller} "
            "(reclaim.controller_address, KEEPER_SPUR_CONTROLLER)."
        )
    return CommandFailed(
        f"the report could not be decided; nothing was started: {err}",
        hint=hint,
        controller_address=controller,
    )


async def _view(client: Client, workflow_id: str, run_id: str | None = None) -> ReclaimView | None:
    # Bounded: a list of old reclaims no worker serves answers in seconds.
    return await query(
        client.get_workflow_handle(workflow_id, run_id=run_id), STATUS_QUERY, ReclaimView
    )


def _row(wf: Any, view: ReclaimView | None, settings: Settings) -> dict[str, Any]:
    attrs = wf.typed_search_attributes
    last = view.last.decision if view and view.last else None
    return {
        "workflow_id": wf.id,
        "run_id": wf.run_id,
        "node": attrs.get(sa.NODE),
        "job_id": _job_id(attrs.get(sa.JOB_ID)),
        "step": attrs.get(sa.KEEPER_STEP),
        "status": status_name(wf),
        "mode": view.mode.value if view else None,
        "verdict": last.verdict.value if last else None,
        "reason": last.reason.value if last else None,
        "cancels_sent": view.sent if view else None,
        "drained": view.drained if view else None,
        "last_action": view.actions[-1] if view and view.actions else None,
        "started_at": rfc3339(wf.start_time),
        "ui_url": settings.temporal.workflow_url(wf.id, wf.run_id),
    }


@reclaim.command(name="list")
@click.option("--all", "show_all", is_flag=True, help="Closed reclaims too, not only running.")
@click.option("--node", "node_name", default=None, help="Only the reclaims of this node.")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
    help="Show at most this many reclaims, newest first.",
)  # fmt: skip
@json_options
@pass_keeper
def list_reclaims(
    keeper: KeeperContext, out: Output, show_all: bool, node_name: str | None, limit: int
) -> None:
    """List the reclaims in flight: node, job, step, verdict, and what each did or (in
    observe mode) would do."""
    settings = keeper.settings
    node = _node(settings, node_name, "--node") if node_name is not None else None

    async def run() -> int:
        client = await client_for(settings)
        found = [
            wf
            async for wf in client.list_workflows(query_of(node, None, not show_all), limit=limit)
        ]
        found.sort(key=lambda w: w.start_time, reverse=True)
        views = await asyncio.gather(*(_view(client, wf.id, wf.run_id) for wf in found))
        rows = [_row(wf, v, settings) for wf, v in zip(found, views, strict=True)]
        if out.json:
            out.data({"mode": settings.reclaim.mode.value, "reclaims": rows})
            return 0
        if not rows:
            out.note("no reclaims" + ("" if show_all else " in flight (--all shows closed ones)"))
            return 0
        header = ("NODE", "JOB", "STEP", "STATUS", "VERDICT", "LAST")
        cells = [
            (
                terminal_text(r["node"] or "-"),
                "-" if r["job_id"] is None else str(r["job_id"]),
                r["step"] or "-",
                r["status"] or "-",
                f"{r['verdict']} ({r['reason']})" if r["verdict"] else "-",
                terminal_text(r["last_action"] or "-"),
            )
            for r in rows
        ]
        for line in table(header, cells):
            out.line(line)
        return 0

    raise SystemExit(asyncio.run(run()))


def _details(view: ReclaimView, settings: Settings) -> list[str]:
    """What the Temporal UI shows as the reclaim's current details, from the same view."""
    details = render_details(view, settings.reclaim.timing)
    return [terminal_text(_plain(line), limit=400) for line in details.splitlines()]


def _follow_line(view: ReclaimView) -> str:
    """One line per change: nothing in it moves while the reclaim stands still."""
    h = view.holding
    last = view.last.decision if view.last else None
    verdict = f"{last.verdict.value} ({last.reason.value})" if last else "-"
    text = (
        f"{terminal_text(h.node)} job {h.job_id}: step={view.step.value} "
        f"mode={view.mode.value} verdict={verdict} cancels={view.sent}"
    )
    if view.drained:
        text += " drained"
    if view.outcome is not None:
        text += f" outcome={view.outcome.value}"
    if view.actions:
        text += f"; {terminal_text(view.actions[-1], limit=200)}"
    return text


async def _follow(
    client: Client, settings: Settings, out: Output, wf: Any, node: str, job: int
) -> Any:
    """Follows the reclaim `wf` (into the runs it continues as new) until it closes; then
    its description as it closed."""
    handle = client.get_workflow_handle(wf.id)
    workflow_keeps_running(
        f"the reclaim {wf.id} keeps running",
        wf.id,
        follow=f"keeper reclaim status {node} {job} --follow",
    )
    look = Look(
        query=lambda: query(handle, STATUS_QUERY, ReclaimView),
        page=lambda view: Text("\n".join(_details(view, settings))),
        line=_follow_line,
    )
    await follow_workflow(handle, look, console=Console(stderr=True, soft_wrap=True), note=out.note)
    return await patiently(lambda: describe(handle), out.note) or wf


@reclaim.command()
@click.argument("node_name", metavar="NODE")
@click.argument("job", type=JOB_ID)
@follow_option(
    "Follow the reclaim shown until it closes (its details redrawn on a terminal, else a line "
    "per change, on stderr), then show it as it ended; exit 0 if it completed, else 1."
)
@json_options
@pass_keeper
def status(keeper: KeeperContext, out: Output, node_name: str, job: int, follow: bool) -> None:
    """Show the reclaim of JOB on NODE: step, verdict, the controller view it last read,
    evidence, cancels sent, drain."""
    settings = keeper.settings
    node = _node(settings, node_name)

    async def run() -> int:
        client = await client_for(settings)
        found = await reclaims_of(client, node, job)
        if not found:
            raise CommandFailed(
                f"no reclaim of job {job} on {node}",
                hint="`keeper reclaim list --all` shows every reclaim; a holding keeper "
                "spares gets none.",
                node=node, job_id=job,
            )  # fmt: skip
        # The reclaim of the holding now: the running one, else the newest.
        wf, others = found[0], found[1:]
        followed = follow and is_running(wf)
        if followed:
            wf = await _follow(client, settings, out, wf, node, job)
            closed = (wf.id, wf.run_id)
            others = [o for o in await reclaims_of(client, node, job) if (o.id, o.run_id) != closed]
            found = [wf, *others]
        # With --follow, the exit code says how it ended.
        code = (OK if status_name(wf) == "COMPLETED" else FAILED) if follow else OK
        view = await _view(client, wf.id, wf.run_id)
        row = _row(wf, view, settings)
        if out.json:
            out.data(
                {
                    **row,
                    "view": view.model_dump(mode="json") if view else None,
                    "others": [run_json(o) for o in others],
                }
            )
            return code
        out.line(f"{row['workflow_id']}  {row['status']}  step {row['step']}")
        if others:
            running = is_running(wf)
            which = (
                "the one followed" if followed else "the running one" if running else "the newest"
            )
            out.line(
                f"shown: {which} of {len(found)} reclaims of job {job} on {node} (started "
                f"{row['started_at']}{'' if running or followed else ', none runs'}); the others:"
            )
            for other in map(run_json, others):
                out.line(
                    f"  {other['workflow_id']}  {other['status']}  started {other['started_at']}"
                )
        if view is not None:
            for line in _details(view, settings):
                out.line(line)
        else:
            out.line("no details: the run answers no query (closed, or no worker serves it)")
        out.line(f"ui: {row['ui_url']}")
        return code

    raise SystemExit(asyncio.run(run()))


@reclaim.command()
@click.argument("node_name", metavar="NODE")
@click.argument("jobs", metavar="JOB...", nargs=-1, required=True, type=JOB_ID)
@json_options
@pass_keeper
def report(keeper: KeeperContext, out: Output, node_name: str, jobs: tuple[int, ...]) -> None:
    """Report that NODE holds JOB...: decided like a heartbeat, and a reclaim started for
    each stale one. A report names only what it lists: it is never evidence that anything
    else was released."""
    settings = keeper.settings
    _node(settings, node_name)

    async def run() -> int:
        client = await client_for(settings)
        try:
            async with open_intake(settings, client) as intake:
                handled = await intake.process(
                    [
                        Report(
                            node_name, tuple(jobs), datetime.now(UTC), complete=False, source="cli"
                        )
                    ]
                )
        except (SpurError, SpurTokenError, StoreUnavailable) as err:
            raise _spur_failure(settings, err) from None
        rows = [handled_json(h) for h in handled]
        unstarted = [r for r in rows if r["verdict"] != "spare" and not r["workflow_id"]]
        if unstarted:
            jobs_text = ", ".join(str(r["job_id"]) for r in unstarted)
            raise CommandFailed(
                f"no reclaim could be started for job {jobs_text} on {unstarted[0]['node']}",
                hint="The warning above says why; report again once Temporal accepts starts.",
                handled=rows,
            )
        if out.json:
            out.data({"mode": settings.reclaim.mode.value, "handled": rows})
            return 0
        for r in rows:
            wf = f" -> {r['workflow_id']}" if r["workflow_id"] else ""
            out.line(
                f"{r['node']} job {r['job_id']}: {r['verdict']} ({r['reason']}){wf}\n"
                f"  {terminal_text(r['detail'])}"
            )
        return 0

    raise SystemExit(asyncio.run(run()))


class _Refused(Exception):
    """A reclaim refused the release, or could not answer it: nothing was released there."""


def _refusal(workflow_id: str, err: WorkflowUpdateFailedError) -> _Refused:
    """The validator's reason (a ValueError), or the failure of a release it had taken."""
    cause = err.cause
    why = terminal_text(cause.message if isinstance(cause, ApplicationError) else str(cause or err))
    if isinstance(cause, ApplicationError) and cause.type == "ValueError":
        return _Refused(f"{workflow_id} refused: {why}")
    return _Refused(f"{workflow_id} took the release, then failed: {why}")


async def _release_one(
    client: Client, settings: Settings, workflow_id: str, release: OperatorRelease
) -> dict[str, Any]:
    """The release Update to one reclaim: its answer (how the reclaim ended), or _Refused
    saying why not."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        update = await asyncio.wait_for(
            handle.start_update(
                RELEASE_UPDATE,
                release,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                result_type=JobReclaimResult,
            ),
            UPDATE_TIMEOUT,
        )
    except WorkflowUpdateFailedError as err:
        raise _refusal(workflow_id, err) from None
    except RPCError as err:
        if err.status is not RPCStatusCode.NOT_FOUND:
            raise
        raise _Refused(f"{workflow_id} closed before the release reached it") from None
    except TimeoutError:
        raise _Refused(
            f"no worker took the release of {workflow_id} within {UPDATE_TIMEOUT:g}s; it may "
            f"still be taken when one does (check that a worker serves "
            f"{settings.temporal.family_queue('reclaim')})"
        ) from None
    row: dict[str, Any] = {"workflow_id": workflow_id}
    try:
        # A refusal is known at once; a release taken answers once the reclaim closed.
        result = await asyncio.wait_for(update.result(), UPDATE_TIMEOUT)
    except WorkflowUpdateFailedError as err:
        raise _refusal(workflow_id, err) from None
    except TimeoutError:
        # Taken, and durable: the reclaim ends released; lifting the drain takes longer.
        return {**row, "outcome": None, "drained": None, "undrained": None, "detail": (
            f"release taken; the reclaim is still ending after {UPDATE_TIMEOUT:g}s "
            "(lifting keeper's drain): `keeper reclaim status` shows how far it is"
        )}  # fmt: skip
    return {
        **row,
        "outcome": result.outcome.value,
        "drained": result.drained,
        "undrained": result.undrained,
        "detail": result.detail,
    }


@reclaim.command()
@click.argument("node_name", metavar="NODE")
@click.argument("job", type=JOB_ID)
@click.option("--reason", default="", help=f"Why (at most {REASON_LIMIT} characters).")
@click.option(
    "--by", default="operator", show_default=True,
    help=f"Who vouches (1 to {BY_LIMIT} characters).",
)  # fmt: skip
@json_options
@pass_keeper
def release(
    keeper: KeeperContext, out: Output, node_name: str, job: int, reason: str, by: str
) -> None:
    """Vouch that NODE's agent no longer holds JOB: its reclaim ends, lifts keeper's drain,
    and answers how it ended. Use it after freeing the job on the node by hand. A reclaim that
    no longer waits for an operator (it is ending) or that an operator already released
    refuses, saying why (exit 1)."""
    settings = keeper.settings
    node = _node(settings, node_name)
    if len(reason) > REASON_LIMIT:
        raise UsageProblem(f"at most {REASON_LIMIT} characters, got {len(reason)}", "--reason")
    if not by.strip() or len(by) > BY_LIMIT:
        raise UsageProblem(f"1 to {BY_LIMIT} characters, got {len(by)}", "--by")

    async def run() -> int:
        client = await client_for(settings)
        found = [wf async for wf in client.list_workflows(query_of(node, job, True), limit=20)]
        if not found:
            raise CommandFailed(
                f"no reclaim of job {job} on {node} is running; nothing was released",
                hint="`keeper reclaim list` shows the reclaims in flight.",
                node=node, job_id=job,
            )  # fmt: skip
        vouched = OperatorRelease(by=by, reason=reason)
        released: list[dict[str, Any]] = []
        refused: list[str] = []
        for wf in found:
            try:
                released.append(await _release_one(client, settings, wf.id, vouched))
            except _Refused as err:
                refused.append(str(err))
        if not out.json:
            for row in released:
                out.line(f"{row['workflow_id']}: {row['outcome'] or 'released, still ending'}")
                out.line(f"  {terminal_text(row['detail'])}")
        if refused:
            raise CommandFailed(
                "; ".join(refused) + ("" if released else "; nothing was released"),
                hint=f"`keeper reclaim status {node} {job}` shows where the reclaim is.",
                node=node, job_id=job, released=released,
            )  # fmt: skip
        if out.json:
            out.data({"released": released, "node": node, "job_id": job})
        return 0

    raise SystemExit(asyncio.run(run()))


@reclaim.command()
@pass_keeper
def tap(keeper: KeeperContext) -> None:
    """Run the heartbeat tap in the foreground: agents dial reclaim.tap_address as their
    controller; every RPC is forwarded to reclaim.controller_address unchanged, and what
    agents report holding goes to the intake (and reclaim.intake_address's POST /report)."""
    settings = keeper.settings

    async def run() -> int:
        client: Client | None
        try:
            client = await client_for(settings)
        except click.ClickException as err:
            # Forwarding never waits for Temporal: the intake connects again every 10 s, and
            # starts nothing until it is back.
            click.echo(f"warning: {err.format_message()}", err=True)
            client = None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        try:
            async with run_tap(settings, client, partial(client_for, settings)) as (_, _, port):
                metrics_at = settings.reclaim.metrics_address
                click.echo(
                    f"tap on {settings.reclaim.tap_address} -> "
                    f"{settings.reclaim.controller_address}; intake on port {port}; "
                    f"mode {settings.reclaim.mode.value}"
                    + (f"; metrics on http://{metrics_at}/metrics" if metrics_at else ""),
                    err=True,
                )
                with contextlib.suppress(asyncio.CancelledError):
                    await stop.wait()
        except MetricsEndpointError as err:
            raise CommandFailed(
                str(err), hint="Set reclaim.metrics_address (KEEPER_RECLAIM_METRICS_ADDRESS)."
            ) from None
        return 0

    raise SystemExit(asyncio.run(run()))
