"""Temporal calls the `keeper tpu` commands share."""

from __future__ import annotations

import os
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.context import current_keeper
from keeper.cli.devstack.other_base import other_base_advice
from keeper.cli.output import CommandFailed
from keeper.runtime.dev_ports import PORT_OFFSETS, is_local, split_address
from keeper.runtime.settings import Settings
from keeper.runtime.temporal_client import connect
from keeper.runtime.temporal_env import ADDRESS_ENV
from keeper.runtime.tracing import setup_tracing


async def client_for(settings: Settings) -> Client:
    try:
        return await connect(settings.temporal, setup_tracing(settings.tracing))
    except RuntimeError as err:
        temporal = settings.temporal
        origin = _address_origin(settings)
        raise CommandFailed(
            f"cannot reach Temporal at {temporal.address} (from {origin}, namespace "
            f"{temporal.namespace}): {err}",
            hint=_unreachable_hint(settings, origin),
            address=temporal.address,
            namespace=temporal.namespace,
        ) from err


def _address_origin(settings: Settings) -> str:
    """Where temporal.address came from, as the operator would change it."""
    keeper = current_keeper()
    if keeper is not None and keeper.address:
        return "--address"
    if os.environ.get(ADDRESS_ENV):
        return ADDRESS_ENV
    base = settings.dev.port_base
    if base is not None and "address" not in settings.temporal.model_fields_set:
        return f"dev.port_base {base} + {PORT_OFFSETS['temporal.address']}"
    return "temporal.address"


def _unreachable_hint(settings: Settings, origin: str) -> str:
    if origin in ("--address", ADDRESS_ENV):
        # The operator named the server: that is what to check, not the local stack's ports.
        return (
            f"Check {origin}: nothing answers at {settings.temporal.address}. For the local "
            f"stack, leave {origin} out and start it with `keeper dev up`."
        )
    start = (
        "Start the local stack with `keeper dev up`, or point keeper at a running server "
        f"with --address or {ADDRESS_ENV}"
    )
    host, _ = split_address(settings.temporal.address)
    if not is_local(host):
        return f"{start}."
    return f"{start}; {other_base_advice(settings)}."


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
