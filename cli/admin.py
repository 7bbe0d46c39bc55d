"""`keeper admin`: one-time set-up of a Temporal namespace for keeper."""

from __future__ import annotations

import asyncio
import shlex

import click
from temporalio.service import RPCError

from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import CommandFailed, Output, json_options
from keeper.cli.temporal_ops import client_for
from keeper.runtime.search_attributes import register_missing, registrations


@click.group()
def admin() -> None:
    """Set up a Temporal namespace for keeper (once per namespace, before the workers)."""


@admin.command("register-search-attributes")
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Connect to nothing: print the `temporal operator search-attribute create` "
    "commands instead (for a cluster this shell cannot reach, or to review them).",
)
@json_options
@pass_keeper
def register_search_attributes(keeper: KeeperContext, print_only: bool, out: Output) -> None:
    """Register every search attribute keeper's workflows set, in temporal.namespace.

    Adds the ones the namespace lacks and leaves the others alone, so it can run at every
    release (deploy/k8s/register-search-attributes-job.yaml runs it as a Kubernetes Job).
    Exit 0 when all are registered, 1 when one is registered with another type (only an
    operator can sort that out) or the cluster refuses (the caller needs the operator
    API; on Temporal Cloud add them with `tcld namespace search-attributes add` instead).

    \b
    JSON: {"namespace", "attributes": {name: type}, "added": [names], "commands": [...]}
    """
    settings = keeper.settings
    namespace = settings.temporal.namespace
    wanted = registrations()
    commands = [
        shlex.join(
            [
                "temporal", "operator", "search-attribute", "create",
                "--namespace", namespace, "--name", name, "--type", kind,
            ]
        )
        for name, kind in wanted.items()
    ]  # fmt: skip
    if print_only:
        if out.json:
            out.data({"namespace": namespace, "attributes": wanted, "commands": commands})
        else:
            for command in commands:
                out.line(command)
        return
    added = asyncio.run(_register(keeper))
    if out.json:
        out.data({"namespace": namespace, "attributes": wanted, "added": added})
        return
    present = len(wanted) - len(added)
    out.line(
        f"namespace {namespace}: added {', '.join(added) if added else 'none'}"
        f" ({present} of {len(wanted)} were already registered)"
    )


async def _register(keeper: KeeperContext) -> list[str]:
    client = await client_for(keeper.settings)
    try:
        return await register_missing(client)
    except ValueError as err:
        raise CommandFailed(
            str(err), hint="Remove or rename the attribute in the namespace, then rerun."
        ) from None
    except RPCError as err:
        raise CommandFailed(
            f"Temporal refused to register the search attributes: {err.status.name}: {err.message}",
            hint="The caller needs the operator API of the namespace (an admin); on Temporal "
            "Cloud use `tcld namespace search-attributes add`, or run with --print for the "
            "commands.",
        ) from None
