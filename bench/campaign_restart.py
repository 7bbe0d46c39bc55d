"""The dev-server restart: bootstraps and deletions in flight while the Temporal server
itself stops and starts again (the long campaign's; too slow for the suite).

A server of its own on a database file (tests/harness.py RestartableServer), so its
histories survive the restart. Every bootstrap is held in assign and every deletion is in
its provider call when the workers stop and the server goes down; after the restart a new
client and new workers must finish every one of them, and the auditor finds what is left.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.campaign_audit import audit_runners, audit_tpu
from bench.campaign_report import Finding, RunOutcome
from bench.campaign_secrets import scan
from bench.campaign_tpu import wait_for_phase
from bench.campaign_workers import InProcessWorker
from emulators.provider import state as provider_state
from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapResult
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import build_worker
from tests.harness import RestartableServer, settings_for_tests, slice_request
from tests.runners.world import eventually, runner_world

# Long enough in assign that the restart lands while every bootstrap still waits there.
HELD = Scenario(assign_after=20, active_after=0.5, ips_after=0.2, delete_duration=0.3)
RESULT_WITHIN_S = 180.0


async def _closed(client: Client, workflow_id: str) -> str:
    handle = client.get_workflow_handle(workflow_id)
    try:
        await asyncio.wait_for(handle.result(), RESULT_WITHIN_S)
    except WorkflowFailureError:
        pass
    except TimeoutError:
        return "TIMED_OUT"
    desc = await handle.describe()
    return desc.status.name if desc.status else "UNKNOWN"


async def server_restart(
    emu: TpuEmulator, workdir: Path, runs: int, secrets: dict[str, str]
) -> tuple[list[RunOutcome], list[Finding], int, list[str]]:
    """`runs` bootstraps and `runs` deletions across one server restart: (outcomes,
    findings, histories scanned, secrets found). `emu` is reset first: its earlier slices
    belong to another server."""
    emu.reset()
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    server = RestartableServer(workdir / "restart-temporal.db")
    await server.start()
    clients = [await Client.connect(server.address, data_converter=pydantic_data_converter)]
    (workdir / "restart-runners").mkdir(parents=True, exist_ok=True)
    try:
        async with runner_world(workdir / "restart-runners") as world:
            tpu = emulator_client(emu.grpc_target)
            queue = world.task_queue
            worker = InProcessWorker(
                lambda: build_worker(clients[-1], settings_for_tests(), tpu, queue, world.deps)
            )
            await worker.start()
            slices = [f"r{i:03d}-{uuid.uuid4().hex[:6]}" for i in range(runs)]
            runners = [f"rr{i:03d}-{uuid.uuid4().hex[:6]}" for i in range(runs)]
            for name in slices:
                emu.set_scenario(name, HELD)
            handles = [
                await clients[-1].start_workflow(
                    "TpuSliceBootstrap",
                    slice_request(name),
                    id=bootstrap_workflow_id(name),
                    task_queue=queue,
                    result_type=BootstrapResult,
                )
                for name in slices
            ]
            for name in runners:
                await asyncio.to_thread(world.add_runner, name, mode="slow", mode_seconds=2)
                await world.request(clients[-1], name, reason="campaign: server restart")
            for handle in handles:
                await wait_for_phase(handle, Phase.ASSIGN, within=120, or_later=True)
            for name in runners:
                await eventually(
                    lambda n=name: provider_state.attempts(world.provider_config, f"i-{n}") >= 1,
                    within=60,
                    what=f"{name}: its provider delete",
                )
            await worker.stop()
            await server.stop()
            await server.start()
            clients.append(
                await Client.connect(server.address, data_converter=pydantic_data_converter)
            )
            await worker.start()
            client = clients[-1]
            outcomes = []
            for name in slices:
                status = await _closed(client, bootstrap_workflow_id(name))
                outcomes.append(
                    RunOutcome(
                        "tpu",
                        f"restart-{name}",
                        (),
                        bootstrap_workflow_id(name),
                        status,
                    )
                )
            for name in runners:
                workflow_id = f"runner-delete-{name}"
                status = await _closed(client, workflow_id)
                outcomes.append(RunOutcome("runners", f"restart-{name}", (), workflow_id, status))
            await worker.stop()
            findings = await audit_tpu(client, emu) + await audit_runners(client, world)
            ids = [o.workflow_id for o in outcomes]
            ids += [bootstrap_run_workflow_id(name) for name in slices]
            read, found = await scan(client, ids, secrets)
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop()
    return outcomes, findings, read, found
