"""`keeper admin`: one-time set-up of a Temporal namespace for keeper."""

from __future__ import annotations

import asyncio
import shlex

import click
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import CommandFailed, Output, json_options
from keeper.runtime.search_attributes import register_missing, registrations
from keeper.workers.versioning import make_current


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
            str(err),
            hint="Remove or rename the attribute in the namespace, then rerun "
            "(docs/operations.md#search-attributes).",
        ) from None
    except RPCError as err:
        raise CommandFailed(
            f"Temporal refused to register the search attributes: {err.status.name}: {err.message}",
            hint="The caller needs the operator API of the namespace (an admin); on Temporal "
            "Cloud use `tcld namespace search-attributes add`, or run with --print for the "
            "commands.",
        ) from None


SET_CURRENT_IDENTITY = "keeper admin set-current-version"


@admin.command("set-current-version")
@click.option(
    "--build-id",
    metavar="BUILD",
    default=None,
    help="The build to make current (default worker.build_id, KEEPER_BUILD_ID: the build "
    "this install's workers poll as).",
)
@json_options
@pass_keeper
def set_current_version(keeper: KeeperContext, build_id: str | None, out: Output) -> None:
    """Make a build of the worker deployment current: Temporal sends it the tasks.

    The deployment is worker.deployment_name (default keeper), in temporal.namespace. A
    version is refused until one of its workers has polled, so start them first; running it
    again is harmless. This is the first deploy's last step, and a release's step 3
    (docs/operations.md#rollouts; deploy/k8s/set-current-version-job.yaml runs it as a
    Kubernetes Job, which retries until the new workers poll). Exit 1 when Temporal refuses.

    \b
    Like: temporal worker deployment set-current-version --deployment-name D --build-id B
    JSON: {"deployment_name", "build_id", "previous_build_id"} (null: none was current)
    """
    worker = keeper.settings.worker
    if not worker.versioned:
        raise CommandFailed(
            "worker.versioned is false: the workers poll unversioned, so no build of theirs "
            "can be made current",
            hint="Set worker.versioned: true (KEEPER_WORKER_VERSIONED) on the workers first "
            "(docs/operations.md#the-first-versioned-release).",
        )
    version = WorkerDeploymentVersion(worker.deployment_name, build_id or worker.build_id)
    previous = asyncio.run(_make_current(keeper, version))
    if out.json:
        out.data(
            {
                "deployment_name": version.deployment_name,
                "build_id": version.build_id,
                "previous_build_id": previous,
            }
        )
        return
    was = f"build {previous}" if previous else "no build (unversioned workers)"
    out.line(
        f"worker deployment {version.deployment_name}: build {version.build_id} is current "
        f"(was {was})"
    )


async def _make_current(keeper: KeeperContext, version: WorkerDeploymentVersion) -> str | None:
    client = await client_for(keeper.settings)
    try:
        return await make_current(client, version, SET_CURRENT_IDENTITY)
    except RPCError as err:
        where = f"build {version.build_id} of worker deployment {version.deployment_name}"
        fields = {"deployment_name": version.deployment_name, "build_id": version.build_id}
        if err.status is RPCStatusCode.NOT_FOUND:
            # What the server says until a worker of that version has polled.
            raise CommandFailed(
                f"{where} cannot be made current: no worker of it has polled yet ({err.message})",
                hint=f"Start the workers with KEEPER_BUILD_ID={version.build_id} and rerun "
                "once they are ready (`keeper worker --check` shows the build they poll as).",
                **fields,
            ) from None
        raise CommandFailed(
            f"Temporal refused to make {where} current: {err.status.name}: {err.message}",
            hint="The caller needs write access to the namespace's worker deployments.",
            **fields,
        ) from None
