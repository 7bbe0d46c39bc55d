"""How every `keeper` command speaks: exit codes, where output goes, JSON and timestamps.

| what | goes to |
|---|---|
| data: tables, results, the one JSON document of `--json` / `-o json` | stdout |
| progress, notes, warnings, errors | stderr |
| an error under `--json` | `{"error": {"message", "hint", ...}}` on stdout, its text on stderr |

Exit codes (docs/cli.md): 0 the operation succeeded, 1 it failed (including a failed or
cancelled workflow that the command waited for), 2 the command was used wrongly (a bad
argument or option, an unknown name where a name must exist is 1). Nothing else, except
130 when interrupted with Ctrl-C.

Field names shared across commands: `workflow_id`, `run_id`, `ui_url`, `status`,
`result`, `error`. Timestamps are RFC 3339 in UTC (`2026-12-01T12:00:00Z`).

`keeper --json CMD` (or `-o json` before the command) asks every command for JSON, like
gcloud's global `--format`; a command's own `--json` / `-o` does the same for it alone.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
from click.shell_completion import CompletionItem

OK = 0
FAILED = 1
USAGE = 2
INTERRUPTED = 130

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")

# Whether the running command was asked for JSON; errors raised anywhere below it read it.
_json_mode: contextvars.ContextVar[bool] = contextvars.ContextVar("keeper_json", default=False)


def rfc3339(moment: datetime | None) -> str | None:
    """One timestamp format everywhere: RFC 3339, UTC, whole seconds, `Z`."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def to_jsonable(value: Any) -> Any:
    """Plain JSON values: models dumped, datetimes as RFC 3339, durations as seconds."""
    if _is_model(value):
        return to_jsonable(value.model_dump(mode="python"))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, Path):
        return str(value)
    return value


def _is_model(value: Any) -> bool:
    """A pydantic model, without importing pydantic: a process that holds one has loaded it
    (`keeper --help` and completion never do)."""
    pydantic = sys.modules.get("pydantic.main")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def dumps(payload: Any) -> str:
    return json.dumps(to_jsonable(payload), indent=2, default=str)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Aligned columns, two spaces apart, the last one left ragged."""
    body = [header, *rows]
    widths = [max(len(row[i]) for row in body) for i in range(len(header) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)), row[-1]]).rstrip()
        for row in body
    ]


class Output:
    """The output of one command: data to stdout, diagnostics to stderr."""

    def __init__(self, as_json: bool) -> None:
        self.json = as_json

    def data(self, payload: Any) -> None:
        """The command's JSON document (only with --json)."""
        click.echo(dumps(payload))

    def line(self, text: str = "") -> None:
        """A line of data in text mode."""
        click.echo(text)

    def note(self, text: str) -> None:
        """A diagnostic: progress, a hint, a warning. Never part of the data."""
        click.echo(text, err=True)


def format_options(json_help: str, output_help: str) -> Callable[[F], F]:
    """`--json` (as `as_json`) and `-o/--output [text|json]` (as `output_format`): the pair
    every command and the `keeper` group take."""

    def add(func: F) -> F:
        func = click.option(
            "-o",
            "--output",
            "output_format",
            type=click.Choice(["text", "json"]),
            default=None,
            help=output_help,
        )(func)
        return click.option("--json", "as_json", is_flag=True, help=json_help)(func)

    return add


def json_options(func: F) -> F:
    """Adds `--json` and `-o/--output [text|json]` and passes `out: Output`."""

    @format_options("Print one JSON document on stdout.", "Output format (`-o json` is `--json`).")
    @functools.wraps(func)
    def wrapper(*args: Any, as_json: bool, output_format: str | None, **kwargs: Any) -> Any:
        if output_format == "text":
            wanted = False  # the command's own choice beats a global --json
        else:
            wanted = as_json or output_format == "json" or _json_mode.get()
        _json_mode.set(wanted)
        return func(*args, out=Output(wanted), **kwargs)

    return wrapper  # type: ignore[return-value]


def exits(body: Callable[P, Awaitable[int]]) -> Callable[P, None]:
    """A command whose body is async: the process exits with the code it returns."""

    @functools.wraps(body)
    def command(*args: P.args, **kwargs: P.kwargs) -> None:
        import asyncio  # with ssl, a fifth of what `keeper --help` would import

        raise SystemExit(asyncio.run(body(*args, **kwargs)))

    return command


def use_json(wanted: bool) -> None:
    """The global `keeper --json` / `-o json`: every command below prints JSON."""
    _json_mode.set(wanted)


def json_requested(argv: list[str] | None = None) -> bool:
    """Whether the command line asks for JSON, also before a command parsed its options
    (a usage error is reported in the format the caller asked for)."""
    if _json_mode.get():
        return True
    argv = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--json" or arg in ("-ojson", "--output=json"):
            return True
        if arg in ("-o", "--output") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
    return False


def error_document(err: click.ClickException) -> dict[str, Any]:
    """The `{"error": {...}}` document of a failed command under --json."""
    # A failure's hint has a field of its own; a usage error's text names its parameter.
    message = err.message if isinstance(err, CommandFailed) else err.format_message()
    error: dict[str, Any] = {"message": message, "exit_code": err.exit_code}
    if isinstance(err, CommandFailed):
        error["hint"] = err.hint
        error.update(to_jsonable(err.fields))
    if isinstance(err, click.UsageError):
        error["usage"] = True
        if err.ctx is not None:
            error["command"] = err.ctx.command_path
        param = _param_named(err)
        if param:
            error["param"] = param
        if isinstance(err, UsageProblem) and err.params:
            error["params"] = err.params
    return {"error": error}


def _param_named(err: click.UsageError) -> str | None:
    """The option or argument a usage error is about, as the command line spells it."""
    if isinstance(err, UsageProblem):
        return err.param_hint or (err.params[0] if err.params else None)
    if isinstance(err, click.NoSuchOption):
        return err.option_name
    if isinstance(err, click.BadParameter):
        if isinstance(err.param_hint, str):
            return err.param_hint
        if err.param_hint is not None:
            return " / ".join(err.param_hint)
        if isinstance(err.param, click.Option):
            return " / ".join(err.param.opts)
        if err.param is not None:
            return err.param.human_readable_name
    return None


class OneOf(click.Choice):  # type: ignore[type-arg]
    """A choice matched in any case, whose error lists the valid values as written
    (click's own lists them lower-cased when matching ignores case)."""

    def __init__(self, choices: Iterable[str], metavar: str | None = None) -> None:
        super().__init__(list(choices), case_sensitive=False)
        self._metavar = metavar

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:
        return self._metavar or super().get_metavar(param, ctx)  # type: ignore[arg-type]

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        return f"unknown value {value!r}; one of {', '.join(map(str, self.choices))}"

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        prefix = incomplete.lower()
        return [CompletionItem(c) for c in map(str, self.choices) if c.lower().startswith(prefix)]


class CommandFailed(click.ClickException):
    """The operation failed (exit 1), in the CLI's own words, with what to do next."""

    exit_code = FAILED

    def __init__(self, message: str, hint: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.hint = hint
        self.fields = fields

    def format_message(self) -> str:
        return f"{self.message}\n{self.hint}" if self.hint else self.message


class UsageProblem(click.UsageError):
    """A bad argument or option (exit 2), naming it in the CLI's own terms.

    A request checked as a whole reports every problem at once: `params` lists each argument
    and option at fault, in the order the message names them; the first is its `param`.
    """

    def __init__(
        self, message: str, param_hint: str | None = None, *, params: Iterable[str] = ()
    ) -> None:
        super().__init__(f"{param_hint}: {message}" if param_hint else message)
        self.param_hint = param_hint
        self.params = list(params)


class Interrupted(CommandFailed):
    """Ctrl-C (exit 130) while a workflow the command started or followed still runs."""

    exit_code = INTERRUPTED


# What a Ctrl-C leaves running, as the command that started or followed it said (one command
# per process). Not a context variable: the commands set it inside asyncio.run, whose task
# runs in a copy of the context, and main reads it after that returned.
_left_running: Interrupted | None = None


def workflow_keeps_running(
    what: str, workflow_id: str, *, follow: str, cancel: str | None = None, **fields: Any
) -> None:
    """Declares the workflow a Ctrl-C from now on leaves running (`what` says how, naming
    it): it is durable, so stopping the command stops only the watching, and the operator is
    told how to go on from there."""
    global _left_running
    ways = f"Follow it with `{follow}`" + (f", or cancel it with `{cancel}`" if cancel else "")
    _left_running = Interrupted(
        f"interrupted; {what} (a workflow is durable: it goes on without this command)",
        hint=f"{ways}.",
        workflow_id=workflow_id,
        status="RUNNING",
        **fields,
    )


def forget_running() -> None:
    global _left_running
    _left_running = None


def report_interrupt() -> None:
    """Ctrl-C: what is left running and how to follow it, or a bare `interrupted`. Under
    --json the document is on stdout either way, so a reader still gets one."""
    if _left_running is not None:
        report_error(_left_running)
        return
    if json_requested():
        click.echo(dumps({"error": {"message": "interrupted", "exit_code": INTERRUPTED}}))
    click.echo("interrupted", err=True)


def report_error(err: click.ClickException) -> None:
    """Shows an error: the text on stderr, and with --json also a document on stdout."""
    if json_requested():
        click.echo(dumps(error_document(err)))
    err.show()
