"""The kit every command that fronts a workflow uses (cli/workflow_view.py), checked without a
server: one flag follows in every family (`--follow`, and `--wait`, its earlier name), the
follow loop draws a page on a terminal and a stamped line per change elsewhere and waits
through a lost server, a closed run's ending reads the same in every family, the list query
has one shape, and the commands start workflows by the type names the worker registers."""

from __future__ import annotations

import asyncio
import io
import re
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.text import Text
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError, TimeoutType
from temporalio.exceptions import TimeoutError as WorkflowTimedOut
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli import workflow_view as wv
from keeper.cli.main import cli
from keeper.cli.output import CommandFailed
from keeper.domain.reclaim.models import RECLAIM_WORKFLOW_TYPE
from keeper.domain.runners.models import DELETION_WORKFLOW_TYPE
from keeper.domain.tpu.naming import (
    BOOTSTRAP_WORKFLOW_TYPE,
    SWEEPER_WORKFLOW_TYPE,
    TEARDOWN_WORKFLOW_TYPE,
)
from keeper.domain.watch.models import WATCH_WORKFLOW_TYPE
from keeper.workflows.reclaim.job_reclaim import JobReclaim
from keeper.workflows.runners.deletion import RunnerDeletion
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from keeper.workflows.tpu.sweeper import TpuSweeper
from keeper.workflows.tpu.teardown import TpuSliceTeardown
from keeper.workflows.watch.job_watch import JobWatch
from tests.common.test_cli_conventions import subcommands

RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
S = WorkflowExecutionStatus

# ---- the flag ------------------------------------------------------------------------------

BOOTSTRAP_ARGS = ("s-1", "-a", "v4-8", "-c", "reserved", "--reservation", "r")
# Every command that follows a workflow to its end: its arguments, the parameter the flag
# sets, whether it follows unless told not to, and whether it takes --no-follow.
FOLLOWING = [
    (("tpu", "bootstrap"), BOOTSTRAP_ARGS, "follow", False, True),
    (("tpu", "status"), ("s-1",), "follow", False, False),
    (("tpu", "cancel"), ("s-1",), "follow", True, True),
    (("tpu", "delete"), ("s-1",), "follow", True, True),
    (("runner", "delete"), ("r-1",), "follow", False, False),
    (("runner", "status"), ("r-1",), "follow", False, False),
    (("reclaim", "status"), ("gpu-node-07", "7"), "follow", False, False),
    (("job", "watch"), ("/alice/x",), "follow_it", False, False),
    (("job", "status"), ("/alice/x",), "follow_it", False, False),
    (("job", "run"), ("--", "python", "x.py"), "follow_it", False, False),
]


def _parsed(path: tuple[str, ...], args: tuple[str, ...], *flags: str) -> dict[str, Any]:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = subcommands(command)[name]
    # Options before the arguments: `job run` takes everything after its first argument.
    context = command.make_context(" ".join(path), [*flags, *args])
    return dict(context.params)


@pytest.mark.parametrize(
    ("path", "args", "dest", "default", "negatable"),
    FOLLOWING,
    ids=[" ".join(p) for p, *_ in FOLLOWING],
)
def test_follow_and_its_earlier_name_wait_set_the_same_flag_in_every_family(
    path: tuple[str, ...], args: tuple[str, ...], dest: str, default: bool, negatable: bool
) -> None:
    assert _parsed(path, args)[dest] is default
    assert _parsed(path, args, "--follow")[dest] is True
    assert _parsed(path, args, "--wait")[dest] is True
    if negatable:
        assert _parsed(path, args, "--no-follow")[dest] is False
        assert _parsed(path, args, "--no-wait")[dest] is False
    else:
        with pytest.raises(click.NoSuchOption):
            _parsed(path, args, "--no-follow")
    help_text = _help(path)
    assert "--follow" in help_text and "`--wait`" in help_text, help_text
    # The help shows one name for the flag; the earlier one only in its text.
    assert not re.search(r"^\s+--wait", help_text, re.M), help_text


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_every_command_that_follows_is_in_the_table() -> None:
    """A new command with a follow flag gets its row above (and so the same checks)."""
    found = set()
    for group_name, group in subcommands(cli).items():
        if not isinstance(group, click.Group):
            continue
        for name, command in subcommands(group).items():
            if any(isinstance(p, wv.FollowOption) for p in command.params):
                found.add((group_name, name))
            assert not any("--wait" in getattr(p, "opts", ()) and not isinstance(
                p, wv.FollowOption) for p in command.params), (group_name, name)  # fmt: skip
    assert found == {path for path, *_ in FOLLOWING}


# ---- workflow types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "workflow_class"),
    [
        (BOOTSTRAP_WORKFLOW_TYPE, TpuSliceBootstrap),
        (TEARDOWN_WORKFLOW_TYPE, TpuSliceTeardown),
        (SWEEPER_WORKFLOW_TYPE, TpuSweeper),
        (DELETION_WORKFLOW_TYPE, RunnerDeletion),
        (RECLAIM_WORKFLOW_TYPE, JobReclaim),
        (WATCH_WORKFLOW_TYPE, JobWatch),
    ],
)
def test_the_type_names_the_commands_start_and_read_are_the_workflows_own(
    name: str, workflow_class: type
) -> None:
    definition = workflow._Definition.must_from_class(workflow_class)
    assert definition.name == name


# ---- status names, lists ---------------------------------------------------------------------


def test_a_status_name_is_the_enum_name_and_none_without_a_run() -> None:
    assert wv.status_name(SimpleNamespace(status=S.TIMED_OUT)) == "TIMED_OUT"
    assert wv.status_name(SimpleNamespace(status=None)) is None
    assert wv.status_name(None) is None
    assert wv.is_running(SimpleNamespace(status=S.RUNNING))
    assert not wv.is_running(None)


@pytest.mark.parametrize(
    ("args", "kwargs", "query"),
    [
        (("JobWatch",), {}, 'WorkflowType="JobWatch"'),
        (("JobWatch", True), {}, 'WorkflowType="JobWatch" AND ExecutionStatus="Running"'),
        (
            ("JobReclaim", True),
            {"Node": "n-1", "JobId": 7, "KeeperStep": None},
            'WorkflowType="JobReclaim" AND ExecutionStatus="Running" AND Node="n-1" AND JobId="7"',
        ),
        (
            ("TpuSliceBootstrap",),
            {"statuses": (S.RUNNING, S.COMPLETED)},
            'WorkflowType="TpuSliceBootstrap" AND '
            '(ExecutionStatus="Running" OR ExecutionStatus="Completed")',
        ),
        (
            ("X",),
            {"statuses": (S.TIMED_OUT, S.CONTINUED_AS_NEW)},
            'WorkflowType="X" AND (ExecutionStatus="TimedOut" OR ExecutionStatus="ContinuedAsNew")',
        ),
    ],
)
def test_the_list_query_has_one_shape(
    args: tuple[Any, ...], kwargs: dict[str, Any], query: str
) -> None:
    assert wv.list_query(*args, **kwargs) == query


# ---- describe, query ---------------------------------------------------------------------------


@dataclass
class FakeHandle:
    """A workflow handle: its description, its query answer, and its close."""

    id: str = "wf-1"
    described: Any = None
    answers: list[Any] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    # Raised by result() first, one each call, before the close is awaited.
    result_errors: list[BaseException] = field(default_factory=list)
    outcome: Any = "done"
    # It closes once asked this many times (None: when the test says).
    closes_after: int | None = None
    query_timeouts: list[timedelta | None] = field(default_factory=list)

    async def describe(self) -> Any:
        if self.described is None:
            raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
        return self.described

    async def query(self, name: str, *, result_type: type, rpc_timeout: timedelta | None) -> Any:
        self.query_timeouts.append(rpc_timeout)
        if self.closes_after is not None and len(self.query_timeouts) >= self.closes_after:
            self.closed.set()
        if not self.answers:
            raise RPCError("no worker", RPCStatusCode.DEADLINE_EXCEEDED, b"")
        answer = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def result(self, follow_runs: bool = True) -> Any:
        if self.result_errors:
            raise self.result_errors.pop(0)
        await self.closed.wait()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


async def test_describe_is_none_for_no_workflow_and_describe_as_refuses_another_type() -> None:
    assert await wv.describe(FakeHandle()) is None
    squatter = SimpleNamespace(workflow_type="TpuSweeper", run_id="r-1", status=S.RUNNING)
    handle = FakeHandle(id="runner-delete-r", described=squatter)
    with pytest.raises(CommandFailed) as refused:
        await wv.describe_as(handle, "RunnerDeletion", name_hint="Check the runner name 'r'")
    assert refused.value.message == (
        "workflow runner-delete-r is a TpuSweeper, not a RunnerDeletion; nothing was done"
    )
    assert refused.value.hint is not None
    assert refused.value.hint.startswith("Check the runner name 'r': keeper acts only")
    assert refused.value.fields == {
        "workflow_id": "runner-delete-r", "run_id": "r-1", "workflow_type": "TpuSweeper",
        "status": "RUNNING",
    }  # fmt: skip
    mine = SimpleNamespace(workflow_type="RunnerDeletion", run_id="r-2", status=S.COMPLETED)
    assert await wv.describe_as(FakeHandle(described=mine), "RunnerDeletion", name_hint="-") is mine


async def test_a_query_is_bounded_and_no_answer_is_none() -> None:
    unanswered = FakeHandle()
    assert await wv.query(unanswered, "status", str) is None
    assert unanswered.query_timeouts == [wv.QUERY_TIMEOUT]
    assert timedelta(seconds=5) >= wv.QUERY_TIMEOUT
    answered = FakeHandle(answers=["seen"])
    assert await wv.query(answered, "status", str) == "seen"


# ---- how a closed run ended -------------------------------------------------------------------


def _failure(cause: BaseException) -> WorkflowFailureError:
    return WorkflowFailureError(cause=cause)


@pytest.mark.parametrize(
    ("cause", "status", "how", "words"),
    [
        (CancelledError(), "CANCELED", "cancelled", "the watch was cancelled"),
        (TerminatedError("by hand"), "TERMINATED", "terminated",
         "the watch was terminated: by hand"),
        (TerminatedError(""), "TERMINATED", "terminated",
         "the watch was terminated: no reason given"),
        (WorkflowTimedOut("late", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]),
         "TIMED_OUT", "timed out", "the watch timed out"),
        (ApplicationError("controller unreachable"), "FAILED", None, "controller unreachable"),
    ],
)  # fmt: skip
async def test_a_closed_run_ends_in_the_same_words_in_every_family(
    cause: BaseException, status: str, how: str | None, words: str
) -> None:
    handle = FakeHandle(outcome=_failure(cause))
    handle.closed.set()
    ended = await wv.ending(handle)
    assert (ended.status, ended.how, ended.result) == (status, how, None)
    assert ended.words("watch") == words
    assert wv.closed_status(_failure(cause)) == status


async def test_a_completed_run_ends_with_its_result_and_no_words() -> None:
    handle = FakeHandle(outcome={"vms": 4})
    handle.closed.set()
    ended = await wv.ending(handle)
    assert (ended.status, ended.result, ended.reason, ended.words("x")) == (
        "COMPLETED", {"vms": 4}, None, None,
    )  # fmt: skip


# ---- following ---------------------------------------------------------------------------------


def _look(handle: FakeHandle, **extra: Any) -> wv.Look[str]:
    return wv.Look(
        query=lambda: wv.query(handle, "status", str),
        page=lambda view: Text(f"PAGE {view}"),
        line=lambda view: f"line {view}",
        **extra,
    )


def _log() -> tuple[Console, io.StringIO]:
    file = io.StringIO()
    return Console(file=file, force_terminal=False, width=200), file


async def test_off_a_terminal_it_writes_a_stamped_line_per_change_until_the_close() -> None:
    # Each look pops one answer (the last stays): a, a, b, b, then no answer, then b.
    handle = FakeHandle(
        answers=["a", "a", "b", "b", RuntimeError("restarting"), "b"], closes_after=7
    )
    console, file = _log()
    last = await wv.follow(handle, _look(handle), console=console, note=print, interval=0.001)
    lines = file.getvalue().splitlines()
    assert [line.partition(" ")[2] for line in lines] == ["line a", "line b"], lines
    assert all(re.fullmatch(RFC3339, line.partition(" ")[0]) for line in lines), lines
    assert last == "b"


async def test_off_a_terminal_a_settled_view_is_left_to_the_closing_summary() -> None:
    handle = FakeHandle(answers=["a", "b", "end"], closes_after=4)
    console, file = _log()
    look = _look(handle, settled=lambda view: view == "end")
    last = await wv.follow(handle, look, console=console, note=print, interval=0.001)
    lines = [line.partition(" ")[2] for line in file.getvalue().splitlines()]
    # The last view is still returned: the command states it in its summary.
    assert lines == ["line a", "line b"] and last == "end", lines


async def test_on_a_terminal_the_page_redraws_in_place_and_shows_the_end() -> None:
    handle = FakeHandle(answers=["a", "b", "end"], closes_after=2)
    file = io.StringIO()
    console = Console(file=file, force_terminal=True, width=80)
    last = await wv.follow(handle, _look(handle), console=console, note=print, interval=0.001)
    shown = file.getvalue()
    # The final look after the close is drawn; no log line is written.
    assert last == "end" and "PAGE end" in shown and "line " not in shown, shown


async def test_following_stops_where_the_family_says_and_without_a_console_only_waits() -> None:
    handle = FakeHandle(answers=["a", "finishing", "never"])
    last = await wv.follow(
        handle,
        _look(handle, until=lambda view: view == "finishing"),
        console=None,
        note=print,
        interval=0.001,
    )
    assert last == "finishing" and not handle.closed.is_set()


async def test_a_lost_server_is_waited_through_with_a_note() -> None:
    lost = RPCError("connection refused", RPCStatusCode.UNAVAILABLE, b"")
    handle = FakeHandle(answers=["a"], result_errors=[lost], closes_after=3)
    notes: list[str] = []
    console, file = _log()
    last = await wv.follow(
        handle, _look(handle), console=console, note=notes.append, interval=0.001
    )
    assert last == "a" and handle.closed.is_set()
    assert file.getvalue().count("line a") == 1
    assert notes == [
        "lost the connection to Temporal (UNAVAILABLE: connection refused); reconnecting in "
        f"{wv.RECONNECT_FIRST:g}s and waiting on"
    ]
    handle.result_errors = [lost]
    assert await wv.result_of(handle, notes.append) == "done"
    assert len(notes) == 2


async def test_a_long_poll_that_ends_with_no_close_is_asked_again() -> None:
    # The SDK's words when the server ends its long poll for the close with nothing.
    empty = RuntimeError("No completion event found")
    handle = FakeHandle(result_errors=[empty, empty])
    handle.closed.set()
    notes: list[str] = []
    assert await wv.result_of(handle, notes.append) == "done"
    assert notes == [] and handle.result_errors == []
    # Any other error is the SDK's or keeper's bug, not a wait: it is raised.
    handle.result_errors = [RuntimeError("Unexpectedly missing new run ID")]
    with pytest.raises(RuntimeError, match="missing new run ID"):
        await wv.result_of(handle, notes.append)


async def test_an_answer_from_the_server_is_not_waited_through() -> None:
    gone = RPCError("no such workflow", RPCStatusCode.NOT_FOUND, b"")
    handle = FakeHandle(result_errors=[gone])
    with pytest.raises(RPCError):
        await wv.result_of(handle, print)
