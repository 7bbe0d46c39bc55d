"""One kit for the commands that front a workflow: find it, read it, follow it to its end,
say how it ended, list its kind. Every family's commands use it; each brings only its own
names, query and render functions.

| concept | here |
|---|---|
| a run's status name (RUNNING, COMPLETED, ...) | `status_name`, `is_running` |
| describe by id (None: there is none), refusing another workflow type | `describe`, `describe_as` |
| its query, answered in seconds or not at all (None) | `query` |
| a call that waits through a lost or restarting server | `patiently`, `result_of` |
| how a closed run ended | `ending` -> `Ending`, `closed_status` |
| follow it to its end: redrawn on a terminal, else a stamped line per change | `follow`, `Look` |
| list by a visibility query | `list_query`, `latest_runs` |
| the flag of a command that follows (`--follow`, earlier `--wait`) | `follow_option` |

Connecting to Temporal is cli/connect.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import click
from rich.console import Console, RenderableType
from rich.live import Live
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError, TerminatedError
from temporalio.exceptions import TimeoutError as WorkflowTimedOut
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.output import CommandFailed, rfc3339

T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")
F = TypeVar("F", bound=Callable[..., Any])
Note = Callable[[str], None]

# ---- status names ------------------------------------------------------------------------


def status_name(execution: WorkflowExecution | None) -> str | None:
    """RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED, CONTINUED_AS_NEW, TIMED_OUT; None
    when there is no run (or Temporal gave no status)."""
    if execution is None or execution.status is None:
        return None
    return WorkflowExecutionStatus(execution.status).name


def is_running(execution: WorkflowExecution | None) -> bool:
    return execution is not None and execution.status is WorkflowExecutionStatus.RUNNING


# ---- describe ----------------------------------------------------------------------------


async def describe(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription | None:
    """The workflow's description (its latest run unless the handle names one); None when
    there is no workflow of that id."""
    try:
        return await handle.describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return None
        raise


async def describe_as(
    handle: WorkflowHandle[Any, Any], workflow_type: str, *, name_hint: str
) -> WorkflowExecutionDescription | None:
    """The description of `handle` (None when there is none), refusing any other type.

    Anything can be started by hand at a keeper id; acting on it (a cancel, a status, an
    update) would touch the wrong workflow. `name_hint` says which name the operator should
    check (the slice name, the runner, the job id).
    """
    description = await describe(handle)
    if description is not None and description.workflow_type != workflow_type:
        raise CommandFailed(
            f"workflow {handle.id} is a {description.workflow_type}, not a {workflow_type}; "
            "nothing was done",
            hint=f"{name_hint}: keeper acts only on the workflow type an id belongs to. "
            f"`temporal workflow describe --workflow-id {handle.id}` shows what runs there.",
            workflow_id=handle.id,
            run_id=description.run_id,
            workflow_type=description.workflow_type,
            status=status_name(description),
        )
    return description


# ---- query -------------------------------------------------------------------------------

# A query of a run no worker serves (closed, or its worker restarting) waits for one until
# the RPC deadline: bounded, so a status or a list answers in seconds, not a hang.
QUERY_TIMEOUT = timedelta(seconds=5)


async def query(
    handle: WorkflowHandle[Any, Any],
    name: str,
    result_type: type[T],
) -> T | None:
    """The answer to the workflow's query `name`; None when none comes (no worker serves the
    run, the worker or the server is restarting): the view says less, nothing more."""
    try:
        answer: T = await handle.query(name, result_type=result_type, rpc_timeout=QUERY_TIMEOUT)
    except Exception:  # not answered now; a follow asks again on its next look
        return None
    return answer


# ---- waiting through a lost server ---------------------------------------------------------

# Reconnecting to a restarted server: the first wait, doubling up to the last.
RECONNECT_FIRST = 0.5
RECONNECT_MAX = 10.0
# What a lost server looks like to a call that was in flight or is made meanwhile.
_TRANSIENT = {
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.INTERNAL,
}


def is_transient(err: BaseException) -> bool:
    """A lost or restarting server, as opposed to an answer."""
    return isinstance(err, RPCError) and err.status in _TRANSIENT


async def patiently(call: Callable[[], Awaitable[T]], note: Note) -> T:
    """`call`'s answer, asking again after a backoff while the server is lost (the SDK
    reconnects its channel on the next call), and saying so on `note` (stderr)."""
    delay = RECONNECT_FIRST
    while True:
        try:
            return await call()
        except RPCError as err:
            if not is_transient(err):
                raise
            note(
                f"lost the connection to Temporal ({err.status.name if err.status else '?'}: "
                f"{err.message}); reconnecting in {delay:g}s and waiting on"
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX)


# What the SDK raises when its long poll for the close event ends with no event and no page
# to ask for next. The time-skipping test server ends every such poll that way after 20 s;
# the run has not closed, so the wait asks again.
_NO_CLOSE_YET = "No completion event found"


async def result_of(handle: WorkflowHandle[Any, R], note: Note) -> R:
    """The workflow's result (following the runs it continues as new into), waiting through
    server restarts and through long polls that end empty; a run that did not complete
    raises WorkflowFailureError."""
    while True:
        try:
            return await patiently(handle.result, note)
        except RuntimeError as err:
            if str(err) != _NO_CLOSE_YET:
                raise
            await asyncio.sleep(RECONNECT_FIRST)  # never a busy loop, whatever the server


# ---- how a closed run ended ------------------------------------------------------------------

# A close that is not the workflow's own failure: an operator's cancel, or one Temporal
# imposed (terminate, run timeout). `TimeoutError` is temporalio's, not the builtin.
_CLOSED_BY: dict[type[BaseException], str] = {
    CancelledError: "CANCELED",
    TerminatedError: "TERMINATED",
    WorkflowTimedOut: "TIMED_OUT",
}
CLOSED_WORDS = {"CANCELED": "cancelled", "TERMINATED": "terminated", "TIMED_OUT": "timed out"}


def closed_status(err: WorkflowFailureError) -> str:
    """The status name a run that raised `err` closed with: CANCELED, TERMINATED, TIMED_OUT,
    otherwise FAILED."""
    return next((s for t, s in _CLOSED_BY.items() if isinstance(err.cause, t)), "FAILED")


@dataclass(frozen=True)
class Ending(Generic[R]):
    """How a closed run ended: its result, or the failure that says why there is none."""

    status: str
    result: R | None = None
    failure: WorkflowFailureError | None = None

    @property
    def how(self) -> str | None:
        """`cancelled`, `terminated` or `timed out`; None for a run that completed or failed."""
        return CLOSED_WORDS.get(self.status)

    @property
    def reason(self) -> str | None:
        """The failure's own message (a terminate's reason); None when it completed."""
        if self.failure is None:
            return None
        return str(self.failure.cause or self.failure)

    def words(self, what: str) -> str | None:
        """Why there is no result, in a sentence about `what` (`the watch was terminated:
        <reason>`); None when it completed."""
        if self.failure is None:
            return None
        if self.status == "TERMINATED":
            return f"the {what} was terminated: {self.reason or 'no reason given'}"
        if self.status == "TIMED_OUT":
            return f"the {what} timed out"
        if self.status == "CANCELED":
            return f"the {what} was cancelled"
        return self.reason


async def ending(handle: WorkflowHandle[Any, R]) -> Ending[R]:
    """How the closed run `handle` names ended (that run's own close, not a later one)."""
    try:
        return Ending("COMPLETED", await handle.result(follow_runs=False))
    except WorkflowFailureError as err:
        return Ending(closed_status(err), failure=err)


# ---- following -----------------------------------------------------------------------------

# Between two looks at a running workflow; a close is seen at once (its result is awaited).
INTERVAL = 1.0


@dataclass(frozen=True)
class Look(Generic[V]):
    """How a family shows its workflow while following it: its query (None: no answer now)
    and its two renderings, the terminal's page and the log's line (nothing in the line may
    change while the workflow does not: a countdown there would write a line a second)."""

    query: Callable[[], Awaitable[V | None]]
    page: Callable[[V], RenderableType]
    line: Callable[[V], str]
    # Following stops here, before the workflow closes (the rest changes nothing of note).
    until: Callable[[V], bool] | None = None
    # Views of how the run ended, which the command's closing summary states: no line is
    # written for them. Whether a look catches one between the workflow recording it and
    # closing is a matter of timing; the log would say it twice or once by chance.
    settled: Callable[[V], bool] | None = None


async def follow(
    handle: WorkflowHandle[Any, Any],
    look: Look[V],
    *,
    console: Console | None,
    note: Note,
    interval: float = INTERVAL,
) -> V | None:
    """Shows the workflow until it closes (or `look.until` holds) and returns its last view
    (None: it never answered). On a terminal `console` the page redraws in place; on any
    other (a CI log, a file, a pipe) it writes one line per change, stamped with the time it
    was seen; with no console it only waits. A lost server is waited through, with a note.
    The caller then reads how it ended (`result_of`, `ending`)."""
    closing = asyncio.ensure_future(until_closed(handle, note))
    try:
        if console is not None and console.is_terminal:
            with Live(console=console, auto_refresh=False, transient=False) as live:

                def redraw(view: V) -> None:
                    live.update(look.page(view), refresh=True)

                last = await _looking(closing, look, redraw, interval)
                if closing.done() and (final := await look.query() or last) is not None:
                    redraw(final)
                    last = final
            return last
        said = ""

        def write(view: V) -> None:
            nonlocal said
            if look.settled is not None and look.settled(view):
                return
            text = look.line(view)
            if console is not None and text and text != said:
                console.print(
                    f"{rfc3339(datetime.now(UTC))} {text}",
                    markup=False, highlight=False, emoji=False, soft_wrap=True,
                )  # fmt: skip
                said = text

        return await _looking(closing, look, write, interval)
    finally:
        if not closing.done():
            closing.cancel()


async def _looking(
    closing: asyncio.Future[None], look: Look[V], show: Callable[[V], None], interval: float
) -> V | None:
    view: V | None = None
    while not closing.done():
        # A look with no answer (a worker restarting) shows the last one again.
        view = await look.query() or view
        if view is not None:
            show(view)
            if look.until is not None and look.until(view):
                break
        await asyncio.wait([closing], timeout=interval)
    return view


async def until_closed(handle: WorkflowHandle[Any, Any], note: Note) -> None:
    """Returns once the workflow closed, however it ended (the caller reads how)."""
    try:
        await result_of(handle, note)
    except Exception:  # failed, cancelled, terminated, gone: closed all the same
        return


# ---- lists ---------------------------------------------------------------------------------


def _visibility(status: WorkflowExecutionStatus) -> str:
    # The visibility store spells them Running, ContinuedAsNew, TimedOut.
    return "".join(part.title() for part in status.name.split("_"))


def list_query(
    workflow_type: str,
    running: bool = False,
    *,
    statuses: Iterable[WorkflowExecutionStatus] = (),
    **equal: object,
) -> str:
    """The visibility query of a `keeper ... list`: one workflow type, running runs only
    when asked (or runs in any of `statuses`), and each search attribute given (by name,
    value not None) equal to its value."""
    parts = [f'WorkflowType="{workflow_type}"']
    wanted = [WorkflowExecutionStatus.RUNNING] if running else list(statuses)
    if wanted:
        either = " OR ".join(f'ExecutionStatus="{_visibility(s)}"' for s in wanted)
        parts.append(either if len(wanted) == 1 else f"({either})")
    parts += [f'{name}="{value}"' for name, value in equal.items() if value is not None]
    return " AND ".join(parts)


async def latest_runs(client: Client, query: str, *, limit: int) -> dict[str, WorkflowExecution]:
    """The latest run of each workflow among the first `limit` runs `query` finds, by
    workflow id (a run continued as new shares its workflow's id)."""
    latest: dict[str, WorkflowExecution] = {}
    async for wf in client.list_workflows(query, limit=limit):
        seen = latest.get(wf.id)
        if seen is None or wf.start_time > seen.start_time:
            latest[wf.id] = wf
    return latest


# ---- the flag ------------------------------------------------------------------------------

# The flag's earlier name, still taken: scripts written for it keep working.
EARLIER = "--wait"


class FollowOption(click.Option):
    """`--follow` (`--follow/--no-follow`), also taken as `--wait` (`--wait/--no-wait`). The
    help shows `--follow` and names `--wait` in its text."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        opts, secondary = self.opts, self.secondary_opts
        self.opts = [o for o in opts if o != EARLIER]
        self.secondary_opts = [o for o in secondary if o != f"--no-{EARLIER[2:]}"]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts, self.secondary_opts = opts, secondary


def follow_option(
    help: str, *, default: bool = False, negatable: bool = False, dest: str = "follow"
) -> Callable[[F], F]:
    """The flag of a command that follows a workflow to its end: `--follow` (with
    `--no-follow` when `negatable`), passed as `dest`; `--wait` (`--no-wait`) is the same."""
    if negatable:
        names = ["--follow/--no-follow", f"{EARLIER}/--no-{EARLIER[2:]}"]
        same = f"`{EARLIER}` / `--no-{EARLIER[2:]}` are the same."
    else:
        names = ["--follow", EARLIER]
        same = f"`{EARLIER}` is the same."
    return click.option(
        *names,
        dest,
        cls=FollowOption,
        is_flag=True,
        default=default,
        show_default=default,
        help=f"{help} {same}",
    )
