"""The campaign's auditor: the emulators' state against the workflows' outcomes.

Ownership is read from the Temporal server, never from the campaign's own notes, so a
resource created behind keeper's back is judged like any other:

| family  | still in an emulator                   | owned when                     | else      |
|---------|----------------------------------------|--------------------------------|-----------|
| tpu     | a queued resource or node              | its bootstrap COMPLETED        | leak      |
| tpu     | a running VM that phoned home          | its bootstrap COMPLETED        | zombie    |
| tpu     | a VM that phoned home after its owner closed without success | never    | zombie    |
| runners | a record not `deleted`                 | its deletion is RUNNING        | leak      |
| runners | a provider instance, a registration    | its record is not `deleted`    | leak      |
| runners | a second write of `deleted`            | never                          | duplicate |
| reclaim | an agent's holding of a finished job   | a JobReclaim of the node open  | leak      |
| reclaim | a node keeper drained                  | a JobReclaim of the node open  | leak      |
| reclaim | a cancel of a job live on its node     | never                          | wrongful  |
| watch   | a TerminateJob or LaunchJob            | never (nothing was approved)   | wrongful  |
| watch   | a watch still open on a finished job   | never                          | leak      |
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from bench.campaign_report import DUPLICATE_WRITE, LEAK, WRONGFUL_KILL, ZOMBIE, Finding
from emulators.provider import state as provider_state
from emulators.tpu import TpuEmulator
from keeper.domain.runners.models import deletion_workflow_id
from keeper.domain.runners.status import InstanceStatus
from keeper.domain.tpu.naming import bootstrap_workflow_id
from keeper.wire.spur import slurm_pb2

MISSING = "MISSING"
# How long the auditor waits for owners still running and deletions under way to finish.
SETTLE_SECONDS = 15.0


async def owner_status(client: Client, workflow_id: str) -> tuple[str, datetime | None]:
    """The latest run's status name and close time; MISSING when no such workflow exists."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:
            return MISSING, None
        raise
    status = desc.status.name if desc.status is not None else "UNKNOWN"
    return status, desc.close_time


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


async def audit_tpu(
    client: Client,
    emu: TpuEmulator,
    family: str = "tpu",
    server_now: Callable[[], Awaitable[datetime]] | None = None,
) -> list[Finding]:
    """`server_now` is the Temporal server's clock (the time-skipping server's own); by
    default the wall clock, which the dev server keeps."""
    loop = asyncio.get_running_loop()
    end = loop.time() + SETTLE_SECONDS
    while True:
        state = emu.state()
        slices = {q["id"] for q in state["queued_resources"]}
        slices |= {n["queued_resource_id"] or n["id"] for n in state["nodes"]}
        slices |= {vm["qr"] or vm["node"] for vm in state["vms"]}
        owners = {s: await owner_status(client, bootstrap_workflow_id(s)) for s in sorted(slices)}
        handed = {s for s, (status, _) in owners.items() if status == "COMPLETED"}
        open_owners = any(status == "RUNNING" for status, _ in owners.values())
        deleting = any(r["state"] == "DELETING" for r in state["queued_resources"] + state["nodes"])
        leaks = emu.leaks(handed)
        settled = not (leaks and deleting) and not open_owners
        if settled or loop.time() > end:
            break
        await asyncio.sleep(0.2)
    # A VM's phone-home is stamped on the emulator's clock, which tests and the late-
    # fulfilment runs move ahead; an owner's close time is on the server's. Both are put on
    # the emulator's: the skew between the two clocks now.
    reference = await server_now() if server_now is not None else datetime.now(UTC)
    skew = emu.now() - reference
    findings: list[Finding] = []
    for entry in leaks:
        slice_id = entry.split("/", 2)[1].split(" ")[0]
        status, _ = owners.get(slice_id, (MISSING, None))
        kind = ZOMBIE if entry.startswith("vm/") else LEAK
        findings.append(
            Finding(kind, family, f"{entry}, owner {bootstrap_workflow_id(slice_id)}: {status}")
        )
    for vm in state["vms"]:
        slice_id = vm["qr"] or vm["node"]
        status, closed = owners.get(slice_id, (MISSING, None))
        phoned = _when(vm["phoned_home_at"])
        if status == "COMPLETED" or phoned is None or vm["stopped_at"] is None:
            continue  # handed over, silent, or still running (reported above)
        if closed is not None and phoned > closed + skew:
            findings.append(
                Finding(
                    ZOMBIE,
                    family,
                    f"vm/{vm['node']}/{vm['index']} phoned home at {phoned.isoformat()}, after "
                    f"its owner {bootstrap_workflow_id(slice_id)} closed {status} at "
                    f"{closed.isoformat()}",
                )
            )
    return findings


async def audit_runners(client: Client, world: Any) -> list[Finding]:
    """`world` is a tests.runners.world.RunnerWorld (store, GitHub emulator, provider)."""
    findings: list[Finding] = []
    records = await asyncio.to_thread(world.store.list, include_deleted=True)
    live: dict[str, Any] = {}
    for record in records:
        if record.instance_status is InstanceStatus.DELETED:
            deleted_writes = [e for e in world.store.audit(record.name) if e.to_status == "deleted"]
            if len(deleted_writes) > 1:
                findings.append(
                    Finding(
                        DUPLICATE_WRITE,
                        "runners",
                        f"runner {record.name} written `deleted` {len(deleted_writes)} times",
                    )
                )
            continue
        live[record.name] = record
        status, _ = await owner_status(client, deletion_workflow_id(record.name))
        if status != "RUNNING":
            findings.append(
                Finding(
                    LEAK,
                    "runners",
                    f"record {record.name} ({record.instance_status.value}) with no live "
                    f"deletion ({deletion_workflow_id(record.name)}: {status})",
                )
            )
    live_ids = {r.provider_id for r in live.values() if r.provider_id}
    for provider_id, instance in provider_state.instances(world.provider_config).items():
        if provider_id not in live_ids:
            findings.append(
                Finding(
                    LEAK,
                    "runners",
                    f"provider instance {provider_id} ({instance['name']}) with no live record",
                )
            )
    live_registrations = {r.github_runner_id for r in live.values() if r.github_runner_id}
    for scope, registered in world.github.state()["runners"].items():
        for runner in registered:
            if runner["id"] not in live_registrations:
                findings.append(
                    Finding(
                        LEAK,
                        "runners",
                        f"GitHub registration {runner['id']} ({runner['name']}, {scope}) "
                        "with no live record",
                    )
                )
    return findings


async def audit_reclaim(client: Client, world: Any, nodes: Iterable[str]) -> list[Finding]:
    """`world` is a tests.reclaim.world.ReclaimWorld."""
    findings: list[Finding] = []
    cluster = world.emu.cluster
    for node in nodes:
        open_workflows = []
        for _holding, workflow_id in world.workflows(node):
            status, _ = await owner_status(client, workflow_id)
            if status == "RUNNING":
                open_workflows.append(workflow_id)
        for job_id in world.emu.holdings(node):
            job = cluster.jobs.get(job_id)
            # A job the controller forgot (a wipe) may be live; only a finished one is a leak.
            if job is None or not job.finalized or open_workflows:
                continue
            findings.append(
                Finding(
                    LEAK, "reclaim", f"{node} still holds finished job {job_id}, no reclaim open"
                )
            )
        state = cluster.node(node)
        ours = (state.state_reason or "").startswith("keeper-reclaim:")
        if ours and _drained(state.state) and not open_workflows:
            findings.append(
                Finding(
                    LEAK,
                    "reclaim",
                    f"{node} drained by keeper ({state.state_reason}), no reclaim open",
                )
            )
    for cancel in world.emu.cancels():
        if cancel.live_here:
            findings.append(
                Finding(
                    WRONGFUL_KILL,
                    "reclaim",
                    f"job {cancel.job_id} cancelled while live on {cancel.node}",
                )
            )
    return findings


def _drained(state: int) -> bool:
    return state in (slurm_pb2.NODE_DRAIN, slurm_pb2.NODE_DRAINING)


async def audit_watch(client: Client, world: Any, jobs: dict[str, str]) -> list[Finding]:
    """`jobs`: job id -> its watch's workflow id, for every job the campaign watched."""
    findings: list[Finding] = []
    for action in world.actions():
        findings.append(
            Finding(
                WRONGFUL_KILL,
                "watch",
                f"{action['method']} of healthy job {action['job_id']} with nothing approved",
            )
        )
    controller = world.emu.controller
    for job_id, workflow_id in jobs.items():
        job = controller.jobs[job_id]
        status, _ = await owner_status(client, workflow_id)
        if status == "RUNNING" and job.finished(controller.now_t(job)):
            findings.append(
                Finding(LEAK, "watch", f"watch {workflow_id} still open on finished {job_id}")
            )
    return findings
