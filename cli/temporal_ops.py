"""Temporal calls the `keeper tpu` commands share."""

from __future__ import annotations

from typing import Any

import click
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.output import CommandFailed
from keeper.runtime.settings import Settings
from keeper.runtime.temporal_client import connect
from keeper.runtime.tracing import setup_tracing


async def client_for(settings: Settings) -> Client:
    try:
        return await connect(settings.temporal, setup_tracing(settings.tracing))
    except RuntimeError as err:
        raise click.ClickException(
            f"cannot reach Temporal at {settings.temporal.address} "
            f"(namespace {settings.temporal.namespace}): {err}\n"
            "Start the local stack with `keeper dev up`, or set TEMPORAL_ADDRESS."
        ) from err


async def describe_or_none(handle: WorkflowHandle[Any, Any]) -> Any:
    try:
        return await handle.describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return None
        raise


async def describe_as(
    handle: WorkflowHandle[Any, Any], workflow_type: str, *, name_hint: str
) -> Any:
    """The description of `handle` (None when there is none), refusing any other type.

    Another type can sit at a keeper id: a child from before the '.run' suffix, or anything
    started by hand. Acting on it (a cancel, a status) would touch the wrong workflow.
    `name_hint` says which name the operator should check (the slice name, the runner).
    """
    description = await describe_or_none(handle)
    if description is not None and description.workflow_type != workflow_type:
        status = description.status
        raise CommandFailed(
            f"workflow {handle.id} is a {description.workflow_type}, not a {workflow_type}; "
            "nothing was done",
            hint=f"{name_hint}: keeper acts only on the workflow type an id belongs to. "
            f"`temporal workflow describe --workflow-id {handle.id}` shows what runs there.",
            workflow_id=handle.id,
            run_id=description.run_id,
            workflow_type=description.workflow_type,
            status=WorkflowExecutionStatus(status).name if status is not None else None,
        )
    return description


def is_running(description: Any) -> bool:
    return description is not None and description.status is WorkflowExecutionStatus.RUNNING


def list_query(workflow_type: str, running: bool, **equal: object) -> str:
    """The visibility query of `keeper ... list`: one workflow type, running ones only when
    asked, and each search attribute given (by name, value not None) equal to its value."""
    parts = [f'WorkflowType="{workflow_type}"']
    if running:
        parts.append('ExecutionStatus="Running"')
    parts += [f'{name}="{value}"' for name, value in equal.items() if value is not None]
    return " AND ".join(parts)
