"""Connecting to Temporal: the client every command uses, and when nothing answers, where
the address came from and what to do."""

from __future__ import annotations

import os

from temporalio.client import Client

from keeper.cli.context import current_keeper
from keeper.cli.local_stack import other_base_advice
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
            f"stack, leave {origin} out and start it with `keeper-dev up`."
        )
    start = (
        "Start the local stack with `keeper-dev up`, or point keeper at a running server "
        f"with --address or {ADDRESS_ENV}"
    )
    host, _ = split_address(settings.temporal.address)
    if not is_local(host):
        return f"{start}."
    return f"{start}; {other_base_advice(settings)}."
