"""Job reclaim against the cases a tester who tries to break it reaches for: a forged
completion report after a quarantine, a reclaim terminated while its agent keeps listing the
job, an agent that goes silent after one empty heartbeat, an agent nobody can reach, and a
drain whose answer was lost while the verdict changed. Each ends safe (no live job touched)
and live (released, drained or restarted, never a loop that does nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from keeper.activities.reclaim.reclaim import ReclaimActivities
from keeper.domain.reclaim.calls import DrainCall, UndrainCall
from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.runtime.reclaim.deps import open_reclaim_deps
from keeper.store.reclaim import DRAINS_KEPT
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc
from tests.reclaim.test_reclaim_e2e import (
    FENCED,
    _reason_in,
    drained_view,
    ended_long_ago,
    live,
    names,
    nodes,
    only_workflow,
    stale,
)
from tests.reclaim.world import ReclaimWorld, free_port, reclaim_world, until

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(dev_env: WorkflowEnvironment) -> Any:
    return dev_env.client


async def _beating_until(w: ReclaimWorld, node: str, check: Any, what: str) -> Any:
    """Heartbeats of `node` (as spurd keeps sending them) until `check` holds."""

    async def beat_and_check() -> Any:
        await w.beat(node)
        return await check()

    return await until(beat_and_check, within=30, what=what)


async def test_a_forged_completion_report_never_turns_a_quarantine_into_a_cancel(
    client: Any, tmp_path: Path
) -> None:
    """spur binds no node token to ReportJobStatus: anyone who reaches the tap can name a
    node and a job. A report closes the holding with its fence kept, so the agent's next
    listing reopens the quarantined holding, never a new sighting cancelled by its number."""
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node, other = names(w)[:2]
        before = [w.emu.submit()[0].job_id for _ in range(4)]
        (pre_wipe,) = w.emu.submit(nodes=[node])
        await w.beat(node)
        w.emu.wipe()
        for n in names(w):
            await w.beat(n)
        reissued = [w.emu.submit()[0].job_id for _ in range(len(before) + 2)]
        assert pre_wipe.job_id in reissued
        w.emu.dispatch(pre_wipe.job_id, [other])
        await w.beat(node)
        wf = only_workflow(w, node, pre_wipe.job_id)
        await until(lambda: w.emu.cluster.drains, what="the quarantine drain")
        await until(lambda: _reason_in(w, wf, FENCED), what="the epoch fence")
        w.emu.complete(pre_wipe.job_id)  # the namesake ends on `other`, long ago
        ended_long_ago(w, pre_wipe.job_id)
        forged = slurm_pb2.ReportJobStatusRequest(
            job_id=pre_wipe.job_id,
            state=slurm_pb2.JOB_COMPLETED,
            reporting_node=w.emu.agent(node).state.hostname,
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{w.tap.port}") as channel:
            await slurm_pb2_grpc.SlurmControllerStub(channel).ReportJobStatus(forged, timeout=5)
        result = await w.result(wf)
        assert result.outcome is Outcome.RELEASED  # the forgery was believed...
        await w.beat(node)  # ...until the agent lists the job again
        assert pre_wipe.job_id in w.emu.holdings(node)
        (holding,) = [h for h in w.memory.holdings(node) if h.job_id == pre_wipe.job_id]
        assert (holding.sighting, holding.epoch) == (1, 1)  # the same holding, fenced
        assert only_workflow(w, node, pre_wipe.job_id) == wf
        await until(lambda: _reason_in(w, wf, FENCED), what="the fence, again")
        assert w.cancels() == []
        await w.handle(wf).cancel()


async def test_a_terminated_reclaim_whose_agent_keeps_listing_the_job_is_started_again(
    client: Any, tmp_path: Path
) -> None:
    """Held is signalled on change only, so the intake tells a reclaim again that the agent
    still holds the job once a recheck interval has passed; a reclaim that no longer runs is
    then found, and the holding gets a new one."""
    async with reclaim_world(client, tmp_path, agents=nodes(), mode=Mode.OBSERVE) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        first = await w.handle(wf).describe()
        await w.handle(wf).terminate("an operator's mistake")

        async def restarted() -> bool:
            desc = await w.handle(wf).describe()
            return desc.run_id != first.run_id and desc.status is WorkflowExecutionStatus.RUNNING

        await _beating_until(w, node, restarted, "a new run of the reclaim")
        assert w.intake.counters.closed >= 1 and w.cancels() == []
        await w.handle(wf).terminate("done")


async def test_an_agent_silent_after_one_empty_heartbeat_is_escalated_to_a_drain(
    client: Any, tmp_path: Path
) -> None:
    """One empty heartbeat after the first cancel, then nothing: no evidence is coming, so
    the escalation goes on (kill, drain) instead of waiting for an idle window forever."""
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        job = stale(w, node)
        w.emu.set_reports(node, False)
        w.emu.set_cancel_timeout(node, 0.01, acts=False)  # wedged: it keeps the job
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.cancels(job), what="the first cancel")
        w.emu.set_contention(node, "empty")
        assert await w.beat(node) == []
        drained = await until(lambda: w.emu.cluster.drains, within=60, what="the drain")
        assert {d["name"] for d in drained} == {node}
        assert [c.signal for c in w.cancels(job)] == [0, 0, 9]
        await w.handle(wf).cancel()


async def test_an_agent_nobody_can_reach_is_escalated_to_a_drain(
    client: Any, tmp_path: Path
) -> None:
    """Every cancel answers UNAVAILABLE: each is a try of the escalation, so the node is
    drained and an operator told, rather than the reclaim trying forever in silence."""
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        known = w.memory.node(node)
        assert known is not None
        w.memory.register_node(
            node, known.hostname, "127.0.0.1", free_port(), "", datetime.now(UTC)
        )
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.emu.cluster.drains, within=60, what="the drain")
        view = await until(lambda: drained_view(w, wf), what="the reclaim to record its drain")
        assert view.attempts == 3 and "not delivered" in " ".join(view.actions)
        assert view.cancels_sent == 0  # refused outright: nothing reached the agent
        await w.handle(wf).cancel()


async def _stale_holding(w: ReclaimWorld) -> tuple[str, Any, str, Any]:
    """A job the controller moved to another node, still held on the first: its node, the
    job, its reclaim's workflow id and the holding."""
    node, other = names(w)[:2]
    live(w, node)
    (moved,) = w.emu.submit(nodes=[node])
    w.emu.wrong_eviction(moved.job_id, [other])  # active elsewhere: stale on `node`
    await w.beat(node)
    wf = only_workflow(w, node, moved.job_id)
    ((holding, _),) = [p for p in w.workflows(node) if p[0].job_id == moved.job_id]
    return node, moved, wf, holding


async def test_a_drain_retried_after_the_verdict_changed_lifts_the_drain_it_made(
    client: Any, tmp_path: Path
) -> None:
    """The drain's first try drains the node and its answer is lost (a worker died); the job
    is requeued; the retry's fresh read spares the holding, and it lifts keeper's drain in the
    same call rather than leave it on a node nobody will undrain."""
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node, moved, wf, holding = await _stale_holding(w)
        deps = open_reclaim_deps(w.settings.reclaim)
        try:
            acts = ReclaimActivities(deps.settings, deps.controller, deps.agents, deps.memory)
            call = DrainCall(
                holding=holding, workflow_id=wf, reason=f"keeper-reclaim: x; {wf}", chain="run-1"
            )
            assert (await acts.drain(call)).drained
            w.emu.requeue(moved.job_id)  # pending again: spared
            retry = await acts.drain(call)
            assert not retry.drained and "resumed" in retry.actual_state, retry
            assert deps.memory.drains(node) == []
            assert w.emu.cluster.node(node).state not in (
                slurm_pb2.NODE_DRAIN,
                slurm_pb2.NODE_DRAINING,
            )
        finally:
            await deps.aclose()


class _UndrainFirst:
    """The controller, except that the run's undrain (the cancel path, which does not wait
    for a drain call still running) completes just before this DrainNode lands."""

    def __init__(self, controller: Any, undrain: Any) -> None:
        self._controller, self._undrain = controller, undrain

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)

    async def drain_node(self, name: str, reason: str) -> Any:
        await self._undrain()
        return await self._controller.drain_node(name, reason)


@pytest.mark.parametrize("undrain_lands", ["before the drain call", "before its DrainNode"])
async def test_a_drain_still_on_its_way_when_its_reclaim_was_cancelled_leaves_no_drain(
    client: Any, tmp_path: Path, undrain_lands: str
) -> None:
    """A cancelled reclaim lifts its drain without waiting for a drain call still running;
    that call's DrainNode, landing after the lift, must not leave the node drained with no
    reclaim open (the controller-wipe campaign's leak)."""
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node, _, wf, holding = await _stale_holding(w)
        deps = open_reclaim_deps(w.settings.reclaim)
        try:
            acts = ReclaimActivities(deps.settings, deps.controller, deps.agents, deps.memory)
            undrain = UndrainCall(holding=holding, workflow_id=wf, chain="run-1")
            if undrain_lands == "before the drain call":
                await acts.undrain(undrain)
            else:
                acts.controller = _UndrainFirst(deps.controller, lambda: acts.undrain(undrain))
            call = DrainCall(
                holding=holding, workflow_id=wf, reason=f"keeper-reclaim: x; {wf}", chain="run-1"
            )
            result = await acts.drain(call)
            assert not result.drained and "ended" in result.actual_state, result
            assert deps.memory.drains(node) == []
            assert w.emu.cluster.node(node).state not in (
                slurm_pb2.NODE_DRAIN,
                slurm_pb2.NODE_DRAINING,
            )
            # Another run chain of the same reclaim still drains.
            acts.controller = deps.controller
            again = await acts.drain(call.model_copy(update={"chain": "run-2"}))
            assert again.drained, again
            assert w.emu.cluster.node(node).state in (slurm_pb2.NODE_DRAIN, slurm_pb2.NODE_DRAINING)
        finally:
            await deps.aclose()


async def test_a_late_drain_whose_call_died_before_its_fence_check_is_lifted_by_the_intake(
    client: Any, tmp_path: Path
) -> None:
    """The one order the drain call cannot catch itself: its DrainNode lands after the run's
    lift, and the call dies (its worker killed) before it checks the fence. The record is
    closed; the intake's housekeeping finds the node still carrying that reclaim's reason
    and lifts it."""
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node, _, wf, _ = await _stale_holding(w)
        reason = f"keeper-reclaim: job held after release; {wf}"
        now = datetime.now(UTC)
        assert w.memory.record_drain(node, wf, reason, now, chain="run-1")
        assert w.memory.clear_drain(node, wf, now, chain="run-1") == []  # the run's lift
        await w.intake.assessor.controller.drain_node(node, reason)  # then the late DrainNode
        assert w.emu.cluster.node(node).state in (slurm_pb2.NODE_DRAIN, slurm_pb2.NODE_DRAINING)
        assert w.memory.drains(node) == []  # nothing open: the orphan lift alone misses it
        w.intake._last_housekeeping = None  # the next batch does the housekeeping
        await w.beat(node)
        assert w.emu.cluster.node(node).state not in (
            slurm_pb2.NODE_DRAIN,
            slurm_pb2.NODE_DRAINING,
        )
        assert w.emu.cluster.node(node).state_reason == ""


async def test_the_intakes_housekeeping_forgets_drains_lifted_a_week_ago_and_keeps_the_rest(
    client: Any, tmp_path: Path
) -> None:
    """Every reclaim that drains leaves a lifted drain and its fence behind; kept forever, the
    tables only grow. The intake prunes those older than DRAINS_KEPT with its housekeeping, and
    keeps a recent fence, which still refuses its chain's late drain (the store's own test
    shows an open drain is kept however old)."""
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node, _, wf, _ = await _stale_holding(w)
        old = datetime.now(UTC) - DRAINS_KEPT - timedelta(minutes=1)
        assert w.memory.record_drain(node, "wf-old", "old", old, chain="run-1")
        assert w.memory.clear_drain(node, "wf-old", old, chain="run-1") == []
        now = datetime.now(UTC)
        assert w.memory.record_drain(node, wf, "recent", now, chain="run-1")
        assert w.memory.clear_drain(node, wf, now, chain="run-1") == []
        w.intake._last_housekeeping = None  # the next batch does the housekeeping
        await w.beat(node)
        assert not w.memory.drain_fenced(node, "wf-old", "run-1")
        assert w.memory.drain_fenced(node, wf, "run-1")
        assert w.memory.record_drain(node, wf, "late", datetime.now(UTC), chain="run-1") is False
        assert w.memory.forget_drains(old + timedelta(minutes=2)) == 0  # nothing old is left


async def test_a_job_started_moments_before_a_wipe_is_never_cancelled_by_its_reissued_id(
    client: Any, tmp_path: Path
) -> None:
    """Job 6 starts on A a moment before the controller is wiped, before A's agent ever
    listed it. The new controller issues ids 1 to 6 again and runs its job 6 on B. A's first
    heartbeat that lists 6 reads job 6 alone: it runs elsewhere, and nothing in that read
    shows the reissue. The cancel's own read of the whole map finds the new epoch first, so
    A's holding, seen in the old one, is fenced, never cancelled."""
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        a, b, c = names(w)
        for _ in range(4):
            w.emu.submit()
        live(w, c)  # job 5
        await w.beat(c)  # keeper reads every job: 1 to 5, the watermark 6
        (started,) = w.emu.submit(nodes=[a])
        assert started.job_id == 6
        w.emu.wipe()
        for n in (a, b, c):
            await w.beat(n)  # NOT_FOUND: each agent registers again, through the tap
        assert [w.emu.submit()[0].job_id for _ in range(6)] == [1, 2, 3, 4, 5, 6]
        w.emu.dispatch(6, [b])
        await w.beat(a)
        assert w.memory.epoch().epoch == 1  # the read of job 6 alone shows no reissue
        wf = only_workflow(w, a, 6)
        await until(lambda: _reason_in(w, wf, FENCED), what="the epoch fence")
        assert w.memory.epoch().epoch == 2
        await until(lambda: w.emu.cluster.drains, what="the quarantine drain")
        assert w.cancels() == [] and 6 in w.emu.holdings(a)
        await w.handle(wf).cancel()
