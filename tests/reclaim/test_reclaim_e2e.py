"""Job reclaim end to end: spur's agents heartbeat through keeper's tap, the intake decides,
JobReclaim workflows act on the dev server, and the spur emulator records every cancel and
drain, so each test proves both what was released and that no live job was touched.

One test per edge case of docs/reclaim.md (and the reference list it answers). The incident
that started the family (spur #623: nodes wrongly marked down kept running their jobs while
the controller restarted them elsewhere, and rejected GPU work for more than a day) is
`test_a_job_requeued_elsewhere_is_stopped_on_the_old_node_only`. Each test has
its own emulator, tap, memory and task queue, and node names of its own, so tests never see
each other's reclaims.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from emulators.spur.config import AgentSpec
from keeper.activities.reclaim.reclaim import ReclaimActivities
from keeper.domain.reclaim.calls import CancelCall
from keeper.domain.reclaim.models import Reason, Verdict
from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.domain.reclaim.view import ReclaimView
from keeper.runtime.reclaim import search_attributes as sa
from keeper.runtime.reclaim.deps import open_reclaim_deps
from keeper.runtime.reclaim.service import run_tap
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc
from tests.reclaim.world import FAST, ReclaimWorld, free_port, reclaim_world, until

pytestmark = pytest.mark.e2e
HOUR = 3600.0


def nodes(count: int = 3) -> list[AgentSpec]:
    prefix = f"n{uuid.uuid4().hex[:6]}-"
    return [AgentSpec(node=f"{prefix}{i:02d}") for i in range(1, count + 1)]


def names(world: ReclaimWorld) -> list[str]:
    return list(world.emu.agents)


def ended_long_ago(world: ReclaimWorld, job_id: int, seconds: float = HOUR) -> None:
    """Backdates a finished job, as if it ended `seconds` ago."""
    job = world.emu.cluster.job(job_id)
    assert job.end_time is not None
    job.end_time -= seconds


def live(world: ReclaimWorld, node: str) -> int:
    """A job running on `node`: it keeps the node's heartbeats non-empty and complete."""
    (job,) = world.emu.submit(nodes=[node])
    return job.job_id


def stale(world: ReclaimWorld, node: str) -> int:
    """A job that finished an hour ago and that `node`'s agent still holds."""
    (job,) = world.emu.submit(nodes=[node])
    world.emu.complete(job.job_id, leak=True)
    ended_long_ago(world, job.job_id)
    return job.job_id


def only_workflow(world: ReclaimWorld, node: str, job_id: int) -> str:
    found = [wf for h, wf in world.workflows(node) if h.job_id == job_id]
    assert len(found) == 1, found
    return found[0]


async def view_of(world: ReclaimWorld, workflow_id: str) -> ReclaimView:
    return await world.handle(workflow_id).query("status", result_type=ReclaimView)


async def released_after_beats(world: ReclaimWorld, node: str, workflow_id: str) -> Any:
    """Beats `node` until its reclaim ends (each beat is evidence once the job is freed)."""
    for _ in range(FAST.release_beats + 2):
        await world.beat(node)
        desc = await world.handle(workflow_id).describe()
        if desc.status is not WorkflowExecutionStatus.RUNNING:
            break
    return await world.result(workflow_id)


def assert_no_live_job_was_cancelled(world: ReclaimWorld) -> None:
    touched = [c for c in world.cancels() if c.live_here]
    assert not touched, touched


@pytest.fixture
async def client(dev_env: WorkflowEnvironment) -> Any:
    return dev_env.client


async def test_a_terminal_job_still_held_is_cancelled_once_and_released(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        keep = live(w, node)
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.cancels(job), what="the graceful cancel")
        await until(lambda: job not in w.emu.holdings(node), what="the agent to let go")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED
        assert result.attempts == 1 and not result.drained
        ((cancel,),) = [w.cancels(job)]
        assert cancel.signal == 0 and cancel.node == node
        assert keep in w.emu.holdings(node) and not w.cancels(keep)
        assert result.last is not None and result.last.decision.reason is Reason.TERMINAL
        assert_no_live_job_was_cancelled(w)


async def test_a_job_that_ended_moments_ago_is_spared(client: Any, tmp_path: Path) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        (job,) = w.emu.submit(nodes=[node])
        w.emu.complete(job.job_id, leak=True)  # now: within the 2 minute grace
        await w.beat(node)
        assert w.workflows(node) == []
        assert w.cancels() == []
        (holding,) = w.memory.holdings(node)
        assert holding.job_id == job.job_id


async def test_an_aged_out_job_keeper_saw_finish_is_reclaimed(client: Any, tmp_path: Path) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        keep = live(w, node)
        (job,) = w.emu.submit(nodes=[node])
        w.emu.complete(job.job_id, leak=True)
        await w.beat(node)  # spared (just ended), and keeper saw it finished
        assert w.workflows(node) == []
        ended_long_ago(w, job.job_id)
        w.emu.cluster.retention = 60.0
        assert job.job_id in w.emu.evict()
        await w.beat(node)
        wf = only_workflow(w, node, job.job_id)
        await until(lambda: job.job_id not in w.emu.holdings(node), what="the release")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED
        assert result.last is not None and result.last.decision.reason is Reason.AGED_OUT
        assert keep in w.emu.holdings(node)
        assert_no_live_job_was_cancelled(w)


@pytest.mark.parametrize("offset", [0, 3])
async def test_untracked_ids_at_or_above_the_watermark_are_spared(
    client: Any, tmp_path: Path, offset: int
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node, other = names(w)[:2]
        jobs = [w.emu.submit(nodes=[other])[0].job_id for _ in range(4)]
        watermark = max(jobs) + 1
        # An id the controller has not stored (yet): a launch racing the submit's commit.
        w.emu.hold(node, watermark + offset)
        keep = live(w, node)
        await w.beat(node)
        assert w.workflows(node) == [] and w.cancels() == []
        assert keep in w.emu.holdings(node)


async def test_an_untracked_id_below_the_watermark_keeper_never_saw_is_quarantined(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node, other = names(w)[:2]
        jobs = [w.emu.submit(nodes=[other])[0].job_id for _ in range(4)]
        gone = jobs[1]
        w.emu.complete(gone)
        ended_long_ago(w, gone)
        w.emu.cluster.retention = 60.0
        assert gone in w.emu.evict()  # aged out before keeper ever saw it
        w.emu.hold(node, gone)
        await w.beat(node)
        wf = only_workflow(w, node, gone)
        await until(lambda: w.emu.cluster.drains, what="the drain")
        view = await until(lambda: drained_view(w, wf), what="the reclaim to record its drain")
        assert view.last is not None and view.last.decision.reason is Reason.NEVER_SEEN
        assert "keeper reclaim release" in view.attention
        assert w.cancels() == []
        (drain,) = w.emu.cluster.drains
        assert drain["name"] == node and drain["reason"].startswith("keeper-reclaim:")


async def test_an_array_parent_id_consumed_but_never_stored_is_never_cancelled(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        tasks = w.emu.submit(array_size=2)
        parent = min(t.job_id for t in tasks) - 1
        w.emu.hold(node, parent)
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        await until(lambda: w.emu.cluster.drains, what="the drain")
        view = await view_of(w, wf)
        assert view.last is not None
        assert view.last.decision.verdict is Verdict.QUARANTINE
        assert view.last.decision.reason is Reason.NEVER_SEEN
        assert w.cancels() == []


async def test_a_wiped_controller_reissuing_ids_cancels_nothing_and_quarantines(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node, other = names(w)[:2]
        before = [w.emu.submit()[0].job_id for _ in range(4)]
        (pre_wipe,) = w.emu.submit(nodes=[node])  # live, and it stays live on the agent
        await w.beat(node)
        assert w.workflows(node) == []
        w.emu.wipe()
        for n in names(w):
            await w.beat(n)  # NOT_FOUND: each agent registers again, through the tap
        # The new counter passes the live pre-wipe id; its new owner runs on another node.
        reissued = [w.emu.submit()[0].job_id for _ in range(len(before) + 2)]
        assert pre_wipe.job_id in reissued
        w.emu.dispatch(pre_wipe.job_id, [other])
        await w.beat(node)
        wf = only_workflow(w, node, pre_wipe.job_id)
        await until(lambda: w.emu.cluster.drains, what="the quarantine drain")
        # Right after the wipe the job was gone while keeper had last seen it running; once
        # the counter reissued its id to a new job, the holding is another epoch's.
        view = await until(lambda: _reason_in(w, wf, FENCED), what="the epoch fence")
        assert view.last.decision.verdict is Verdict.QUARANTINE
        assert w.memory.epoch().epoch == 2
        assert w.cancels() == []  # neither the pre-wipe run nor its namesake was touched
        assert pre_wipe.job_id in w.emu.holdings(node)
        assert pre_wipe.job_id in w.emu.holdings(other)
        # An operator vouches for it, wrongly: the agent still reports the pre-wipe run. The
        # holding kept its fence, so it is quarantined again, never cancelled as the new job.
        w.emu.complete(pre_wipe.job_id, leak=True)
        ended_long_ago(w, pre_wipe.job_id)  # the new job 5 is long over: "terminal" by number
        answer = await w.release(wf)
        assert answer.outcome is Outcome.OPERATOR_RELEASED and answer == await w.result(wf)
        await w.beat(node)
        assert only_workflow(w, node, pre_wipe.job_id) == wf
        view = await until(lambda: _reason_in(w, wf, FENCED), what="the fence, again")
        assert w.cancels() == []


async def test_a_wipe_seen_out_of_order_never_quarantines_a_live_job(
    client: Any, tmp_path: Path
) -> None:
    """Job 5 runs on A; the controller is wiped; the new one issues ids 1 to 6 and runs job 5
    on B and job 6 on C. C's heartbeat comes first: 6 is above every id keeper saw, so its
    holding is remembered in the old epoch; B's then shows job 5 reissued, and the epoch
    moves on. C's next heartbeat must not quarantine job 6, which the controller runs there."""
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        a, b, c = names(w)
        before = [w.emu.submit()[0].job_id for _ in range(4)]
        (pre_wipe,) = w.emu.submit(nodes=[a])
        assert pre_wipe.job_id == 5
        for n in (a, b, c):
            await w.beat(n)
        w.emu.wipe()
        for n in (a, b, c):
            await w.beat(n)  # NOT_FOUND: each agent registers again, through the tap
        reissued = [w.emu.submit()[0].job_id for _ in range(len(before) + 2)]
        assert reissued == [1, 2, 3, 4, 5, 6]
        w.emu.dispatch(5, [b])
        w.emu.dispatch(6, [c])
        await w.beat(c)
        assert w.memory.epoch().epoch == 1  # nothing keeper read yet shows the reissue
        await w.beat(b)
        await w.beat(a)
        assert w.memory.epoch().epoch == 2
        for _ in range(3):
            await w.beat(c)
        (held_on_c,) = [h for h in w.memory.holdings(c) if h.job_id == 6]
        assert held_on_c.epoch == 1  # remembered in the old epoch, as the incident had it
        assert [wf for h, wf in w.workflows(c)] == []
        # A's pre-wipe job is quarantined (its id names B's job now), never cancelled.
        wf = only_workflow(w, a, 5)
        await until(lambda: _reason_in(w, wf, FENCED), what="the epoch fence on A")
        drained = await until(lambda: w.emu.cluster.drains, what="A's drain")
        assert {d["name"] for d in drained} == {a}
        assert w.cancels() == []
        assert_no_live_job_was_cancelled(w)


FENCED = {Reason.OTHER_EPOCH, Reason.PREDATES_JOB}


async def _reason_in(w: ReclaimWorld, wf: str, reasons: set[Reason]) -> ReclaimView | None:
    view = await view_of(w, wf)
    return view if view.last is not None and view.last.decision.reason in reasons else None


async def test_a_job_requeued_elsewhere_is_stopped_on_the_old_node_only(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node, other = names(w)[:2]
        keep = live(w, node)
        (job,) = w.emu.submit(nodes=[node])
        w.emu.wrong_eviction(job.job_id, [other])
        await w.beat(node)
        wf = only_workflow(w, node, job.job_id)
        await until(lambda: job.job_id not in w.emu.holdings(node), what="the old run to stop")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED
        assert result.last is not None
        assert result.last.decision.reason is Reason.ACTIVE_ELSEWHERE
        assert {c.node for c in w.cancels()} == {node}
        assert job.job_id in w.emu.holdings(other)
        assert keep in w.emu.holdings(node)
        assert_no_live_job_was_cancelled(w)


@pytest.mark.parametrize("how", ["here", "not-committed", "multi-node", "pending"])
async def test_a_job_that_may_be_live_on_the_node_is_spared(
    client: Any, tmp_path: Path, how: str
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node, other = names(w)[:2]
        if how == "here":
            w.emu.submit(nodes=[node])
        elif how == "not-committed":
            w.emu.submit(nodes=[node], commit=False)
        elif how == "multi-node":
            w.emu.submit(nodes=[node, other])
            await w.beat(other)
        else:
            (job,) = w.emu.submit()
            w.emu.hold(node, job.job_id)  # mid-dispatch: the agent has it, the job is PENDING
        await w.beat(node)
        assert w.workflows() == [] and w.cancels() == []


@pytest.mark.parametrize("back_to", ["pending", "this-node"])
async def test_a_job_that_comes_back_before_the_send_is_not_cancelled(
    client: Any, tmp_path: Path, back_to: str
) -> None:
    # The intake decided on one read; the workflow reads again before it sends.
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node, other = names(w)[:2]
        (job,) = w.emu.submit(nodes=[node])
        w.emu.wrong_eviction(job.job_id, [other])
        await w.beat(node)
        wf = only_workflow(w, node, job.job_id)
        if back_to == "pending":
            w.emu.requeue(job.job_id, leak=True)
        else:
            # Requeued again, to this node: a new run attempt the old cancel must not kill.
            w.emu.requeue(job.job_id, to_nodes=[node], leak=True)
        await w.start_worker()
        result = await w.result(wf)
        assert result.outcome is Outcome.SPARED
        assert result.last is not None
        expected = Reason.WAITING if back_to == "pending" else Reason.ACTIVE_HERE
        assert result.last.decision.reason is expected
        assert w.cancels() == []
        # The holding keeps its fence (first sighting, epoch) and no longer has a reclaim:
        # when it turns stale again, a reclaim starts under the same fence key.
        (kept,) = [h for h in w.memory.holdings(node) if h.job_id == job.job_id]
        assert kept == result.holding and w.workflows(node) == []
        if back_to == "this-node":
            w.emu.complete(job.job_id, leak=True)
            ended_long_ago(w, job.job_id)
            await w.beat(node)
            assert only_workflow(w, node, job.job_id) == wf


async def test_hostname_spellings_are_one_node(client: Any, tmp_path: Path) -> None:
    prefix = f"n{uuid.uuid4().hex[:6]}"
    agents = [
        AgentSpec(node=f"{prefix}-a"),
        AgentSpec(node=f"{prefix}-b", hostname=f"{prefix.upper()}-B"),
        AgentSpec(node=f"{prefix}-c", hostname=f"{prefix}-c.cluster.local"),
    ]
    async with reclaim_world(client, tmp_path, agents=agents) as w:
        _, upper, fqdn = names(w)
        w.emu.submit(nodes=[upper])  # the nodelist says prefix-b, the agent PREFIX-B
        w.emu.submit(nodes=[fqdn])
        keep = live(w, fqdn)
        job = stale(w, fqdn)
        await w.beat(upper)
        assert w.workflows(upper) == []
        await w.beat(fqdn)
        (only,) = w.workflows()
        assert only[0].node == fqdn and only[0].job_id == job
        await until(lambda: job not in w.emu.holdings(fqdn), what="the release")
        result = await released_after_beats(w, fqdn, only[1])
        assert result.outcome is Outcome.RELEASED
        assert {c.node for c in w.cancels()} == {fqdn}
        assert keep in w.emu.holdings(fqdn)
        assert_no_live_job_was_cancelled(w)


async def test_a_report_for_an_unknown_node_is_quarantined_without_a_drain(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        url = f"http://127.0.0.1:{w.intake_port}/report"
        async with httpx.AsyncClient() as http:
            bad = await http.post(url, json={"node": "ghost", "jobs": ["x"]})
            assert bad.status_code == 400 and "jobs" in bad.json()["error"]
            answer = await http.post(
                url, json={"node": f"ghost-{uuid.uuid4().hex[:6]}", "jobs": [7]}
            )
        assert answer.status_code == 200
        (handled,) = answer.json()["handled"]
        assert handled["verdict"] == "quarantine" and handled["reason"] == "unknown-node"
        wf = handled["workflow_id"]
        await until(lambda: view_of(w, wf), what="the reclaim to start")
        view = await until(lambda: _attention(w, wf), what="the attention")
        assert "not a node the controller lists" in view.attention
        result = await w.release(wf, reason="freed by hand")
        assert result == await w.result(wf) and "freed by hand" in result.detail
        assert result.outcome is Outcome.OPERATOR_RELEASED and not result.drained
        assert w.emu.cluster.drains == [] and w.cancels() == []


async def _attention(w: ReclaimWorld, wf: str) -> ReclaimView | None:
    view = await view_of(w, wf)
    return view if view.attention else None


async def test_duplicate_heartbeats_make_one_workflow_and_one_cancel(
    client: Any, tmp_path: Path
) -> None:
    slow = FAST.model_copy(update={"retry_initial": timedelta(minutes=5)})
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=slow) as w:
        node = names(w)[0]
        w.emu.set_cancel_timeout(node, 2.0, acts=False)  # the agent keeps holding it
        live(w, node)
        job = stale(w, node)
        for _ in range(100):
            await w.emu.beat_now(node)
        await w.tap.drained()
        await w.intake.idle()
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.cancels(job), what="the cancel")
        for _ in range(20):
            await w.emu.beat_now(node)
        await w.beat(node)
        found = [
            e async for e in client.list_workflows(f'WorkflowType="JobReclaim" AND Node="{node}"')
        ]
        assert [e.id for e in found] == [wf]
        assert len(w.cancels(job)) == 1
        assert w.intake.counters.started == 1


async def test_empty_heartbeats_start_nothing_and_prove_nothing(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        w.emu.set_reports(node, False)  # no completion report: only heartbeats can tell
        w.emu.set_contention(node, "empty")
        for _ in range(3):
            assert await w.beat(node) == []
        assert w.workflows() == []
        w.emu.set_contention(node, "off")
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: job not in w.emu.holdings(node), what="the release")
        w.emu.set_contention(node, "empty")
        for _ in range(max(FAST.release_beats, FAST.idle_release_beats) + 1):
            await w.beat(node)
        # The controller runs a job on the node: its empty heartbeats are no idle evidence.
        view = await view_of(w, wf)
        assert view.tally.absent_in_a_row == 0 and view.tally.idle_in_a_row == 0
        assert (await w.handle(wf).describe()).status is WorkflowExecutionStatus.RUNNING
        w.emu.set_contention(node, "off")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED


async def test_a_partial_heartbeat_omitting_a_live_job_is_no_evidence(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node = names(w)[0]
        keep = live(w, node)
        also = live(w, node)
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        # Omits the stale job, and a live one: a busy map, not a release.
        w.emu.set_contention(node, "partial", omit=[job, keep])
        for _ in range(FAST.release_beats + 1):
            assert await w.beat(node) == [also]
        await w.start_worker()
        view = await until(lambda: _assessed(w, wf), what="the first read")
        assert view.tally.absent_in_a_row == 0


async def _assessed(w: ReclaimWorld, wf: str) -> ReclaimView | None:
    view = await view_of(w, wf)
    return view if view.last is not None else None


async def drained_view(w: ReclaimWorld, wf: str) -> ReclaimView | None:
    """The reclaim's view once it recorded its drain (the emulator sees the drain first)."""
    view = await view_of(w, wf)
    return view if view.drained else None


async def test_cancels_that_time_out_escalate_to_a_kill_then_a_drain_keeper_lifts(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        w.emu.set_cancel_timeout(node, 3.0, acts=False)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.emu.cluster.drains, within=30, what="the drain")
        signals = [c.signal for c in w.cancels(job)]
        assert signals == [0] * FAST.graceful_tries + [9] * FAST.forced_tries
        # The drain reaches the emulator before the workflow records it.
        view = await until(
            lambda: drained_view(w, wf), within=30, what="the reclaim to record its drain"
        )
        assert "not delivered" in " ".join(view.actions)
        # Someone frees it on the node; the agent's heartbeats then show it.
        w.emu.agent(node).state.release(job)
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED
        assert result.drained and result.undrained
        resumed = [u for u in w.emu.cluster.updates if u["name"] == node]
        assert resumed and resumed[-1]["state"] == "NODE_IDLE"


async def test_keeper_never_lifts_a_drain_it_did_not_make(client: Any, tmp_path: Path) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        w.emu.cluster.drain(node, "maintenance: PSU swap")
        tasks = w.emu.submit(array_size=1)
        parent = tasks[0].job_id - 1
        w.emu.hold(node, parent)  # quarantine: keeper would drain
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        await until(lambda: _drained(w, wf), what="the quarantine step")
        result = await w.release(wf)
        assert result == await w.result(wf)
        assert result.outcome is Outcome.OPERATOR_RELEASED and not result.undrained
        assert w.emu.cluster.node(node).state_reason == "maintenance: PSU swap"
        assert w.emu.cluster.updates == []


async def _drained(w: ReclaimWorld, wf: str) -> ReclaimView | None:
    view = await view_of(w, wf)
    return view if view.step.value == "drained" else None


async def test_an_agent_restarted_mid_reclaim_gets_the_next_cancel(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        w.emu.set_cancel_timeout(node, 3.0, acts=False)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.cancels(job), what="the first cancel")
        before = w.memory.node(node)
        await w.emu.restart_agent(node, keep_holdings=True)  # a new boot, registered again
        w.emu.set_cancel_timeout(node, 0.0)
        await w.tap.drained()
        await until(lambda: w.memory.node(node).registered_at > before.registered_at,
                    what="the new registration")  # fmt: skip
        await until(lambda: job not in w.emu.holdings(node), within=30, what="the release")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED
        assert_no_live_job_was_cancelled(w)


async def test_observe_mode_decides_and_shows_but_sends_nothing_until_act(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes(), mode=Mode.OBSERVE) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        view = await until(lambda: _observing(w, wf), what="the observing step")
        assert any("would send signal 0" in a for a in view.actions)
        assert w.cancels() == [] and w.emu.cluster.drains == []
        desc = await w.handle(wf).describe()
        assert desc.typed_search_attributes.get(sa.KEEPER_STEP) == "observing"
        w.settings.reclaim.mode = Mode.ACT  # the deployment switches; the run follows
        await until(lambda: w.cancels(job), within=30, what="the first cancel after the switch")


async def _observing(w: ReclaimWorld, wf: str) -> ReclaimView | None:
    view = await view_of(w, wf)
    return view if view.step.value == "observing" else None


async def test_cancelling_a_reclaim_lifts_the_drain_it_made(client: Any, tmp_path: Path) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        tasks = w.emu.submit(array_size=1)
        parent = tasks[0].job_id - 1
        w.emu.hold(node, parent)
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        await until(lambda: w.emu.cluster.drains, what="the drain")
        await w.handle(wf).cancel()
        await until(
            lambda: [u for u in w.emu.cluster.updates if u["name"] == node],
            what="the undrain",
        )
        await until(lambda: _closed(w, wf), what="the cancelled run to close")
        assert w.emu.cluster.node(node).state_reason == ""
        assert w.memory.drains(node) == []  # and keeper no longer counts itself a holder


async def _closed(w: ReclaimWorld, wf: str) -> bool:
    desc = await w.handle(wf).describe()
    return desc.status is not WorkflowExecutionStatus.RUNNING


async def test_a_long_drain_continues_as_new_and_its_history_stays_bounded(
    client: Any, tmp_path: Path
) -> None:
    brisk = FAST.model_copy(
        update={"drained_recheck": timedelta(milliseconds=50), "history_events_limit": 200}
    )
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=brisk) as w:
        node = names(w)[0]
        parent = w.emu.submit(array_size=1)[0].job_id - 1
        w.emu.hold(node, parent)  # quarantined: drained until someone frees it
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        first = (await w.handle(wf).describe()).run_id

        async def rolled_over() -> bool:
            runs = [e async for e in client.list_workflows(f'WorkflowId="{wf}"')]
            return len(runs) >= 2

        await until(rolled_over, within=60, what="a continue-as-new")
        runs = [e async for e in client.list_workflows(f'WorkflowId="{wf}"')]
        for run in runs:
            if run.run_id == first or run.status is not WorkflowExecutionStatus.RUNNING:
                history = await client.get_workflow_handle(wf, run_id=run.run_id).fetch_history()
                assert len(history.events) <= brisk.history_events_limit + 20
        assert len(w.emu.cluster.drains) == 1  # the next run knew the node was drained
        view = await view_of(w, wf)
        assert view.drained and view.step.value == "drained"
        # A run that keeps rolling over takes the release and carries it out itself (it never
        # rolls over past a release it has not answered), answering once the drain is lifted.
        result = await w.release(wf)
        assert result == await w.result(wf)
        assert result.outcome is Outcome.OPERATOR_RELEASED and result.undrained


async def _details(w: ReclaimWorld, wf: str, run_id: str | None = None) -> str:
    """The current details of a run (the latest by default), as the Temporal UI shows them."""
    handle = w.client.get_workflow_handle(wf, run_id=run_id)
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def test_a_settings_change_reaches_a_running_reclaim_at_its_next_continue_as_new(
    client: Any, tmp_path: Path
) -> None:
    # Each run reads the worker's reclaim.timing once (the reclaim.policy activity): the run
    # that read it keeps its rules, the next run takes the new ones.
    brisk = FAST.model_copy(
        update={"drained_recheck": timedelta(milliseconds=50), "history_events_limit": 200}
    )
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=brisk) as w:
        node = names(w)[0]
        parent = w.emu.submit(array_size=1)[0].job_id - 1
        w.emu.hold(node, parent)  # quarantined: drained until someone frees it
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        await until(lambda: w.emu.cluster.drains, what="the drain")
        read_before = (await w.handle(wf).describe()).run_id
        w.settings.reclaim.timing = brisk.model_copy(update={"release_beats": 5})

        async def read_after() -> bool:
            return "0/5 heartbeats listing other jobs" in await _details(w, wf)

        await until(read_after, within=60, what="a run that read the new settings")
        assert "0/2 heartbeats listing other jobs" in await _details(w, wf, read_before)
        assert len(w.emu.cluster.drains) == 1
        result = await w.release(wf)
        assert result.outcome is Outcome.OPERATOR_RELEASED and result.undrained


async def test_the_cancel_call_reads_again_and_sends_nothing_on_a_changed_verdict(
    client: Any, tmp_path: Path
) -> None:
    # However long the cancel task waited (a worker restart, a backed-up queue), it decides on
    # a read of its own, taken in the same call as the send.
    async with reclaim_world(client, tmp_path, agents=nodes(), worker=False) as w:
        node, other = names(w)[:2]
        (job,) = w.emu.submit(nodes=[node])
        w.emu.wrong_eviction(job.job_id, [other])
        await w.beat(node)
        (holding,) = [h for h, _ in w.workflows(node) if h.job_id == job.job_id]
        deps = open_reclaim_deps(w.settings.reclaim)
        try:
            acts = ReclaimActivities(deps.settings, deps.controller, deps.agents, deps.memory)
            w.emu.requeue(job.job_id, to_nodes=[node], leak=True)  # live here again
            answer = await acts.cancel(CancelCall(holding=holding, signal=0, attempt=1))
            assert not answer.sent and answer.decision is not None
            assert answer.decision.reason is Reason.ACTIVE_HERE
            w.emu.requeue(job.job_id, to_nodes=[other], leak=True)  # elsewhere: stale again
            w.settings.reclaim.mode = Mode.OBSERVE
            answer = await acts.cancel(CancelCall(holding=holding, signal=0, attempt=1))
            assert not answer.sent and "observe mode" in answer.error
        finally:
            await deps.aclose()
        assert w.cancels() == []


async def test_a_heartbeat_the_controller_refused_is_nobodys_evidence(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        (job,) = w.emu.submit()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{w.tap.port}") as channel:
            stub = slurm_pb2_grpc.SlurmControllerStub(channel)
            beat = slurm_pb2.HeartbeatRequest(
                hostname="impostor", running_jobs=[slurm_pb2.RunningJobStatus(job_id=job.job_id)]
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Heartbeat(beat, timeout=5)
        assert refused.value.code() is grpc.StatusCode.NOT_FOUND  # forwarded, answer and all
        await w.tap.drained()
        await until(lambda: w.intake.counters.refused >= 1, what="the refused beat")
        assert w.memory.holdings() == [] and w.workflows() == []


async def test_the_tap_forwards_while_its_store_cannot_open(client: Any, tmp_path: Path) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        settings = w.settings.model_copy(deep=True)
        port = free_port()
        settings.reclaim.tap_address = f"127.0.0.1:{port}"
        settings.reclaim.store_url = "postgresql://keeper@127.0.0.1:1/nowhere"
        serving = asyncio.create_task(_serve(settings))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = slurm_pb2_grpc.SlurmControllerStub(channel)
                pong = await stub.Ping(empty_pb2.Empty(), timeout=10, wait_for_ready=True)
            assert pong.hostname  # the controller answered through a tap with no memory
            assert not serving.done()  # still retrying the store, still forwarding
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving


async def _serve(settings: Any) -> None:
    async with run_tap(settings, None):
        await asyncio.Event().wait()


async def test_a_terminated_reclaims_drain_is_lifted_by_the_intake(
    client: Any, tmp_path: Path
) -> None:
    # Terminate runs no workflow code: the intake finds the drain's reclaim gone and lifts it.
    async with reclaim_world(client, tmp_path, agents=nodes()) as w:
        node = names(w)[0]
        parent = w.emu.submit(array_size=1)[0].job_id - 1
        w.emu.hold(node, parent)
        await w.beat(node)
        wf = only_workflow(w, node, parent)
        await until(lambda: w.emu.cluster.drains, what="the drain")
        await w.handle(wf).terminate(reason="test: an operator terminated it")
        w.emu.agent(node).state.release(parent)  # freed by hand meanwhile
        w.intake._last_housekeeping = None  # the next batch does the housekeeping
        await w.beat(node)
        assert w.memory.drains(node) == []
        (update,) = [u for u in w.emu.cluster.updates if u["name"] == node]
        assert update["state"] == "NODE_IDLE" and w.emu.cluster.node(node).state_reason == ""
