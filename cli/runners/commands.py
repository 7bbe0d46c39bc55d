"""`keeper runner`: delete runners through their one deletion workflow, and read the store."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle

from cli.context import KeeperContext, pass_keeper
from cli.temporal_ops import client_for, describe_or_none, is_running
from domain.common.untrusted import terminal_text
from domain.runners.deletion_view import DeletionView
from domain.runners.models import (
    RUNNER_NAME_RE,
    DeletionOutcome,
    DeletionRequest,
    DeletionResult,
    Requester,
    RunnerRecord,
    deletion_workflow_id,
)
from domain.runners.record_check import shown, what_to_do
from domain.runners.status import LIVE, AgentStatus, InstanceStatus, on_lane
from runtime.runners.requests import request_deletion
from runtime.settings import Settings
from store import RunnerStore, StoreUnavailable, open_store

console = Console(stderr=True)
S = InstanceStatus
NAME_RULE = "1-64 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"


def _emit_json(payload: Any) -> None:
    click.echo(json.dumps(payload, indent=2, default=str))


def _check_name(name: str) -> str:
    if not RUNNER_NAME_RE.match(name):
        raise click.ClickException(
            f"runner name {name!r} is invalid ({NAME_RULE}); nothing was started"
        )
    return name


def _store(settings: Settings) -> RunnerStore:
    try:
        return open_store(settings.runners.store_url)
    except StoreUnavailable as err:
        # The message names the URL with its password hidden; the URL itself is not shown.
        raise click.ClickException(
            f"{err}\nCheck runners.store_url (or KEEPER_RUNNER_STORE_URL)."
        ) from None


def _require(store: RunnerStore, name: str) -> RunnerRecord:
    record = store.get(name)
    if record is None:
        raise click.ClickException(
            f"no runner named {name!r} in the runner store ({store.describe()}); "
            "`keeper runner list` shows the known runners. Nothing was started."
        )
    return record


def _lane(status: InstanceStatus) -> str:
    if status in LIVE:
        return "live"
    if status is S.DELETED:
        return "tombstone"
    return "deletion lane" if on_lane(status) else "-"


def _view_text(view: DeletionView) -> str:
    # GitHub and provider answers, decisions and errors carry outside text: one line each.
    t = terminal_text
    text = f"{view.step.value:<16} record {t(view.status or '-'):<20} GitHub: {t(view.github)}"
    text += f" ({view.github_attempts})  provider: {t(view.provider)} ({view.provider_attempts})"
    if view.decision:
        text += f"\n{'':16} decision: {t(view.decision)}"
    if view.error:
        text += f"\n{'':16} needs attention: {t(view.error)}"
    return text


def _retrying(desc: Any) -> list[dict[str, Any]]:
    """Calls Temporal is retrying for the deletion: each attempt is a retry, not a history
    event, so the attempt count, last answer and next try live on the pending activity."""
    calls: list[dict[str, Any]] = []
    for pending in desc.raw_description.pending_activities if desc else []:
        if not pending.HasField("last_failure"):
            continue  # a first attempt still running: nothing is being retried yet
        next_try = None
        if pending.HasField("next_attempt_schedule_time"):
            next_try = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
        calls.append(
            {
                "activity": pending.activity_type.name,
                "attempt": pending.attempt,
                "last_failure": pending.last_failure.message or None,
                "next_try_at": next_try.strftime("%Y-%m-%dT%H:%M:%SZ") if next_try else None,
            }
        )
    return calls


def _retrying_text(calls: list[dict[str, Any]]) -> str:
    lines = []
    for call in calls:
        line = f"{call['activity']}: attempt {call['attempt']}"
        if call["last_failure"]:
            line += f", last: {terminal_text(call['last_failure'])}"
        if call["next_try_at"]:
            line += f", next try at {call['next_try_at']}"
        lines.append(line)
    return "\n".join(lines)


async def _query(handle: WorkflowHandle[Any, Any]) -> DeletionView | None:
    try:
        return await handle.query("status", result_type=DeletionView)
    except Exception:  # the worker may be restarting; the next tick asks again
        return None


async def _follow(handle: WorkflowHandle[Any, Any], as_json: bool) -> None:
    result = asyncio.ensure_future(handle.result())
    last = ""
    while not result.done():
        view = await _query(handle)
        if view and view.status and not as_json:
            text = _view_text(view)
            if view.waiting:
                # Attempts are Temporal's retries now: the pending call holds the last answer.
                calls = _retrying(await describe_or_none(handle))
                if calls:
                    text += f"\n{'':16} retrying " + _retrying_text(calls)
            if text != last:
                click.echo(text)
                last = text
        await asyncio.wait({result}, timeout=0.5)


def _result_text(result: DeletionResult) -> str:
    t = terminal_text
    forced = " (forced)" if result.forced else ""
    lines = [f"runner {t(result.runner)}: {result.outcome.value}{forced}"]
    if result.registration:
        lines.append(f"  GitHub:   {t(result.registration)}")
    if result.provider:
        lines.append(f"  provider: {t(result.provider)}")
    if result.busy_decision:
        lines.append(f"  decision: {t(result.busy_decision)}")
    if result.recovered:
        lines.append(
            "  the final write went through the audited recovery path (see `runner status`)"
        )
    if result.leaked_provider_id:
        lines.append(
            f"  LEAK: instance {t(result.leaked_provider_id)} may still exist; it is recorded for "
            "the orphan sweep (`keeper runner status` lists it)"
        )
    return "\n".join(lines)


@click.group()
def runner() -> None:
    """Delete CI runners through their one durable deletion workflow; read the runner store.

    Every deletion request (an agent reporting terminated, a scale-down, an operator, the
    reconciler) starts the runner's workflow `runner-delete-NAME` or joins it. The workflow
    removes the GitHub registration, then deletes the compute through the provider, then
    writes the tombstone. Nothing else writes the deletion lane.
    """


@runner.command()
@click.argument("name")
@click.option(
    "--force",
    is_flag=True,
    help="Skip the busy wait and give up on provider errors after a few attempts; an "
    "instance left behind is recorded for the orphan sweep and shown in the result.",
)
@click.option("--wait", is_flag=True, help="Follow the deletion live until it ends.")
@click.option("--reason", default="", help="Why; recorded in the workflow's requests.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def delete(
    keeper: KeeperContext, name: str, force: bool, wait: bool, reason: str, as_json: bool
) -> None:
    """Delete runner NAME: start its deletion workflow, or join the one that runs.

    Exit status: 0 when the deletion was requested (or, with --wait, finished), 1 on an
    error. A runner already deleted is reported and nothing is started.
    """
    settings = keeper.settings
    _check_name(name)
    store = _store(settings)
    try:
        record = _require(store, name)
    finally:
        store.close()
    if record.instance_status is S.DELETED:
        if as_json:
            _emit_json(
                {"runner": name, "outcome": "already_deleted", "deleted_at": record.deleted_at}
            )
        else:
            click.echo(f"runner {name} was already deleted at {record.deleted_at}; nothing to do")
        return

    async def run() -> int:
        client = await client_for(settings)
        workflow_id = deletion_workflow_id(name)
        before = await describe_or_none(client.get_workflow_handle(workflow_id))
        joined = is_running(before)
        handle = await request_deletion(
            client,
            name,
            DeletionRequest(requested_by=Requester.OPERATOR, force=force, reason=reason),
            task_queue=settings.temporal.family_queue("runners"),
            policy=settings.runners.deletion,
        )
        url = settings.temporal.workflow_url(workflow_id)
        if not as_json:
            verb = "joined the deletion already running" if joined else "started"
            click.echo(f"runner {name}: {verb} ({workflow_id}{', force' if force else ''})")
            click.echo(f"History: {url}")
        if not wait:
            if as_json:
                _emit_json(
                    {"runner": name, "workflow_id": workflow_id, "joined": joined, "ui": url}
                )
            return 0
        await _follow(handle, as_json)
        try:
            result: DeletionResult = await handle.result()
        except WorkflowFailureError as err:
            message = str(err.cause or err)
            if as_json:
                _emit_json({"runner": name, "workflow_id": workflow_id, "error": message})
            else:
                click.echo(f"runner {name}: deletion failed: {terminal_text(message)}", err=True)
            return 1
        if as_json:
            _emit_json({"workflow_id": workflow_id, "ui": url, **result.model_dump(mode="json")})
        else:
            click.echo(_result_text(result))
        return 0 if result.outcome is not DeletionOutcome.CANCELLED else 1

    raise SystemExit(asyncio.run(run()))


@runner.command(name="list")
@click.option("--scale-set", help="Only this scale set.")
@click.option("--all", "include_deleted", is_flag=True, help="Include tombstones (deleted).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def list_runners(
    keeper: KeeperContext, scale_set: str | None, include_deleted: bool, as_json: bool
) -> None:
    """Runners with their status and lane, and per scale set the live count (what
    autoscaling counts: pending_create, creating, running, stopped, error) and the
    deletion lane (never counted)."""
    store = _store(keeper.settings)
    try:
        # A row that fails the record check is reported below, never a reason to stop.
        found = store.scan(scale_set, include_deleted=include_deleted)
        records = found.records
        counts = store.status_counts()
        sets = sorted({scale_set} if scale_set else set(counts))
        summary = {
            s: {
                "live": store.live_runner_count(s),
                "deletion_lane": sum(
                    n for st, n in counts.get(s, {}).items() if on_lane(st) and st is not S.DELETED
                ),
                "by_status": {st.value: n for st, n in sorted(counts.get(s, {}).items())},
            }
            for s in sets
        }
        leaks = store.leaks()
    finally:
        store.close()
    for bad in found.bad:
        click.echo(
            f"warning: runner {shown(bad.name)} skipped: {'; '.join(bad.problems)}; "
            f"{what_to_do(bad.name)}",
            err=True,
        )
    if as_json:
        _emit_json(
            {
                "runners": [r.model_dump(mode="json") for r in records],
                "bad_records": [
                    {**bad.__dict__, "what_to_do": what_to_do(bad.name)} for bad in found.bad
                ],
                "scale_sets": summary,
                "leaks": [leak.__dict__ for leak in leaks],
            }
        )
        return
    # Wide when piped, so rows stay one line each for grep and less.
    out = Console() if sys.stdout.isatty() else Console(width=200)
    table = Table(show_edge=False)
    for column in ("runner", "scale set", "status", "lane", "agent", "version", "updated"):
        table.add_column(column)
    for r in records:
        table.add_row(
            r.name,
            r.scale_set,
            r.instance_status.value,
            _lane(r.instance_status),
            r.agent_status.value,
            str(r.version),
            r.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    if records:
        out.print(table)
    else:
        out.print("no runners" + (f" in {scale_set}" if scale_set else ""))
    for s, info in summary.items():
        out.print(f"{s}: live {info['live']}, deletion lane {info['deletion_lane']}")
    if leaks:
        out.print(f"[red]{len(leaks)} leaked instance(s) awaiting the orphan sweep:[/]")
        for leak in leaks:
            leaked, owner, why = (
                terminal_text(v, markup=True) for v in (leak.provider_id, leak.runner, leak.reason)
            )
            out.print(f"  {leaked} (runner {owner}): {why}")


@runner.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_keeper
def status(keeper: KeeperContext, name: str, as_json: bool) -> None:
    """Runner NAME: its record, its status history (audit), and its deletion workflow."""
    settings = keeper.settings
    _check_name(name)
    store = _store(settings)
    try:
        record = _require(store, name)
        audit = store.audit(name)
        leaks = [leak for leak in store.leaks(unresolved_only=False) if leak.runner == name]
    finally:
        store.close()

    async def deletion() -> tuple[str | None, DeletionView | None, Any, list[dict[str, Any]]]:
        client: Client = await client_for(settings)
        handle = client.get_workflow_handle(deletion_workflow_id(name), result_type=DeletionResult)
        desc = await describe_or_none(handle)
        if desc is None:
            return None, None, None, []
        view = await _query(handle)
        result = None
        if desc.status and desc.status.name == "COMPLETED":
            result = await handle.result()
        return desc.status.name if desc.status else None, view, result, _retrying(desc)

    state, view, result, retrying = asyncio.run(deletion())
    if as_json:
        _emit_json(
            {
                "record": record.model_dump(mode="json"),
                "lane": _lane(record.instance_status),
                "audit": [a.__dict__ for a in audit],
                "leaks": [leak.__dict__ for leak in leaks],
                "deletion": {
                    "workflow_id": deletion_workflow_id(name),
                    "status": state,
                    "view": view.model_dump(mode="json") if view else None,
                    "result": result.model_dump(mode="json") if result else None,
                    "retrying": retrying,
                    "ui": settings.temporal.workflow_url(deletion_workflow_id(name)),
                },
            }
        )
        return
    click.echo(
        f"runner {record.name} ({record.scale_set}): {record.instance_status.value} "
        f"[{_lane(record.instance_status)}], agent {record.agent_status.value}, v{record.version}"
    )
    click.echo(
        f"  provider id {terminal_text(record.provider_id or '-')}, GitHub runner "
        f"{record.github_runner_id or '-'} in {terminal_text(record.github_scope or '-')}"
    )
    for problem in record.problems:
        click.echo(f"  problem: {problem}; {what_to_do(record.name)}")
    click.echo("  history:")
    for a in audit[-10:]:
        forced = " FORCED" if a.forced else ""
        why = f": {terminal_text(a.reason)}" if a.reason else ""
        click.echo(
            f"    {a.at:%Y-%m-%d %H:%M:%S} {a.from_status or '(new)'} -> {a.to_status}"
            f" by {terminal_text(a.actor)}{forced}{why}"
        )
    for leak in leaks:
        leaked, why = terminal_text(leak.provider_id), terminal_text(leak.reason)
        click.echo(f"  leaked instance {leaked}: {why}")
    if state is None:
        click.echo("  deletion: none requested")
    else:
        click.echo(f"  deletion {deletion_workflow_id(name)}: {state}")
        if view:
            click.echo("    " + _view_text(view).replace("\n", "\n    "))
        if retrying:
            click.echo("    retrying " + _retrying_text(retrying).replace("\n", "\n    retrying "))
        click.echo(f"  History: {settings.temporal.workflow_url(deletion_workflow_id(name))}")


@runner.command()
@click.argument("name")
@click.argument("agent_status", metavar="STATUS", type=click.Choice([s.value for s in AgentStatus]))
@pass_keeper
def report(keeper: KeeperContext, name: str, agent_status: str) -> None:
    """Record what runner NAME's agent reported. `terminated` also requests the runner's
    deletion (the agent asks; only the deletion workflow writes the lane)."""
    settings = keeper.settings
    _check_name(name)
    store = _store(settings)
    try:
        for _ in range(10):
            record = _require(store, name)
            if record.instance_status is S.DELETED:
                click.echo(f"runner {name} is already deleted; the report changes nothing")
                return
            if store.set_agent_status(
                name, status=AgentStatus(agent_status), version=record.version
            ).ok:
                break
        else:
            raise click.ClickException(f"runner {name}: the record kept changing; retry")
    finally:
        store.close()
    click.echo(f"runner {name}: agent {agent_status}")
    if agent_status != AgentStatus.TERMINATED:
        return

    async def ask() -> None:
        client = await client_for(settings)
        await request_deletion(
            client,
            name,
            DeletionRequest(requested_by=Requester.AGENT, reason="agent reported terminated"),
            task_queue=settings.temporal.family_queue("runners"),
            policy=settings.runners.deletion,
        )

    asyncio.run(ask())
    click.echo(f"runner {name}: deletion requested ({deletion_workflow_id(name)})")
