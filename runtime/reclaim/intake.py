"""The reclaim intake: what agents report holding, decided, and handed to workflows.

Reports come from the heartbeat tap (every Heartbeat an agent sends: a complete listing;
every ReportJobStatus: the agent reaped a job's process), from `keeper reclaim report` and
from the HTTP endpoint (a partial listing: the jobs it names). The intake gathers them for
`reclaim.batch_window`, reads the controller once for the whole batch (a view newer than
every report it decides), folds that view into keeper's memory, records each holding's first
sighting, and decides every holding (domain/reclaim/decide.py). Then:

| holding | what the intake does |
|---|---|
| spare | nothing: no workflow is started or signalled |
| stale (reclaim or quarantine), no workflow yet | signal-with-start its JobReclaim (USE_EXISTING) |
| has a workflow | folds each report's evidence into keeper's memory; signals it (below) |

The evidence (domain/reclaim/evidence.py) is signalled to the holding's workflow: held when
that changes, absent, idle and done each time (the workflow counts them). An empty heartbeat
starts and decides nothing (spur sends one whenever the agent's job map is busy); to a
node's open reclaims it is idle evidence only while the controller runs nothing on that
node. A heartbeat that omits a job the controller runs on that node is partial: what it
omits is no evidence of release. A signal to a reclaim that is no longer running is benign
(counted as `closed`): the holding is detached from it, so the next stale verdict starts a
new one. Nothing here can block or fail the tap's forwarding: the tap hands events over
through a bounded queue, and an error here is logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport, evidence_of
from keeper.domain.reclaim.identity import NodeNameError
from keeper.domain.reclaim.models import EVIDENCE_SIGNAL, RECLAIM_WORKFLOW_TYPE, Decision, Holding
from keeper.domain.reclaim.state import JobReclaimInput
from keeper.domain.reclaim.steps import Step
from keeper.runtime.reclaim import search_attributes as sa
from keeper.runtime.reclaim.agent_client import DEFAULT_AGENT_PORT
from keeper.runtime.reclaim.assess import Assessor
from keeper.runtime.reclaim.views import drained_by_keeper
from keeper.runtime.settings import Settings
from keeper.store.reclaim import DRAINS_KEPT, FORGET_AFTER
from keeper.wire.spur import slurm_pb2

log = logging.getLogger("keeper.reclaim.intake")
# How often an intake without Temporal tries to connect again.
RECONNECT_S = 10.0
# Reports waiting for the next batch; beyond it, the oldest are dropped (and counted): the
# next heartbeat of the same node says the same again.
MAX_PENDING = 50_000
# How long after its lift a drain call's DrainNode may still land: far past the call's
# start-to-close timeout (30 s), so a worker killed mid-call is covered too.
LATE_DRAIN_WINDOW = timedelta(hours=1)


@dataclass(frozen=True)
class Report:
    hostname: str
    job_ids: tuple[int, ...]
    received_at: datetime
    # A heartbeat lists everything the agent holds; a report only the jobs it names.
    complete: bool
    source: str = "heartbeat"
    # The agent reported these jobs finished (ReportJobStatus): evidence, never a sighting.
    finished: bool = False


@dataclass(frozen=True)
class Handled:
    """What the intake made of one reported holding."""

    node: str
    job_id: int
    decision: Decision
    workflow_id: str | None
    started: bool


@dataclass
class IntakeCounters:
    reports: int = 0
    empty: int = 0
    bad_names: int = 0
    dropped: int = 0
    started: int = 0
    signalled: int = 0
    errors: int = 0
    batches: int = 0
    # Tap events the controller refused (never decided), and starts skipped for want of
    # a Temporal connection.
    refused: int = 0
    no_temporal: int = 0
    # Completion reports seen (ReportJobStatus), and signals that found their reclaim
    # closed (benign: the holding is detached from it).
    finished: int = 0
    closed: int = 0


@dataclass
class Intake:
    assessor: Assessor
    client: Client | None
    settings: Settings
    counters: IntakeCounters = field(default_factory=IntakeCounters)
    _pending: list[Report] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    # How to connect to Temporal when `client` is None (the tap started during an outage).
    connect: Callable[[], Awaitable[Client]] | None = None
    _last_connect: float | None = None
    _last_full: float | None = None
    _last_housekeeping: float | None = None
    _busy: bool = False
    _settled: asyncio.Event = field(default_factory=asyncio.Event)

    async def idle(self) -> None:
        """Returns once every report offered so far has been decided (tests, shutdown)."""
        if self._pending or self._busy:
            self._settled.clear()
            await self._settled.wait()

    @property
    def memory(self):  # type: ignore[no-untyped-def]
        return self.assessor.memory

    @property
    def task_queue(self) -> str:
        return self.settings.temporal.family_queue("reclaim")

    # ---- what the tap hands over ---------------------------------------------------------

    async def registered(self, hostname: str, address: str, port: int, at: datetime) -> None:
        try:
            node = self.assessor.canonical(hostname)
        except NodeNameError:
            self.counters.bad_names += 1
            return
        await asyncio.to_thread(
            self.memory.register_node,
            node, hostname, address, port or DEFAULT_AGENT_PORT, "", at,
        )  # fmt: skip

    def offer(self, report: Report) -> None:
        """Queues a report for the next batch; never blocks."""
        self.counters.reports += 1
        if report.finished:
            self.counters.finished += 1
        elif not report.job_ids:
            self.counters.empty += 1
        self._pending.append(report)
        if len(self._pending) > MAX_PENDING:
            del self._pending[0]
            self.counters.dropped += 1
        self._wake.set()

    async def run(self) -> None:
        """Decides the queued reports a batch at a time, until cancelled."""
        window = self.settings.reclaim.batch_window.total_seconds()
        while True:
            await self._wake.wait()
            await asyncio.sleep(window)
            self._wake.clear()
            self._busy = True
            batch, self._pending = self._pending, []
            try:
                if batch:
                    await self.process(batch)
            except Exception:
                self.counters.errors += 1
                log.exception("reclaim intake: a batch of %d reports failed", len(batch))
            finally:
                self._busy = False
                if not self._pending:
                    self._settled.set()

    # ---- deciding ------------------------------------------------------------------------

    async def process(self, reports: Sequence[Report]) -> list[Handled]:
        """Decides every reported holding in `reports` against one controller read.

        The memory is read and written a node at a time in one thread hop per step, not per
        report: a batch holds many heartbeats, often several of one node."""
        self.counters.batches += 1
        watched_nodes = await asyncio.to_thread(self.memory.watched_nodes)
        by_node: dict[str, list[Report]] = {}
        for report in sorted(reports, key=lambda r: r.received_at):
            try:
                node = self.assessor.canonical(report.hostname)
            except NodeNameError:
                self.counters.bad_names += 1
                continue
            # A completion report matters only to an open reclaim of its node; it names the
            # node by the agent's OS host name, which keeper may not know: no lookup for it.
            if not report.finished or node in watched_nodes:
                by_node.setdefault(node, []).append(report)
        # Heartbeats and reports that may sight a holding (completion reports never do).
        sightings = {
            n: kept for n, rs in by_node.items() if (kept := [r for r in rs if not r.finished])
        }
        await asyncio.to_thread(self._touch, sightings)
        # Pruning and orphaned drains, as often as full reads, whatever the batch holds.
        if self._due(self._last_housekeeping):
            self._last_housekeeping = time.monotonic()
            await self._forget_quiet_holdings()
            await self._forget_lifted_drains()
            await self._lift_orphaned_drains()
        await self._learn_nodes(set(sightings))
        listed = {n: rs for n, rs in sightings.items() if any(r.job_ids for r in rs)}
        # Nodes whose reports are evidence with no sighting: empty heartbeats and completion
        # reports, for the open reclaims of that node.
        evidence_only = {
            n for n, rs in by_node.items()
            if n in watched_nodes and any(r.finished or not r.job_ids for r in rs)
        }  # fmt: skip
        if not listed and not evidence_only:
            return []
        watched = await asyncio.to_thread(self._watched, sorted(set(listed) | evidence_only))
        handled = await self._decide_listed(listed, watched) if listed else []
        # What each node must be holding by the controller's account: a heartbeat that omits
        # any of it is partial, and says nothing about what it omits; an empty one is idle
        # evidence only where the controller runs nothing.
        complete = any(r.complete for n in watched for r in by_node.get(n, []))
        active = await self.assessor.active_by_node() if complete and watched else {}
        for node in sorted(watched):
            for report in by_node.get(node, []):
                await self._evidence(watched[node], report, active.get(node, set()))
        return handled

    async def _decide_listed(
        self, listed: dict[str, list[Report]], watched: dict[str, list[tuple[Holding, str]]]
    ) -> list[Handled]:
        """Sights every listed holding, decides it against one controller read, and starts a
        reclaim for each stale one that has none (added to `watched`)."""
        job_ids = {j for rs in listed.values() for r in rs for j in r.job_ids}
        job_ids |= {h.job_id for pairs in watched.values() for h, _ in pairs}
        # Every job, now and then: the watermark and the epoch need the whole job map, a
        # batch's decisions only the jobs it reports.
        everything = self._due(self._last_full)
        if everything:
            self._last_full = time.monotonic()
        view, epoch = await self.assessor.read(job_ids, everything=everything)
        sighted = await asyncio.to_thread(self._sight, listed, epoch.epoch)
        decided = await self.assessor.decide([h for _, h, _ in sighted], view, epoch)
        handled: list[Handled] = []
        for (node, holding, first), (_, decision) in zip(sighted, decided, strict=True):
            attached = {(h.job_id, h.sighting): wf for h, wf in watched.get(node, [])}
            workflow_id = attached.get((holding.job_id, holding.sighting))
            started = False
            if workflow_id is None and decision.stale:
                workflow_id = await self._start(holding, decision, first)
                started = workflow_id is not None
                if started:
                    watched.setdefault(node, []).append((holding, workflow_id))
            handled.append(Handled(node, holding.job_id, decision, workflow_id, started))
        return handled

    def _touch(self, by_node: dict[str, list[Report]]) -> None:
        for node, node_reports in by_node.items():
            self.memory.touch_node(node, node_reports[-1].received_at)

    def _watched(self, nodes: list[str]) -> dict[str, list[tuple[Holding, str]]]:
        return {node: self.memory.open_workflows_of(node) for node in nodes}

    def _sight(
        self, listed: dict[str, list[Report]], epoch: int
    ) -> list[tuple[str, Holding, Report]]:
        """Each reported holding once, first seen at the earliest report that lists it."""
        out: list[tuple[str, Holding, Report]] = []
        for node, node_reports in listed.items():
            listed_before: set[int] = set()
            for report in node_reports:  # oldest first
                ids = [j for j in dict.fromkeys(report.job_ids) if j not in listed_before]
                listed_before.update(ids)
                if ids:
                    sighted = self.memory.sight(node, ids, report.received_at, epoch)
                    out.extend((node, holding, report) for holding in sighted)
        return out

    def _due(self, last: float | None) -> bool:
        """Whether a full read interval has passed since `last` (None: never done)."""
        interval = self.settings.reclaim.full_read_interval.total_seconds()
        return last is None or time.monotonic() - last >= interval

    async def _lift_orphaned_drains(self) -> None:
        """A drain whose reclaim is gone (terminated: no workflow code ran on the way out) is
        lifted here, with each full read: keeper's drain reason names its workflow, and only
        a node still carrying exactly that reason, which no running reclaim holds, is
        resumed."""
        await self._lift_late_drains()
        drains = await asyncio.to_thread(self.memory.drains)
        if not drains or await self._temporal() is None:
            return
        for record in drains:
            if await self._still_running(record.workflow_id):
                continue
            holders = await asyncio.to_thread(
                self.memory.clear_drain, record.node_id, record.workflow_id, datetime.now(UTC)
            )
            if holders:
                continue
            try:
                listed = await self.assessor.controller.get_nodes()
                await self._resume_listed(listed, record.node_id, record.reason, record.workflow_id)
            except Exception as err:
                self.counters.errors += 1
                log.warning("could not lift %s's drain on %s: %s", record.workflow_id,
                            record.node_id, err)  # fmt: skip

    async def _lift_late_drains(self) -> None:
        """A drain that landed after its reclaim had lifted it, from a drain call killed
        before it could notice (it checks the fence after DrainNode answers): its record is
        closed, so only the node still carrying exactly that reclaim's reason shows it. Lifted
        when no drain of keeper's holds the node; one read and one node listing for all."""
        since = datetime.now(UTC) - LATE_DRAIN_WINDOW
        late = await asyncio.to_thread(self.memory.fenced_drains, since)
        if not late:
            return
        try:
            listed = await self.assessor.controller.get_nodes()
            for record in late:
                await self._resume_listed(listed, record.node_id, record.reason, record.workflow_id)
        except Exception as err:
            self.counters.errors += 1
            log.warning("could not lift keeper's late drains: %s", err)

    async def _resume_listed(
        self, listed: Sequence[slurm_pb2.NodeInfo], node: str, reason: str, workflow_id: str
    ) -> None:
        for info in listed:
            with contextlib.suppress(NodeNameError):
                if self.assessor.canonical(info.name) != node:
                    continue
            if drained_by_keeper(info) and info.state_reason == reason:
                await self.assessor.controller.update_node(
                    info.name, state=slurm_pb2.NODE_IDLE, reason=""
                )
                log.warning(
                    "lifted keeper's drain of %s: its reclaim %s ended without lifting it",
                    info.name, workflow_id,
                )  # fmt: skip
            return

    async def _forget_quiet_holdings(self) -> None:
        """Holdings no heartbeat has listed for FORGET_AFTER and no reclaim watches are
        pruned with each full read, so the memory stays bounded on a busy cluster."""
        before = datetime.now(UTC) - FORGET_AFTER
        forgotten = await asyncio.to_thread(self.memory.forget, before)
        if forgotten:
            log.info("reclaim memory: forgot %d holdings not reported since %s", forgotten, before)

    async def _forget_lifted_drains(self) -> None:
        """Drains lifted, and fences made, DRAINS_KEPT ago go the same way."""
        before = datetime.now(UTC) - DRAINS_KEPT
        forgotten = await asyncio.to_thread(self.memory.forget_drains, before)
        if forgotten:
            log.info("reclaim memory: forgot %d drain rows lifted before %s", forgotten, before)

    async def _learn_nodes(self, nodes: set[str]) -> None:
        """Nodes keeper has not seen register (the tap started after them) are learned from
        the controller's node list: known, though without an agent address yet."""
        known = await asyncio.to_thread(self.memory.known_nodes)
        if nodes <= known:
            return
        now = datetime.now(UTC)
        for info in await self.assessor.controller.get_nodes():
            with contextlib.suppress(NodeNameError):
                node = self.assessor.canonical(info.name)
                if node in nodes and node not in known:
                    await asyncio.to_thread(
                        self.memory.register_node, node, info.name, "", 0, "", now
                    )

    async def _temporal(self) -> Client | None:
        """The Temporal client, connected again (at most every RECONNECT_S) when the tap
        started without one: a tap outlives a Temporal outage."""
        if self.client is None and self.connect is not None:
            now = time.monotonic()
            if self._last_connect is None or now - self._last_connect >= RECONNECT_S:
                self._last_connect = now
                try:
                    self.client = await self.connect()
                    log.info("reclaim intake: connected to Temporal")
                except Exception as err:
                    log.warning("reclaim intake: Temporal still unreachable: %s", err)
        return self.client

    async def _start(self, holding: Holding, decision: Decision, report: Report) -> str | None:
        client = await self._temporal()
        if client is None:
            self.counters.no_temporal += 1
            return None
        workflow_id = holding.workflow_id
        first = BeatReport(evidence=BeatEvidence.HELD, at=report.received_at)
        try:
            await client.start_workflow(
                RECLAIM_WORKFLOW_TYPE,
                # No policy: the worker's settings give it (the `reclaim.policy` activity).
                JobReclaimInput(holding=holding, first=decision),
                id=workflow_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                start_signal=EVIDENCE_SIGNAL,
                start_signal_args=[first],
                search_attributes=sa.for_holding(holding.node, holding.job_id, Step.ASSESS.value),
                static_summary=f"reclaim job {holding.job_id} held by {holding.node}: "
                f"{decision.verdict.value} ({decision.reason.value})",
            )
        except Exception as err:
            # The holding stays without a workflow: the next heartbeat tries again.
            self.counters.errors += 1
            log.warning("could not start %s: %s", workflow_id, err)
            return None
        self.counters.started += 1
        await asyncio.to_thread(
            self.memory.attach_workflow, holding.node, holding.job_id, holding.sighting, workflow_id
        )
        await asyncio.to_thread(
            self.memory.set_last_signalled, holding.node, holding.job_id, holding.sighting, first
        )
        return workflow_id

    async def _evidence(
        self, watched: list[tuple[Holding, str]], report: Report, active_here: set[int]
    ) -> None:
        """Folds what one report says about each open reclaim of its node into keeper's
        memory, and tells the reclaim: held when that changes, absent, idle and done each
        time (the workflow counts them). A heartbeat that omits a job the controller runs on
        the node is partial, so its omissions are no evidence; an empty one is idle evidence
        only while the controller runs nothing there; a partial report (CLI, HTTP) is
        evidence only of what it lists."""
        if not watched or not (report.complete or report.finished):
            return
        whole = active_here <= set(report.job_ids)
        for holding, workflow_id in watched:
            if report.received_at < holding.first_seen:
                continue  # from before the holding was seen: evidence of nothing about it
            if report.finished:
                if holding.job_id not in report.job_ids:
                    continue
                evidence = BeatEvidence.DONE
            else:
                evidence = evidence_of(
                    report.job_ids, holding.job_id, node_runs_nothing=not active_here
                )
            if evidence is BeatEvidence.SILENT or (evidence is BeatEvidence.ABSENT and not whole):
                continue
            told = BeatReport(evidence=evidence, at=report.received_at)
            h = holding
            await asyncio.to_thread(self.memory.add_evidence, h.node, h.job_id, h.sighting, told)
            if evidence is BeatEvidence.HELD and await self._told_held_lately(h, told.at):
                continue  # held again: told again only once a recheck interval has passed
            await self._signal(holding, workflow_id, told)

    async def _told_held_lately(self, h: Holding, at: datetime) -> bool:
        """The reclaim was told `held` less than a recheck interval before `at`."""
        last = await asyncio.to_thread(self.memory.last_signalled, h.node, h.job_id, h.sighting)
        return (
            last is not None
            and last.evidence is BeatEvidence.HELD
            and at - last.at < self.settings.reclaim.timing.drained_recheck
        )

    async def _still_running(self, workflow_id: str) -> bool:
        """Whether the workflow runs: any doubt counts as running, so neither a holding nor a
        drain is let go of while a reclaim may still act on it."""
        assert self.client is not None
        try:
            desc = await self.client.get_workflow_handle(workflow_id).describe()
        except RPCError as err:
            return err.status is not RPCStatusCode.NOT_FOUND
        except Exception:
            return True
        return desc.status is WorkflowExecutionStatus.RUNNING

    async def _signal(self, holding: Holding, workflow_id: str, told: BeatReport) -> None:
        client = await self._temporal()
        if client is None:
            return
        h = holding
        try:
            await client.get_workflow_handle(workflow_id).signal(EVIDENCE_SIGNAL, told)
        except RPCError as err:
            if err.status is not RPCStatusCode.NOT_FOUND:
                self.counters.errors += 1
                log.warning("could not signal %s: %s", workflow_id, err)
                return
            # The reclaim is no longer running (it ended, was terminated, or its history is
            # gone): benign. Once a describe agrees, the holding stays open with its fence but
            # without that workflow, so the next stale verdict starts a new one.
            self.counters.closed += 1
            if await self._still_running(workflow_id):
                return
            await asyncio.to_thread(
                self.memory.detach_workflow, h.node, h.job_id, h.sighting, workflow_id
            )
            log.info("%s is not running; %s's holding of job %s is detached from it",
                     workflow_id, h.node, h.job_id)  # fmt: skip
            return
        except Exception as err:
            self.counters.errors += 1
            log.warning("could not signal %s: %s", workflow_id, err)
            return
        self.counters.signalled += 1
        await asyncio.to_thread(
            partial(self.memory.set_last_signalled, told=True), h.node, h.job_id, h.sighting, told
        )
