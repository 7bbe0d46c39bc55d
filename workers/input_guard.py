"""Workflow and signal inputs counted before any workflow code sees them.

The SDK applies a workflow's type hints only when the number of inputs matches its
parameters. With no input (`temporal workflow start` without `--input`) or two, the run
method is called with the wrong arguments and fails its first workflow task with a
TypeError. Temporal retries that task forever: the workflow stays RUNNING, and every request
that joins it (`keeper runner delete` of that runner) waits on it. A signal sent with the wrong
number of inputs does the same to a running workflow.

| what arrives                  | caught by          | outcome                                 |
|-------------------------------|--------------------|-----------------------------------------|
| no run input, or several      | this guard         | FAILED, InvalidWorkflowInput (non-      |
|                               |                    | retryable): type, required fields, and  |
|                               |                    | an example                              |
| one run input, malformed      | the data converter | FAILED, ValidationError: each field at  |
|                               |                    | fault (failure_exception_types)         |
| a signal with no input or extra | this guard       | dropped with a warning; the run goes on |
| a signal input, malformed     | the SDK            | dropped with a warning; the run goes on |

Nothing here emits a command for a well-formed input, so recorded histories replay as before.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

INVALID_INPUT = "InvalidWorkflowInput"


@dataclass(frozen=True)
class InputHelp:
    """What to tell whoever started a workflow with the wrong input."""

    # A valid input, shown as the `--input` of `temporal workflow start`.
    example: Mapping[str, object] | None = None
    # Said instead of (or besides) an example, e.g. for a workflow keeper starts itself.
    note: str = ""

    def text(self) -> str:
        parts = [self.note] if self.note else []
        if self.example is not None:
            parts.append(f"Example: --input '{json.dumps(self.example)}'")
        return " ".join(parts)


@dataclass(frozen=True)
class _Arity:
    type_name: str
    required_fields: tuple[str, ...]
    least: int
    most: int | None  # None: any number (*args)


def _arity(fn: Callable[..., Any], *, bound: bool) -> _Arity:
    params = list(inspect.signature(fn).parameters.values())
    if not bound and params:
        params = params[1:]  # the workflow instance
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    least = sum(1 for p in positional if p.default is inspect.Parameter.empty)
    hint: Any = positional[0].annotation if positional else None
    try:
        hints = typing.get_type_hints(fn)
        if positional:
            hint = hints.get(positional[0].name, hint)
    except Exception:  # an unresolvable annotation only costs the message its detail
        pass
    fields = getattr(hint, "model_fields", None)
    required = tuple(n for n, f in (fields or {}).items() if f.is_required())
    name = getattr(hint, "__name__", None) or str(hint or "input")
    return _Arity(name, required, least, None if varargs else len(positional))


def _got(count: int) -> str:
    return "no input" if count == 0 else f"{count} inputs"


def input_problem(
    workflow_type: str, fn: Callable[..., Any], args: list[Any], help_text: str
) -> str | None:
    """The message for a run input of the wrong count, or None when the count is right."""
    arity = _arity(fn, bound=False)
    if arity.least <= len(args) and (arity.most is None or len(args) <= arity.most):
        return None
    required = f" (required: {', '.join(arity.required_fields)})" if arity.required_fields else ""
    message = (
        f"{workflow_type} takes one {arity.type_name}{required}; got {_got(len(args))}. "
        "Pass exactly one JSON object as the input."
    )
    return f"{message} {help_text}".rstrip()


class _GuardedInbound(WorkflowInboundInterceptor):
    help: Mapping[str, InputHelp] = {}

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        workflow_type = workflow.info().workflow_type
        help_text = self.help.get(workflow_type, InputHelp()).text()
        problem = input_problem(workflow_type, input.run_fn, list(input.args), help_text)
        if problem is not None:
            raise ApplicationError(problem, type=INVALID_INPUT, non_retryable=True)
        return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        handler = workflow.get_signal_handler(input.signal)
        if handler is not None:
            arity = _arity(handler, bound=True)
            count = len(input.args)
            if count < arity.least or (arity.most is not None and count > arity.most):
                # Dropped like a signal whose payload does not decode: acting on it is
                # impossible, and failing the task would stop the whole workflow.
                workflow.logger.warning(
                    "dropped signal %r: it takes one %s, got %s",
                    input.signal,
                    arity.type_name,
                    _got(count),
                )
                return
        await super().handle_signal(input)


@dataclass(frozen=True)
class InputGuard(Interceptor):
    """The worker interceptor; `help` maps a workflow type to what to tell its callers."""

    help: Mapping[str, InputHelp] = field(default_factory=dict)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return type("GuardedInbound", (_GuardedInbound,), {"help": self.help})
