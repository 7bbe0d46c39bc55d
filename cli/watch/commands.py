"""`keeper job`: watch an iris job, see what its watch knows, answer its proposals, list the
watches, end one, and launch a job watched from the start.

A watch is the JobWatch workflow `job-watch-<job id>` on the watch family's task queue: one
per job. Every command speaks as cli/output.py says.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import UTC, datetime
from typing import Any, get_args

import click
from rich.console import Console
from rich.text import Text
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import (
    FAILED,
    OK,
    CommandFailed,
    OneOf,
    Output,
    UsageProblem,
    exits,
    json_options,
    to_jsonable,
)
from keeper.cli.watch import launch
from keeper.cli.watch.lookup import (
    CLOSED_EXIT,
    Watch,
    ending,
    find_watch,
    must_find,
    query_view,
    reread,
    status_name,
)
from keeper.cli.watch.render import (
    as_decided,
    decided_text,
    follow_line,
    list_rows,
    result_text,
    status_lines,
)
from keeper.cli.workflow_view import (
    Look,
    follow,
    follow_option,
    latest_runs,
    list_query,
    until_closed,
)
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.watch.calls import JobWatchInput, JobWatchResult
from keeper.domain.watch.models import (
    APPROVE_UPDATE,
    COMMAND_ARG_MAX,
    COMMAND_ARGS_MAX,
    DENY_UPDATE,
    WATCH_WORKFLOW_TYPE,
    Decision,
    JobIdError,
    Proposal,
    ProposalKind,
    ProposalState,
    Verdict,
    WatchView,
    check_job_id,
    watch_id,
)
from keeper.domain.watch.names import JobPhase
from keeper.domain.watch.relaunch import HeldLaunch, secret_args
from keeper.runtime.settings import Settings
from keeper.runtime.watch import search_attributes as sa
from keeper.runtime.watch.deps import iris_controller
from keeper.runtime.watch.iris_errors import IrisError

BY_LIMIT = JobWatchInput.model_fields["requested_by"].metadata[0].max_length
NOTE_LIMIT = Decision.model_fields["note"].metadata[0].max_length
PROPOSAL_LIMIT = Decision.model_fields["proposal"].metadata[0].max_length
# The iris job states as a watch's KeeperStep search attribute holds them (lower case),
# `unknown` before its first check.
JOB_STATES = (*(phase.value for phase in JobPhase), "unknown")
# An update waits for a worker to run the watch and, for an approval, for the step to be
# carried out (a stop, or a stop and a relaunch, each retried): bounded, so a stopped worker
# is a clear failure and not a hang.
UPDATE_TIMEOUT = 180.0


def _job(value: str) -> str:
    try:
        return check_job_id(value)
    except JobIdError as err:
        raise UsageProblem(f"{err}; nothing was done", "JOB_ID") from None


def _operator(by: str | None, required: bool = False) -> str:
    name = (by if by is not None else os.environ.get("USER", "")).strip()
    if required and not name:
        raise UsageProblem("name who decides: --by NAME (USER is not set)", "--by")
    if len(name) > BY_LIMIT:
        raise UsageProblem(f"at most {BY_LIMIT} characters, got {len(name)}", "--by")
    return name


def _closed_exit(watch: Watch) -> int:
    status = watch.description.status
    return CLOSED_EXIT.get(status, FAILED) if status is not None else FAILED


async def _ended(watch: Watch) -> tuple[WatchView | None, JobWatchResult | None, str | None]:
    """What the watch knows (None when no worker answers) and, once closed, how it ended."""
    view = await query_view(watch.handle if watch.running else watch.run)
    result, error = (None, None) if watch.running else await ending(watch)
    return view, result, error


async def _state_payload(watch: Watch, settings: Settings) -> dict[str, Any]:
    """`status --json`: the shared fields, the watch's view under `view` (as `watch --json`
    and the other families' status documents have it; null when no worker answers) and,
    once closed, its result or error."""
    view, result, error = await _ended(watch)
    payload: dict[str, Any] = {
        **watch.fields(settings),
        "started_at": watch.description.start_time,
        "closed_at": watch.description.close_time,
        "view": to_jsonable(view) if view is not None else None,
        "result": result,
    }
    if error is not None:
        payload["error"] = {"message": error}
    return payload


async def _show_status(watch: Watch, settings: Settings, out: Output) -> None:
    if out.json:
        out.data(await _state_payload(watch, settings))
        return
    for text in status_lines(watch.job_id, watch.status, *await _ended(watch)):
        out.line(text)
    out.line(f"ui: {watch.fields(settings)['ui_url']}")


async def _follow_to_close(watch: Watch, settings: Settings, out: Output) -> int:
    """`--follow`: lines (stdout, or stderr under --json) until the watch closes; then how
    it ended, and the exit code that says whether it ended well."""
    # Created here: click's test runner swaps stdout and stderr for each invocation.
    console = Console(stderr=out.json, soft_wrap=True)
    # The watch as it goes: the status page, or its line per change.
    look: Look[WatchView] = Look(
        query=lambda: query_view(watch.handle),
        page=lambda view: Text("\n".join(status_lines(watch.job_id, "RUNNING", view))),
        line=follow_line,
    )
    await follow(watch.handle, look, console=console, note=out.note)
    # result() followed the runs a watch continues as new into: this is its last one.
    closed = await reread(watch, out.note)
    if out.json:
        out.data(await _state_payload(closed, settings))
    else:
        result, error = await ending(closed)
        how = result_text(result) if result else (terminal_text(error) if error else "")
        out.line(f"{closed.job_id}: watch {closed.status}" + (f"; {how}" if how else ""))
    return _closed_exit(closed)


async def _then(watch: Watch, settings: Settings, out: Output, follow_it: bool) -> int:
    """After `watch` or `run`: the watch's UI, then how to see it, or (--follow) its end."""
    out.line(f"ui: {watch.fields(settings)['ui_url']}")
    if not follow_it:
        out.note(f"see it with `keeper job status {watch.job_id}` (--follow to follow it)")
        return OK
    return await _follow_to_close(watch, settings, out)


@click.group()
def job() -> None:
    """Watch long iris/zephyr jobs: liveness verdicts with evidence, and proposals to stop
    or restart that wait for an operator.

    A watch is the JobWatch workflow job-watch-<job id>: one per job, judging the job's
    latest attempt. It only notifies; it stops or restarts a job only after `keeper job
    approve`. See docs/watch.md.

    \b
    Example:
      keeper job watch /alice/tokenize-fineweb
      keeper job status /alice/tokenize-fineweb
    """


@job.command()
@click.argument("job_id", metavar="JOB_ID")
@click.option(
    "--by", default=None, help=f"Who asks (default: $USER; at most {BY_LIMIT} characters)."
)
@follow_option("Then follow it as `status --follow` does.", dest="follow_it")
@json_options
@pass_keeper
@exits
async def watch(
    keeper: KeeperContext, out: Output, job_id: str, by: str | None, follow_it: bool
) -> int:
    """Start watching JOB_ID, an iris job id (/<user>/<job>).

    Idempotent: a watch already running is left as it is and shown (exit 0); a closed
    watch of the same job is started afresh. A bad JOB_ID exits 2 and starts nothing; a
    job iris does not know (GetJobStatus at watch.controller_url) exits 1 and starts nothing.

    \b
    Example:
      keeper job watch /alice/tokenize-fineweb --by alice
    """
    settings = keeper.settings
    job_id = _job(job_id)
    requested_by = _operator(by)
    client = await client_for(settings)
    found = await find_watch(client, job_id)
    if found is None or not found.running:
        # Only a job iris knows is watched: a watch of no job would end `missing` later.
        unchecked = await launch.require_known_job(settings, job_id)
        if unchecked:
            out.note(f"warning: {unchecked}")
    watch, started = await start_watch(client, settings, job_id, requested_by)
    fields = watch.fields(settings)
    view = None if started else await query_view(watch.handle)
    if out.json and not follow_it:
        out.data({**fields, "started": started, "view": view})
        return OK
    if started:
        out.line(f"watching {job_id}: {watch.handle.id} (run {watch.description.run_id})")
    else:
        state = (
            f" (phase {view.phase.value}, job {terminal_text(view.job_state)}, verdict "
            f"{view.verdict})"
            if view
            else ""
        )
        out.line(f"already watching {job_id}: {watch.handle.id} {watch.status}{state}")
    return await _then(watch, settings, out, follow_it)


async def start_watch(
    client: Client,
    settings: Settings,
    job_id: str,
    requested_by: str,
    held: HeldLaunch | None = None,
) -> tuple[Watch, bool]:
    """Starts the job's watch, or finds the one running: (the watch, whether it started).
    `held`: the request keeper launched the job with, for a restart."""
    try:
        await client.start_workflow(
            WATCH_WORKFLOW_TYPE,
            JobWatchInput(job_id=job_id, requested_by=requested_by, launch=held),
            id=watch_id(job_id),
            task_queue=settings.temporal.family_queue("watch"),
            # One watch per job: never a second beside a running one, but a closed watch's
            # id may be started again.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            search_attributes=sa.for_job(job_id),
            static_summary=f"watch {job_id}",
            static_details=(
                f"Watches the iris job {job_id} for {requested_by or 'an operator'}: liveness "
                f"verdicts with evidence; stops and restarts wait for `keeper job approve`."
            ),
            result_type=JobWatchResult,
        )
        started = True
    except WorkflowAlreadyStartedError:
        started = False
    return await must_find(client, job_id), started


@job.command()
@click.argument("job_id", metavar="JOB_ID")
@follow_option(
    "Follow the watch until it closes: one line per change (redrawn on a terminal); exit 0 "
    "if it completed (or was unwatched), 1 if it failed, was terminated or timed out.",
    dest="follow_it",
)
@json_options
@pass_keeper
@exits
async def status(keeper: KeeperContext, out: Output, job_id: str, follow_it: bool) -> int:
    """Show what the watch of JOB_ID knows: phase, job state, verdict and its evidence, the
    attempt judged, progress, stale coordinators, escalations, the pending proposals with
    the commands that answer them, and the last timeline entries. A closed watch shows how
    it ended.

    \b
    Example:
      keeper job status /alice/tokenize-fineweb --follow
    """
    settings = keeper.settings
    job_id = _job(job_id)
    client = await client_for(settings)
    watch = await must_find(client, job_id)
    if follow_it and watch.running:
        return await _follow_to_close(watch, settings, out)
    await _show_status(watch, settings, out)
    return _closed_exit(watch) if follow_it else OK


def _one(value: str | list[str] | None) -> str | None:
    """A keyword, or a one-value keyword list (how SQL visibility holds some attributes)."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


@job.command(name="list")
@click.option(
    "--verdict", type=OneOf(get_args(Verdict)), default=None, help="Only watches with this verdict."
)
@click.option(
    "--state", type=OneOf(JOB_STATES), default=None,
    help="Only watches of jobs in this iris state (lower case, e.g. running, failed).",
)  # fmt: skip
@click.option("--all", "show_all", is_flag=True, help="Closed watches too, not only running.")
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
    help="Show at most this many watches, newest first.",
)  # fmt: skip
@json_options
@pass_keeper
@exits
async def list_watches(
    keeper: KeeperContext,
    out: Output,
    verdict: str | None,
    state: str | None,
    show_all: bool,
    limit: int,
) -> int:
    """List the job watches (running ones unless --all): job, job state, verdict, status,
    started. Read from the search attributes, so a long list costs one call.

    \b
    Example:
      keeper job list --verdict stalled
    """
    settings = keeper.settings
    client = await client_for(settings)
    # OneOf gives each value as its choices spell it: lower case, as the attributes hold it.
    equal = {sa.VERDICT.name: verdict, sa.KEEPER_STEP.name: state}
    query = list_query(WATCH_WORKFLOW_TYPE, not show_all, **equal)
    # One row per watch: its latest run.
    latest = await latest_runs(client, query, limit=limit * 4 if show_all else limit)
    found = sorted(latest.values(), key=lambda w: w.start_time, reverse=True)[:limit]
    rows = []
    for wf in found:
        attrs = wf.typed_search_attributes
        rows.append(
            {
                "job_id": attrs.get(sa.JOB_ID),
                "job_state": attrs.get(sa.KEEPER_STEP),
                "verdict": _one(attrs.get(sa.VERDICT)),
                "status": status_name(wf),
                "started_at": wf.start_time,
                "closed_at": wf.close_time,
                "workflow_id": wf.id,
                "run_id": wf.run_id,
                "ui_url": settings.temporal.workflow_url(wf.id, wf.run_id),
            }
        )
    if out.json:
        out.data({"watches": rows})
        return OK
    if not rows:
        out.note(
            "no watches"
            + ("" if show_all else " running (--all shows closed ones)")
            + "; start one with `keeper job watch JOB_ID`"
        )
        return OK
    for text in list_rows(rows):
        out.line(text)
    return OK


def _resolve(view: WatchView | None, job_id: str, wanted: str) -> str:
    """A proposal id as given, or the one pending proposal of a kind (`stop`, `restart`)."""
    kinds = {k.value: k for k in ProposalKind}
    if wanted.lower() not in kinds:
        return wanted
    if view is None:
        raise CommandFailed(
            f"the watch of {job_id} answers no query, so {wanted!r} cannot be resolved to a "
            "proposal",
            hint="Name the proposal by its id (e.g. restart-1), or check that a worker serves "
            "the watch family (`keeper worker --check`).",
            job_id=job_id,
        )
    kind = kinds[wanted.lower()]
    matching = [p.id for p in view.pending() if p.kind is kind]
    if len(matching) == 1:
        return matching[0]
    pending = ", ".join(p.id for p in view.pending()) or "none"
    raise CommandFailed(
        f"{'no' if not matching else 'more than one'} pending {kind.value} proposal for "
        f"{job_id} (pending: {pending}); nothing was decided",
        hint=f"`keeper job status {job_id}` shows the pending proposals; name one by its id.",
        job_id=job_id,
        pending=[p.id for p in view.pending()],
    )


def decision_command(update: str, verb: str) -> click.Command:
    """`approve` and `deny`: the same command, two updates."""

    @click.command(name=update)
    @click.argument("job_id", metavar="JOB_ID")
    @click.argument("proposal", metavar="PROPOSAL")
    @click.option(
        "--by", default=None,
        help=f"Who decides (default: $USER; 1 to {BY_LIMIT} characters).",
    )  # fmt: skip
    @click.option(
        "--note", default="", help=f"Why, shown on the proposal (at most {NOTE_LIMIT} characters)."
    )
    @json_options
    @pass_keeper
    @exits
    async def decide(
        keeper: KeeperContext,
        out: Output,
        job_id: str,
        proposal: str,
        by: str | None,
        note: str,
        command: tuple[str, ...] = (),
    ) -> int:
        settings = keeper.settings
        job_id = _job(job_id)
        relaunch = _relaunch_command(command)
        wanted = proposal.strip()
        if not wanted or len(wanted) > PROPOSAL_LIMIT:
            raise UsageProblem(
                f"a proposal id (e.g. restart-1) or kind (stop, restart) of 1 to "
                f"{PROPOSAL_LIMIT} characters",
                "PROPOSAL",
            )
        who = _operator(by, required=True)
        if len(note) > NOTE_LIMIT:
            raise UsageProblem(f"at most {NOTE_LIMIT} characters, got {len(note)}", "--note")

        wanted_state = ProposalState.DONE if update == APPROVE_UPDATE else ProposalState.DENIED

        def answer(watch: Watch, proposal: Proposal, already: bool) -> int:
            """The proposal as decided, and whether that is what this command asked for."""
            if out.json:
                out.data(
                    {**watch.fields(settings), "proposal": proposal, "already_decided": already}
                )
            else:
                out.line(decided_text(proposal))
            if already:
                out.note(
                    f"proposal {proposal.id} was already {as_decided(proposal)}; this {update} "
                    "changed nothing"
                )
            # An approval succeeds when its step was carried out; one that failed (or was
            # cut short, or was denied or withdrawn first) is the operation failing, with the
            # reason in the proposal.
            if proposal.state is not wanted_state:
                if not already:
                    out.note(
                        f"{proposal.id} is {proposal.state.value}: "
                        f"{terminal_text(proposal.outcome or '')}; see `keeper job status {job_id}`"
                    )
                return FAILED
            return OK

        async def decided_elsewhere(client: Client, proposal_id: str) -> int | None:
            """Another decision on the proposal got there first (a second `approve` at
            once, say): wait for it to be carried out, then answer with it. None when the
            watch cannot tell (no such proposal, or no worker answers)."""
            loop = asyncio.get_running_loop()
            deadline = loop.time() + UPDATE_TIMEOUT
            while True:
                watch = await find_watch(client, job_id)
                if watch is None:
                    return None
                view = await query_view(watch.handle if watch.running else watch.run)
                found = next(
                    (p for p in (view.proposals if view else []) if p.id == proposal_id), None
                )
                if found is None or found.state is ProposalState.PENDING:
                    return None
                settling = found.state is ProposalState.APPROVED and watch.running
                if not settling or loop.time() > deadline:
                    return answer(watch, found, already=True)
                await asyncio.sleep(0.5)

        client = await client_for(settings)
        watch = await must_find(client, job_id)
        if not watch.running:
            settled = await decided_elsewhere(client, wanted)
            if settled is not None:
                return settled
            raise CommandFailed(
                f"the watch of {job_id} is closed ({watch.status}); nothing was {verb}",
                hint=f"`keeper job status {job_id}` shows how it ended.",
                **watch.fields(settings),
            )
        view = await query_view(watch.handle)
        proposal_id = _resolve(view, job_id, wanted)
        decision = Decision(proposal=proposal_id, by=who, note=note, command=relaunch)
        try:
            decided = await asyncio.wait_for(
                watch.handle.execute_update(update, decision, result_type=Proposal),
                UPDATE_TIMEOUT,
            )
        except (WorkflowUpdateFailedError, RPCError) as err:
            if isinstance(err, RPCError) and err.status is not RPCStatusCode.NOT_FOUND:
                raise
            # Refused, or the watch closed between this command's look and its update
            # (another decision carried out, or the job ended): what became of the proposal.
            settled = await decided_elsewhere(client, proposal_id)
            if settled is not None:
                return settled
            if isinstance(err, WorkflowUpdateFailedError):
                cause = err.cause
                why = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
                raise CommandFailed(
                    f"the watch of {job_id} refused: {terminal_text(why)}; nothing was {verb}",
                    hint=f"`keeper job status {job_id}` shows the pending proposals.",
                    **watch.fields(settings),
                    proposal=proposal_id,
                ) from None
            closed = await must_find(client, job_id)
            raise CommandFailed(
                f"the watch of {job_id} closed ({closed.status}) before the {update} of "
                f"{proposal_id} reached it; nothing was {verb}",
                hint=f"`keeper job status {job_id}` shows how it ended.",
                **closed.fields(settings),
                proposal=proposal_id,
            ) from None
        except TimeoutError:
            raise CommandFailed(
                f"no worker took the {update} of {proposal_id} within {UPDATE_TIMEOUT:g}s; "
                f"it may still be {verb} when one does",
                hint=f"Check that a worker serves {settings.temporal.family_queue('watch')} "
                "(`keeper worker --check`), then `keeper job status " + job_id + "`.",
                **watch.fields(settings),
                proposal=proposal_id,
            ) from None
        return answer(watch, decided, already=False)

    decide.help = (
        f"{update.capitalize()} a proposal of the watch of JOB_ID: PROPOSAL is its id "
        f"(restart-1) or its kind (stop, restart) when exactly one pending proposal has it. "
        f"The watch refuses an unknown or already decided proposal (exit 1).\n\n"
        f"\b\nExample:\n  keeper job {update} /alice/tokenize-fineweb restart-1 "
        f"--by alice --note 'stuck behind one shard'"
    )
    if update == APPROVE_UPDATE:
        decide.params.append(
            click.Argument(["command"], nargs=-1, required=False, metavar="[-- CMD...]")
        )
        decide.help += (
            "\n\nA restart relaunches the request `keeper job run` launched the job with. "
            "For a job keeper did not launch (iris returns its request with secrets "
            "[REDACTED] and no workdir files, so keeper never resends it), give the command "
            "after --: it runs with the job's resources and constraints as iris has them; "
            "environment values iris redacted are not sent. The command is kept in the "
            "watch's history, so one that looks like it carries a secret is refused (exit 2)."
            "\n\n\b\nExample:\n  keeper job approve /alice/tokenize restart-1 --by alice "
            "-- python tokenize.py --resume"
        )
    return decide


def _relaunch_command(command: tuple[str, ...]) -> list[str] | None:
    """The command given after `--` at approval, checked as the watch checks it."""
    if not command:
        return None
    if len(command) > COMMAND_ARGS_MAX:
        raise UsageProblem(f"at most {COMMAND_ARGS_MAX} arguments, got {len(command)}", "CMD")
    for i, arg in enumerate(command, 1):
        if not arg or len(arg) > COMMAND_ARG_MAX:
            raise UsageProblem(
                f"argument {i} is empty or longer than {COMMAND_ARG_MAX} characters", "CMD"
            )
    secret = secret_args(list(command))
    if secret:
        raise UsageProblem(
            f"argument {', '.join(map(str, secret))} looks like a secret, and the command is "
            "kept in the watch's history; pass secrets in the job's environment instead "
            "(keeper job run --env NAME); nothing was approved",
            "CMD",
        )
    return list(command)


job.add_command(decision_command(APPROVE_UPDATE, "approved"))
job.add_command(decision_command(DENY_UPDATE, "denied"))


@job.command()
@click.argument("job_id", metavar="JOB_ID")
@json_options
@pass_keeper
@exits
async def unwatch(keeper: KeeperContext, out: Output, job_id: str) -> int:
    """Stop watching JOB_ID: the watch is cancelled and this waits for it to close. The
    job itself keeps running; nothing is sent to iris. A watch already closed is left as it
    is (exit 0).

    \b
    Example:
      keeper job unwatch /alice/tokenize-fineweb
    """
    settings = keeper.settings
    job_id = _job(job_id)
    client = await client_for(settings)
    watch = await must_find(client, job_id)
    was_running = watch.running
    if was_running:
        await watch.handle.cancel()
        # Cancelled (or failed meanwhile): closed all the same; how is shown after.
        await until_closed(watch.handle, out.note)
        watch = await must_find(client, job_id)
    result, error = await ending(watch)
    fields = watch.fields(settings)
    if was_running and watch.status not in ("COMPLETED", "CANCELED"):
        raise CommandFailed(
            f"the watch of {job_id} ended {watch.status} before the cancel took effect: "
            f"{terminal_text(error or '')}",
            hint=f"`keeper job status {job_id}` shows how it ended; the job itself was "
            "not touched.",
            **fields,
        )
    if out.json:
        out.data({**fields, "cancelled": was_running, "result": result})
    else:
        said = "unwatched" if was_running else "the watch was already closed"
        out.line(f"{job_id}: {said} ({watch.status}); the job itself keeps running")
        if result is not None:
            out.line(f"result: {result_text(result)}")
    return OK


@job.command(context_settings={"allow_interspersed_args": False})
@click.argument("command", metavar="-- CMD...", nargs=-1, required=True)
@click.option("--name", default=None, help="The iris job name (default: <program>-<UTC time>).")
@click.option("--memory", default=None, help="Memory per task, e.g. 5GB, 512MB (binary units).")
@click.option("--region", default=None, help="Run only in this region (e.g. us-central1).")
@click.option(
    "--env", "env", multiple=True, metavar="NAME[=VALUE]",
    help="Set an environment variable of the job (repeatable); NAME alone passes keeper's own "
    "$NAME. A request with secrets is kept whole in keeper's launch store (watch.store_url) "
    "for a restart, and redacted in the watch's history.",
)  # fmt: skip
@click.option(
    "--by", default=None, help=f"Who asks (default: $USER; at most {BY_LIMIT} characters)."
)
@follow_option("Then follow the watch as `status --follow` does.", dest="follow_it")
@json_options
@pass_keeper
@exits
async def run(
    keeper: KeeperContext,
    out: Output,
    command: tuple[str, ...],
    name: str | None,
    memory: str | None,
    region: str | None,
    env: tuple[str, ...],
    by: str | None,
    follow_it: bool,
) -> int:
    """Launch CMD as an iris job (LaunchJob at watch.controller_url) and watch it from the
    start, as `keeper job watch` does. Temporal is reached first, so a job is never launched
    that keeper could not watch. Exit 1 names what iris said, and whether the job may exist.

    \b
    Example:
      keeper job run --name tokenize --memory 5GB --region us-central1 -- python tokenize.py
    """
    settings = keeper.settings
    argv = list(command)
    job_name = launch.job_name(name, argv, datetime.now(UTC))
    request = launch.launch_request(
        job_name,
        argv,
        launch.memory_bytes(memory) if memory is not None else None,
        launch.region(region) if region is not None else None,
        launch.env_vars(env),
    )
    requested_by = _operator(by)

    client = await client_for(settings)
    token = launch.iris_token(settings)
    # Kept before the launch: a restart resends this request, never iris's redacted one.
    held = launch.keep_launch(settings, request, f"run/{uuid.uuid4().hex}")
    async with iris_controller(settings.watch, token) as iris:
        try:
            job_id = await iris.launch_job(request)
        except IrisError as err:
            raise launch.launch_failure(settings, job_name, err) from None
    launched = {"name": job_name, "controller_url": settings.watch.controller_url}
    try:
        job_id = check_job_id(job_id)
    except JobIdError as err:
        raise CommandFailed(
            f"iris launched {job_name} but answered a job id keeper cannot watch: {err}",
            hint="The job runs unwatched; stop it in iris, or report the id to keeper's "
            "maintainers.",
            **launched,
        ) from None
    out.note(f"launched {job_id} at {settings.watch.controller_url}")
    try:
        watch, started = await start_watch(client, settings, job_id, requested_by, held)
    except Exception as err:
        raise CommandFailed(
            f"launched {job_id}, but its watch could not be started: {err}",
            hint=f"The job runs unwatched: watch it with `keeper job watch {job_id}`.",
            job_id=job_id,
            **launched,
        ) from None
    fields = watch.fields(settings)
    if out.json and not follow_it:
        out.data({**fields, **launched, "started": started, "secrets_kept": held.secrets})
        return OK
    out.line(f"launched {job_id}; watching it: {watch.handle.id} (run {watch.description.run_id})")
    return await _then(watch, settings, out, follow_it)
