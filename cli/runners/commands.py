"""`keeper runner`: delete runners through their one deletion workflow, and read the store.

Every command follows cli/output.py: data on stdout, progress and warnings on stderr,
`--json` / `-o json` for one JSON document, exit 0 (done), 1 (failed, including a deletion
that was waited for and failed) or 2 (a bad argument or option).
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import (
    CommandFailed,
    Output,
    UsageProblem,
    json_options,
    rfc3339,
    workflow_keeps_running,
)
from keeper.cli.runners.render import result_text, retrying, retrying_text, view_text
from keeper.cli.workflow_view import (
    Look,
    describe,
    describe_as,
    follow_option,
    is_running,
    query,
    result_of,
    status_name,
)
from keeper.cli.workflow_view import follow as follow_workflow
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.runners.deletion_view import DeletionView
from keeper.domain.runners.deletion_view import result_of as deletion_result
from keeper.domain.runners.models import (
    DELETE_PREFIX,
    DELETION_WORKFLOW_TYPE,
    RUNNER_NAME_RE,
    DeletionOutcome,
    DeletionRequest,
    DeletionResult,
    Requester,
    RunnerRecord,
    deletion_workflow_id,
)
from keeper.domain.runners.record_check import shown, what_to_do
from keeper.domain.runners.status import LIVE, AgentStatus, InstanceStatus, on_lane
from keeper.runtime.runners.requests import (
    Requested,
    RequestNotAnswered,
    RequestRefused,
    request_deletion,
)
from keeper.runtime.settings import Settings
from keeper.store import RunnerStore, StoreUnavailable, open_store

S = InstanceStatus
NAME_RULE = "1-64 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"
REASON_LIMIT = DeletionRequest.model_fields["reason"].metadata[0].max_length
FOLLOW_TICK_S = 0.5


def _check_name(name: str) -> None:
    if not RUNNER_NAME_RE.match(name):
        raise UsageProblem(f"{name!r} is invalid ({NAME_RULE}); nothing was started", "NAME")


def _check_reason(reason: str) -> None:
    if len(reason) > REASON_LIMIT:
        raise UsageProblem(
            f"at most {REASON_LIMIT} characters, got {len(reason)}; nothing was started",
            "--reason",
        )


def _store(settings: Settings) -> RunnerStore:
    try:
        return open_store(settings.runners.store_url)
    except StoreUnavailable as err:
        # The message names the URL with its password hidden; the URL itself is not shown.
        raise CommandFailed(
            str(err), hint="Check runners.store_url (or KEEPER_RUNNER_STORE_URL)."
        ) from None


def _require(store: RunnerStore, name: str) -> RunnerRecord:
    record = store.get(name)
    if record is None:
        raise CommandFailed(
            f"no runner named {name!r} in the runner store ({store.describe()})",
            hint="`keeper runner list` shows the known runners. Nothing was started.",
            runner=name,
        )
    return record


async def ask_deletion(
    client: Client, settings: Settings, name: str, request: DeletionRequest
) -> Requested:
    """The request, answered; a refusal or no answer fails the command saying why."""
    workflow_id = deletion_workflow_id(name)
    try:
        return await request_deletion(
            client, name, request, task_queue=settings.temporal.family_queue("runners")
        )
    except RequestRefused as refused:
        raise CommandFailed(
            f"runner {name}: the deletion refused the request: {terminal_text(str(refused))}",
            hint="`keeper runner status NAME` shows the deletion.",
            workflow_id=workflow_id,
            status="REFUSED",
        ) from None
    except RequestNotAnswered as unanswered:
        raise CommandFailed(str(unanswered), workflow_id=workflow_id) from None


def _lane(status: InstanceStatus) -> str:
    if status in LIVE:
        return "live"
    if status is S.DELETED:
        return "tombstone"
    return "deletion lane" if on_lane(status) else "-"


@dataclass(frozen=True)
class _Seen:
    """A look at a followed deletion: its view and the calls Temporal retries for it."""

    view: DeletionView
    retrying: list[dict[str, Any]]

    @property
    def finishing(self) -> bool:
        """Tombstoned, with only the registration cleanup still running: that changes
        nothing about the runner, so following ends here."""
        return self.view.tombstoned and bool(self.view.background)

    def text(self) -> str:
        if not self.view.status:
            return ""
        text = view_text(self.view)
        if self.retrying:
            text += f"\n{'':16} retrying " + retrying_text(self.retrying)
        return text


async def _look_at(handle: WorkflowHandle[Any, Any]) -> _Seen | None:
    view = await query(handle, "status", DeletionView)
    if view is None:
        return None
    calls: list[dict[str, Any]] = []
    if view.waiting:
        # Attempts are Temporal's retries now: the pending call holds the last answer.
        try:
            calls = retrying(await describe(handle))
        except RPCError:  # the server is restarting: the next look asks again
            calls = []
    return _Seen(view, calls)


@dataclass
class Followed:
    """How a followed deletion ended: its result, or the view of a tombstoned one whose
    registration cleanup goes on in the background."""

    result: DeletionResult
    background: str | None = None
    status: str = "COMPLETED"


async def follow_deletion(handle: WorkflowHandle[Any, DeletionResult], out: Output) -> Followed:
    """Follows the deletion until it ends, or until the record is tombstoned (what is left
    then runs in the background and changes nothing about the runner). Progress goes to
    stderr. Raises CommandFailed when the deletion fails."""
    runner = handle.id.removeprefix(DELETE_PREFIX)
    workflow_keeps_running(
        f"the deletion {handle.id} keeps running",
        handle.id,
        follow=f"keeper runner status {runner} --follow",
    )
    look = Look(
        query=lambda: _look_at(handle),
        page=lambda seen: Text(seen.text()),
        line=_Seen.text,
        until=lambda seen: seen.finishing,
    )
    console = None if out.json else Console(stderr=True, soft_wrap=True)
    seen = await follow_workflow(
        handle, look, console=console, note=out.note, interval=FOLLOW_TICK_S
    )
    if seen is not None and seen.finishing and is_running(await describe(handle)):
        view = seen.view
        ended = deletion_result(view, DeletionOutcome.DELETED)
        return Followed(ended, view.background, status="RUNNING")
    try:
        return Followed(await result_of(handle, out.note))
    except WorkflowFailureError as err:
        raise CommandFailed(
            f"runner {seen.view.runner if seen else handle.id}: deletion failed: "
            f"{terminal_text(_innermost(err))}",
            hint="`keeper runner status NAME` shows the record and the deletion's history.",
            workflow_id=handle.id,
            status="FAILED",
        ) from None


def _innermost(err: BaseException) -> str:
    """The failure that started it: a failed activity's own error, not "Activity task
    failed"."""
    cause: BaseException | None = err
    last = str(err)
    while cause is not None:
        last = str(cause) or last
        cause = getattr(cause, "cause", None) or cause.__cause__
    return last


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
@follow_option(
    "Follow the deletion until the runner is deleted (a registration cleanup after the "
    "tombstone goes on in the background)."
)
@click.option("--reason", default="", help=f"Why (at most {REASON_LIMIT} characters).")
@json_options
@pass_keeper
def delete(
    keeper: KeeperContext, name: str, force: bool, follow: bool, reason: str, out: Output
) -> None:
    """Delete runner NAME: start its deletion workflow, or join the one that runs.

    The deletion answers the request (started, or joined) or refuses it saying why: once
    its record is tombstoned a deletion has finished, and a request changes nothing (a new
    runner that took the name since is asked for again once that deletion has closed).

    Exit status: 0 when the deletion took the request (or, with --follow, the runner is
    deleted), 1 when it refused it, failed or the runner is unknown, 2 on a bad argument. A
    runner already deleted is reported and nothing is started.
    """
    _check_name(name)
    _check_reason(reason)
    settings = keeper.settings
    with closing(_store(settings)) as store:
        record = _require(store, name)
    workflow_id = deletion_workflow_id(name)
    url = settings.temporal.workflow_url(workflow_id)
    if record.instance_status is S.DELETED:
        if out.json:
            out.data(
                {
                    "runner": name,
                    "workflow_id": workflow_id,
                    "ui_url": url,
                    "status": "already_deleted",
                    "deleted_at": record.deleted_at,
                }
            )
        else:
            out.line(
                f"runner {name} was already deleted at {rfc3339(record.deleted_at)}; nothing to do"
            )
        return

    async def run() -> None:
        client = await client_for(settings)
        # Another workflow type squatting on the id is refused before anything is sent.
        await _describe(client.get_workflow_handle(workflow_id), name)
        requested = await ask_deletion(
            client,
            settings,
            name,
            DeletionRequest(requested_by=Requester.OPERATOR, force=force, reason=reason),
        )
        handle, answer = requested.handle, requested.answer
        header = {
            "runner": name,
            "workflow_id": workflow_id,
            "run_id": handle.result_run_id,
            "ui_url": settings.temporal.workflow_url(workflow_id, handle.result_run_id),
            "joined": answer.joined,
            "forced": force,
            "step": answer.view.step.value,
        }
        if not out.json:
            verb = "joined the deletion already running" if answer.joined else "started"
            out.line(f"runner {name}: {verb} ({workflow_id}{', force' if force else ''})")
            out.line(f"ui: {header['ui_url']}")
        if not follow:
            if out.json:
                out.data({**header, "status": "RUNNING"})
            return
        followed = await follow_deletion(handle, out)
        if out.json:
            out.data({**header, "status": followed.status, "result": followed.result})
        else:
            out.line(result_text(followed.result, followed.background))

    asyncio.run(run())


@runner.command(name="list")
@click.option("--scale-set", help="Only this scale set.")
@click.option("--all", "include_deleted", is_flag=True, help="Include tombstones (deleted).")
@json_options
@pass_keeper
def list_runners(
    keeper: KeeperContext, scale_set: str | None, include_deleted: bool, out: Output
) -> None:
    """Runners with their status and lane, and per scale set the live count (what
    autoscaling counts: pending_create, creating, running, stopped, error) and the
    deletion lane (never counted)."""
    with closing(_store(keeper.settings)) as store:
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
    for bad in found.bad:
        out.note(
            f"warning: runner {shown(bad.name)} skipped: {'; '.join(bad.problems)}; "
            f"{what_to_do(bad.name)}"
        )
    if out.json:
        out.data(
            {
                "runners": records,
                "bad_records": [
                    {**bad.__dict__, "what_to_do": what_to_do(bad.name)} for bad in found.bad
                ],
                "scale_sets": summary,
                "leaks": [leak.__dict__ for leak in leaks],
            }
        )
        return
    # Wide when piped, so rows stay one line each for grep and less.
    table_out = Console() if sys.stdout.isatty() else Console(width=200)
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
            rfc3339(r.updated_at),
        )
    if records:
        table_out.print(table)
    else:
        table_out.print("no runners" + (f" in {scale_set}" if scale_set else ""))
    for s, info in summary.items():
        table_out.print(f"{s}: live {info['live']}, deletion lane {info['deletion_lane']}")
    if leaks:
        table_out.print(f"[red]{len(leaks)} leaked instance(s) awaiting the orphan sweep:[/]")
        for leak in leaks:
            leaked, owner, why = (
                terminal_text(v, markup=True) for v in (leak.provider_id, leak.runner, leak.reason)
            )
            table_out.print(f"  {leaked} (runner {owner}): {why}")


@dataclass
class _Deletion:
    status: str | None = None
    run_id: str | None = None
    view: DeletionView | None = None
    result: DeletionResult | None = None
    retrying: list[dict[str, Any]] = field(default_factory=list)


async def _describe(handle: WorkflowHandle[Any, Any], name: str) -> Any:
    """The runner's deletion workflow, refusing (exit 1) another type at its id."""
    return await describe_as(
        handle, DELETION_WORKFLOW_TYPE, name_hint=f"Check the runner name {name!r}"
    )


@runner.command()
@click.argument("name")
@follow_option("First follow the deletion until the runner is deleted (or the deletion fails).")
@json_options
@pass_keeper
def status(keeper: KeeperContext, name: str, follow: bool, out: Output) -> None:
    """Runner NAME: its record, its status history (audit), and its deletion workflow, with
    the next try of any call Temporal retries for it (when, and why)."""
    _check_name(name)
    settings = keeper.settings
    with closing(_store(settings)) as store:
        _require(store, name)
    workflow_id = deletion_workflow_id(name)

    async def deletion() -> _Deletion:
        client = await client_for(settings)
        handle = client.get_workflow_handle(workflow_id, result_type=DeletionResult)
        if follow and await _describe(handle, name) is not None:
            await follow_deletion(handle, out)
        desc = await _describe(handle, name)
        if desc is None:
            return _Deletion()
        found = _Deletion(
            status=status_name(desc),
            run_id=desc.run_id,
            view=await query(handle, "status", DeletionView),
            retrying=retrying(desc),
        )
        if desc.status is WorkflowExecutionStatus.COMPLETED:
            found.result = await handle.result()
        return found

    found = asyncio.run(deletion())
    with closing(_store(settings)) as store:
        record = _require(store, name)
        audit = store.audit(name)
        leaks = [leak for leak in store.leaks(unresolved_only=False) if leak.runner == name]
    url = settings.temporal.workflow_url(workflow_id, found.run_id)
    if out.json:
        out.data(
            {
                "record": record,
                "lane": _lane(record.instance_status),
                "audit": [a.__dict__ for a in audit],
                "leaks": [leak.__dict__ for leak in leaks],
                "deletion": {
                    "workflow_id": workflow_id,
                    "run_id": found.run_id,
                    "status": found.status,
                    "view": found.view,
                    "result": found.result,
                    "retrying": found.retrying,
                    "ui_url": url,
                },
            }
        )
        return
    out.line(
        f"runner {record.name} ({record.scale_set}): {record.instance_status.value} "
        f"[{_lane(record.instance_status)}], agent {record.agent_status.value}, v{record.version}"
    )
    out.line(
        f"  provider id {terminal_text(record.provider_id or '-')}, GitHub runner "
        f"{record.github_runner_id or '-'} in {terminal_text(record.github_scope or '-')}"
    )
    for problem in record.problems:
        out.line(f"  problem: {problem}; {what_to_do(record.name)}")
    out.line("  history:")
    for a in audit[-10:]:
        forced = " FORCED" if a.forced else ""
        why = f": {terminal_text(a.reason)}" if a.reason else ""
        out.line(
            f"    {rfc3339(a.at)} {a.from_status or '(new)'} -> {a.to_status}"
            f" by {terminal_text(a.actor)}{forced}{why}"
        )
    for leak in leaks:
        leaked, why = terminal_text(leak.provider_id), terminal_text(leak.reason)
        out.line(f"  leaked instance {leaked}: {why}")
    if found.status is None:
        out.line("  deletion: none requested")
        return
    out.line(f"  deletion {workflow_id}: {found.status}")
    if found.view:
        out.line("    " + view_text(found.view).replace("\n", "\n    "))
    if found.retrying:
        out.line("    retrying " + retrying_text(found.retrying).replace("\n", "\n    retrying "))
    out.line(f"  ui: {url}")


@runner.command()
@click.argument("name")
@click.argument("agent_status", metavar="STATUS", type=click.Choice([s.value for s in AgentStatus]))
@json_options
@pass_keeper
def report(keeper: KeeperContext, name: str, agent_status: str, out: Output) -> None:
    """Record what runner NAME's agent reported. `terminated` also requests the runner's
    deletion (the agent asks; only the deletion workflow writes the lane)."""
    _check_name(name)
    settings = keeper.settings
    workflow_id = deletion_workflow_id(name)
    with closing(_store(settings)) as store:
        for _ in range(10):
            record = _require(store, name)
            if record.instance_status is S.DELETED:
                if out.json:
                    out.data({"runner": name, "agent_status": agent_status, "recorded": False})
                else:
                    out.line(f"runner {name} is already deleted; the report changes nothing")
                return
            if store.set_agent_status(
                name, status=AgentStatus(agent_status), version=record.version
            ).ok:
                break
        else:
            raise CommandFailed(
                f"runner {name}: the record kept changing", hint="Run the report again."
            )
    requested = agent_status == AgentStatus.TERMINATED
    if requested:

        async def ask() -> None:
            client = await client_for(settings)
            await ask_deletion(
                client,
                settings,
                name,
                DeletionRequest(requested_by=Requester.AGENT, reason="agent reported terminated"),
            )

        asyncio.run(ask())
    if out.json:
        out.data(
            {
                "runner": name,
                "agent_status": agent_status,
                "recorded": True,
                "deletion_requested": requested,
                "workflow_id": workflow_id if requested else None,
            }
        )
        return
    out.line(f"runner {name}: agent {agent_status}")
    if requested:
        out.line(f"runner {name}: deletion requested ({workflow_id})")
