"""One campaign: the draw, every family's runs at once, the auditor, the secrets scan.

`run_campaign` runs against a Temporal dev server and a TPU emulator it is given (the test's
fixtures, or the ones bench/campaign.py starts); everything else (the runner world, the spur
and iris emulators, a time-skipping server for late fulfilment) it starts and stops itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bench.campaign_audit import audit_reclaim, audit_runners, audit_tpu, audit_watch
from bench.campaign_plan import RunSpec, draw
from bench.campaign_reclaim import run_reclaim
from bench.campaign_report import Finding, Report, RunOutcome
from bench.campaign_runners import run_runner
from bench.campaign_secrets import scan, workflows_on
from bench.campaign_tpu import run_late_fulfilment, run_tpu
from bench.campaign_watch import run_watch
from bench.campaign_workers import (
    InProcessWorker,
    Killable,
    ProcessWorker,
    write_runner_worker_config,
    write_tpu_worker_config,
)
from emulators.iris import IrisEmulatorConfig
from emulators.spur.config import AgentSpec
from emulators.tpu import EmulatorConfig, TpuEmulator
from emulators.tpu.testing import clock_following
from keeper.domain.tpu.naming import bootstrap_run_workflow_id
from keeper.runtime.reclaim.deps import open_reclaim_deps
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.families.reclaim import reclaim_activities
from keeper.workers.main import build_worker
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS
from keeper.workers.runner import workflow_runner
from keeper.workflows.reclaim.job_reclaim import JobReclaim
from tests.conftest import claimed_ip_prefix
from tests.harness import free_port, register_search_attributes, settings_for_tests, tool_path
from tests.reclaim.world import reclaim_world
from tests.runners.world import TOKEN as GITHUB_TOKEN
from tests.runners.world import runner_world
from tests.watch.world import SPEED, WatchWorld, watch_world
from tests.webhook_receiver import webhook_receiver
from tests.worker_processes import write_family_worker_config

log = logging.getLogger("campaign")
IRIS_TOKEN = "iris-campaign-token-7f3a9c"
SPUR_TOKEN = "spur-campaign-token-2b8e41"
WEBHOOK_SECRET = "T0CAMPAIGN/B0CAMPAIGN/campaignhooksecret42"


@dataclass(frozen=True)
class CampaignConfig:
    seed: int
    bootstraps: int = 12
    deletions: int = 6
    reclaims: int = 3
    watches: int = 4
    # Kill every family's worker with SIGKILL (a `keeper worker` subprocess per family),
    # not an in-process stop.
    sigkill: bool = False
    # Runs of one family in flight at once.
    concurrency: int = 32
    exclude: frozenset[str] = frozenset()

    def counts(self) -> dict[str, int]:
        return {
            "tpu": self.bootstraps,
            "runners": self.deletions,
            "reclaim": self.reclaims,
            "watch": self.watches,
        }


@dataclass
class FamilyResult:
    outcomes: list[RunOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    histories: int = 0
    secrets: list[str] = field(default_factory=list)
    # Worker kills performed (runs whose step was under way share one; campaign_workers.py).
    kills: int = 0


def secrets_of(webhook_url: str) -> dict[str, str]:
    return {
        "GitHub token": GITHUB_TOKEN,
        "iris token": IRIS_TOKEN,
        "spur token": SPUR_TOKEN,
        "webhook URL": webhook_url,
    }


async def _each(
    specs: list[RunSpec], limit: int, run: Callable[[RunSpec], Awaitable[RunOutcome]]
) -> list[RunOutcome]:
    """Every run, at most `limit` at once; a run that raises is an ERROR outcome, never the
    end of the campaign."""
    gate = asyncio.Semaphore(limit)

    async def one(spec: RunSpec) -> RunOutcome:
        async with gate:
            try:
                outcome = await run(spec)
            except Exception as err:  # recorded: a failed run is a finding, not a crash
                log.warning("%s failed: %s", spec.label, traceback.format_exc())
                outcome = RunOutcome(spec.family, spec.label, spec.faults, "", "ERROR", repr(err))
            log.info(
                "%s %s: %s %s", spec.label, ",".join(spec.faults), outcome.status, outcome.detail
            )
            return outcome

    return list(await asyncio.gather(*(one(spec) for spec in specs)))


async def _tpu(
    config: CampaignConfig, client: Client, emu: TpuEmulator, workdir: Path, secrets: dict[str, str]
) -> FamilyResult:
    specs = [
        s for s in draw(config.seed, config.counts(), exclude=config.exclude) if s.family == "tpu"
    ]
    late = [s for s in specs if s.faults[0] == "late-fulfilment"]
    dev = [s for s in specs if s not in late]
    result = FamilyResult()
    stem = f"campaign-{uuid.uuid4().hex[:8]}"
    worker: Killable
    if config.sigkill:
        address = client.service_client.config.target_host
        settings = write_tpu_worker_config(
            workdir / "tpu-worker.yaml", address, emu.grpc_target, stem
        )
        worker, queue = ProcessWorker(settings, workdir / "tpu-worker.log"), f"{stem}-tpu"
    else:
        tpu = emulator_client(emu.grpc_target)
        worker = InProcessWorker(lambda: build_worker(client, settings_for_tests(), tpu, stem))
        queue = stem
    # Late fulfilment plays on a time-skipping server of its own, alongside the dev runs.
    late_work = asyncio.create_task(_late_fulfilment(late, secrets)) if late else None
    await worker.start()
    try:
        result.outcomes += await _each(
            dev, config.concurrency, lambda s: run_tpu(client, emu, queue, worker, s)
        )
    finally:
        await worker.stop()
        result.kills = worker.kills
    result.findings += await audit_tpu(client, emu)
    await _scan_tpu(client, result.outcomes, secrets, result)
    if late_work is not None:
        late_result = await late_work
        result.outcomes += late_result.outcomes
        result.findings += late_result.findings
        result.histories += late_result.histories
        result.secrets += late_result.secrets
    return result


async def _scan_tpu(
    client: Client, outcomes: list[RunOutcome], secrets: dict[str, str], into: FamilyResult
) -> None:
    ids = [o.workflow_id for o in outcomes if o.workflow_id]
    ids += [bootstrap_run_workflow_id(i.removeprefix("tpu-bootstrap-")) for i in ids]
    read, found = await scan(client, ids, secrets)
    into.histories += read
    into.secrets += found


async def _late_fulfilment(specs: list[RunSpec], secrets: dict[str, str]) -> FamilyResult:
    result = FamilyResult()
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=tool_path("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    await register_search_attributes(env.client)
    async with env, contextlib.AsyncExitStack() as stack:
        prefix = stack.enter_context(claimed_ip_prefix())
        emu = TpuEmulator(EmulatorConfig(ip_prefix=prefix, vm_health_port=free_port()))
        await emu.start()
        stack.push_async_callback(emu.stop)
        queue = f"campaign-late-{uuid.uuid4().hex[:8]}"
        tpu = emulator_client(emu.grpc_target)
        async with (
            clock_following(env, emu),
            build_worker(env.client, settings_for_tests(), tpu, queue),
        ):
            for spec in specs:  # one at a time: each skips hours of server time
                result.outcomes += await _each(
                    [spec], 1, lambda s: run_late_fulfilment(env, emu, queue, s)
                )
        result.findings += await audit_tpu(env.client, emu, server_now=env.get_current_time)
        await _scan_tpu(env.client, result.outcomes, secrets, result)
    return result


async def _runners(
    config: CampaignConfig, client: Client, workdir: Path, secrets: dict[str, str]
) -> FamilyResult:
    specs = [
        s
        for s in draw(config.seed, config.counts(), exclude=config.exclude)
        if s.family == "runners"
    ]
    result = FamilyResult()
    (workdir / "runners").mkdir(parents=True, exist_ok=True)
    async with runner_world(workdir / "runners") as world:
        worker: Killable
        if config.sigkill:
            address = client.service_client.config.target_host
            settings = write_runner_worker_config(
                workdir / "runners" / "worker.yaml", address, world, GITHUB_TOKEN
            )
            worker = ProcessWorker(settings, workdir / "runners" / "worker.log")
        else:
            tpu = emulator_client("127.0.0.1:9")  # never called by runner workflows
            worker = InProcessWorker(
                lambda: build_worker(
                    client, settings_for_tests(), tpu, world.task_queue, world.deps
                )
            )
        await worker.start()
        try:
            result.outcomes += await _each(
                specs, config.concurrency, lambda s: run_runner(client, world, worker, s)
            )
        finally:
            await worker.stop()
            result.kills = worker.kills
        result.findings += await audit_runners(client, world)
    read, found = await scan(
        client, [o.workflow_id for o in result.outcomes if o.workflow_id], secrets
    )
    result.histories, result.secrets = read, found
    return result


async def _reclaim(
    config: CampaignConfig, client: Client, workdir: Path, secrets: dict[str, str]
) -> FamilyResult:
    specs = [
        s
        for s in draw(config.seed, config.counts(), exclude=config.exclude)
        if s.family == "reclaim"
    ]
    result = FamilyResult()
    if not specs:
        return result
    prefix = f"cn{uuid.uuid4().hex[:6]}-"
    agents = [AgentSpec(node=f"{prefix}{i:03d}") for i in range(len(specs))]
    (workdir / "reclaim").mkdir(parents=True, exist_ok=True)
    # The controller and agents require a bearer token, which keeper reads from its file.
    token_file = workdir / "reclaim" / "spur-token"
    token_file.write_text(SPUR_TOKEN + "\n")
    async with reclaim_world(
        client,
        workdir / "reclaim",
        agents=agents,
        worker=False,
        token=SPUR_TOKEN,
        token_file=token_file,
    ) as world:
        deps = open_reclaim_deps(world.settings.reclaim)

        def make() -> Worker:
            return Worker(
                client,
                task_queue=world.settings.temporal.family_queue("reclaim"),
                workflows=[JobReclaim],
                activities=reclaim_activities(world.settings, client, deps),
                interceptors=WORKFLOW_INTERCEPTORS,
                workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
                graceful_shutdown_timeout=timedelta(seconds=1),
                workflow_runner=workflow_runner(False, client.data_converter),
            )

        worker: Killable
        if config.sigkill:
            address = client.service_client.config.target_host
            path = write_family_worker_config(
                workdir / "reclaim" / "worker.yaml", address, world.settings, "reclaim"
            )
            worker = ProcessWorker(path, workdir / "reclaim" / "worker.log")
        else:
            worker = InProcessWorker(make)
        await worker.start()
        try:
            for spec, agent in zip(specs, agents, strict=True):  # a wipe is cluster-wide
                result.outcomes += await _each(
                    [spec], 1, lambda s, n=agent.node: run_reclaim(client, world, n, worker, s)
                )
            nodes = [a.node for a in agents]
            result.findings += await audit_reclaim(client, world, nodes)
            # The reclaims a wipe run opened, and any the intake started on its own.
            queue = world.settings.temporal.family_queue("reclaim")
            ids = [o.workflow_id for o in result.outcomes if o.workflow_id.startswith("reclaim-")]
            ids += await workflows_on(client, queue)
        finally:
            await worker.stop()
            result.kills = worker.kills
            await deps.aclose()
    read, found = await scan(client, ids, secrets)
    result.histories, result.secrets = read, found
    return result


class _WatchWorker:
    """The watch world's own worker, killed as an in-process one is."""

    def __init__(self, world: WatchWorld) -> None:
        self._world = world
        self._lock = asyncio.Lock()
        self.kills = 0
        self._last_kill = float("-inf")

    async def start(self) -> None:
        await self._world.start_worker()

    async def stop(self) -> None:
        await self._world.stop_worker()

    async def kill(self, since: float) -> None:
        async with self._lock:
            if self._last_kill > since:
                return
            self._last_kill = asyncio.get_running_loop().time()
            self.kills += 1
            await self._world.stop_worker()
            await self._world.start_worker()


async def _watch(
    config: CampaignConfig, client: Client, workdir: Path, webhook: str, secrets: dict[str, str]
) -> FamilyResult:
    specs = [
        s for s in draw(config.seed, config.counts(), exclude=config.exclude) if s.family == "watch"
    ]
    result = FamilyResult()
    if not specs:
        return result
    (workdir / "watch").mkdir(parents=True, exist_ok=True)
    hook_file = workdir / "watch" / "webhook-url"
    hook_file.write_text(webhook + "\n")
    token_file = workdir / "watch" / "iris-token"
    token_file.write_text(IRIS_TOKEN)
    emulator = IrisEmulatorConfig(speed=SPEED, tokens={IRIS_TOKEN: "campaign"})
    jobs: dict[str, str] = {}
    async with watch_world(
        client,
        emulator,
        worker=not config.sigkill,
        webhook_url_file=hook_file,
        token_file=token_file,
    ) as world:
        worker: Killable | _WatchWorker
        if config.sigkill:
            address = client.service_client.config.target_host
            path = write_family_worker_config(
                workdir / "watch" / "worker.yaml", address, world.settings, "watch"
            )
            worker = ProcessWorker(path, workdir / "watch" / "worker.log")
            await worker.start()
        else:
            worker = _WatchWorker(world)

        async def one(spec: RunSpec) -> RunOutcome:
            outcome, job = await run_watch(world, worker, spec)
            jobs[job] = outcome.workflow_id
            return outcome

        try:
            result.outcomes += await _each(specs, config.concurrency, one)
            # With the worker still serving, as the world's own worker is until it closes:
            # the auditor waits for the watches of finished jobs to see them end.
            result.findings += await audit_watch(client, world, jobs)
        finally:
            if isinstance(worker, ProcessWorker):
                await worker.stop()
            result.kills = worker.kills
    ids = list(jobs.values()) + await workflows_on(client, world.queue)
    read, found = await scan(client, ids, secrets)
    result.histories, result.secrets = read, found
    return result


async def _timed(family: str, work: Awaitable[FamilyResult]) -> FamilyResult:
    started = time.monotonic()
    result = await work
    log.info(
        "%s: %d runs audited in %.1f s", family, len(result.outcomes), time.monotonic() - started
    )
    return result


async def run_campaign(
    config: CampaignConfig, client: Client, emu: TpuEmulator, workdir: Path
) -> Report:
    started = time.monotonic()
    report = Report(seed=config.seed)
    async with webhook_receiver(WEBHOOK_SECRET) as hook:
        webhook = hook.url
        secrets = secrets_of(webhook)
        families = await asyncio.gather(
            _timed("tpu", _tpu(config, client, emu, workdir, secrets)),
            _timed("runners", _runners(config, client, workdir, secrets)),
            _timed("reclaim", _reclaim(config, client, workdir, secrets)),
            _timed("watch", _watch(config, client, workdir, webhook, secrets)),
        )
    for name, family in zip(("tpu", "runners", "reclaim", "watch"), families, strict=True):
        report.worker_kills[name] = family.kills
        report.runs += family.outcomes
        report.findings += family.findings
        report.histories_scanned += family.histories
        report.histories_by_family[name] = family.histories
        report.secrets_found += family.secrets
    report.seconds = time.monotonic() - started
    return report
