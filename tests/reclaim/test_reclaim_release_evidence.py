"""Release evidence end to end: what an idle node can say, and one cancel per step.

The most common reclaim is a node the controller believes idle whose agent still holds one
old job. Once keeper's cancel kills it, the agent holds nothing, so its heartbeats are empty
and can never list "other jobs, not this one". spurd gives two other kinds of evidence
(docs/reclaim.md#release-evidence): the completion report its monitor loop sends after it
reaps the process (ReportJobStatus, through the tap), and, weaker, empty heartbeats over a
window while the controller runs nothing on the node. Either ends the reclaim released,
never drained. And a cancel whose activity is retried after a worker died is never sent a
second time, nor after the heartbeats showed the release.
"""

from __future__ import annotations

import asyncio
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.domain.reclaim.view import render_details
from keeper.store.reclaim import WEAKLY_RELEASED
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc
from tests.e2e_support import dev_address, start_worker_process
from tests.reclaim.test_reclaim_e2e import live, names, nodes, only_workflow, stale, view_of
from tests.reclaim.test_reclaim_worker_kill import write_config
from tests.reclaim.world import FAST, ReclaimWorld, reclaim_world, until

pytestmark = pytest.mark.e2e
# A wait after each cancel far longer than any test's beats: a second cancel would be a
# retry's, never the escalation's next step.
PATIENT = FAST.model_copy(update={"retry_initial": timedelta(seconds=60),
                                  "retry_max": timedelta(seconds=60)})  # fmt: skip


@pytest.fixture
async def client(dev_env: WorkflowEnvironment) -> Any:
    return dev_env.client


async def _running(w: ReclaimWorld, wf: str) -> bool:
    return (await w.handle(wf).describe()).status is WorkflowExecutionStatus.RUNNING


async def _beat_until_closed(w: ReclaimWorld, node: str, wf: str, beats: int = 40) -> None:
    """Heartbeats of `node` at about spurd's rhythm scaled down (the idle window is a span
    of time), until the reclaim closes."""
    for _ in range(beats):
        await w.beat(node)
        if not await _running(w, wf):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{wf} still running after {beats} heartbeats")


async def test_an_idle_nodes_completion_report_releases_it_after_one_cancel(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=PATIENT) as w:
        node = names(w)[0]
        job = stale(w, node)  # the only thing the agent holds: the node is idle otherwise
        await w.beat(node)
        wf = only_workflow(w, node, job)
        # SIGTERM, the kill after the grace, then the agent's ReportJobStatus through the tap.
        await until(lambda: w.emu.agent(node).reports, what="the completion report")
        result = await w.result(wf)
        view = await view_of(w, wf)
        sent = [c.signal for c in w.cancels(job)]
        reports = [(r["job_id"], r["outcome"]) for r in w.emu.agent(node).reports]
    assert result.outcome is Outcome.RELEASED, result
    assert not result.drained and w.emu.cluster.drains == []
    assert sent == [0]
    assert "ReportJobStatus" in result.detail, result.detail
    # The controller had ended the job long ago (it answers "already terminal", OK); the
    # report is the agent's word about its own map all the same.
    assert reports == [(job, "ok")]
    assert view.cancels_sent == 1


@pytest.mark.parametrize("wait", ["patient", "short"])
async def test_an_idle_node_without_a_report_is_released_on_its_empty_heartbeats(
    client: Any, tmp_path: Path, wait: str
) -> None:
    # short: the escalation's next try comes before the idle window is over, and sends
    # nothing while the heartbeats are empty.
    policy = PATIENT if wait == "patient" else FAST.model_copy(
        update={"retry_initial": timedelta(milliseconds=100),
                "idle_release_window": timedelta(seconds=1.5)}
    )  # fmt: skip
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=policy) as w:
        node = names(w)[0]
        job = stale(w, node)
        w.emu.set_reports(node, False)  # spurd gave up reporting: only heartbeats are left
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: job not in w.emu.holdings(node), what="the kill")
        await _beat_until_closed(w, node, wf)
        result = await w.result(wf)
        closed = w.memory.holdings(node, open_only=False)
        sent = [c.signal for c in w.cancels(job)]
    assert result.outcome is Outcome.RELEASED, result
    assert not result.drained and w.emu.cluster.drains == []
    assert sent == [0]
    assert "empty heartbeats" in result.detail and "weak evidence" in result.detail
    ((holding,),) = [[h for h in closed if h.job_id == job]]
    outcome = w.memory.holding_closed(node, job, holding.sighting)[1]
    assert outcome == WEAKLY_RELEASED


async def test_a_weak_release_is_reopened_when_the_job_is_listed_again(
    client: Any, tmp_path: Path
) -> None:
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=PATIENT) as w:
        node = names(w)[0]
        job = stale(w, node)
        w.emu.set_reports(node, False)
        # The agent takes the cancel but keeps the job: a wedged process. Its heartbeats are
        # empty (a busy map) while the controller runs nothing there, so keeper releases on
        # weak evidence; the next heartbeat that lists the job proves that wrong.
        w.emu.set_cancel_timeout(node, 0.01, acts=False)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        first = await w.handle(wf).describe()
        await until(lambda: w.cancels(job), what="the first cancel")
        w.emu.set_contention(node, "empty")
        await _beat_until_closed(w, node, wf)
        released = await w.result(wf)
        assert released.outcome is Outcome.RELEASED and "weak evidence" in released.detail
        w.emu.set_contention(node, "off")
        assert await w.beat(node) == [job]
        # The same holding, fence and all (its incarnation names the workflow), reopened.
        assert only_workflow(w, node, job) == wf
        (holding,) = [h for h in w.memory.holdings(node) if h.job_id == job]
        assert holding.sighting == 1
        again = await w.handle(wf).describe()
        assert again.run_id != first.run_id
        assert again.status is WorkflowExecutionStatus.RUNNING
        await w.handle(wf).cancel()


async def test_a_cancel_retried_after_a_worker_died_is_not_sent_again(
    dev_env: Any, tmp_path: Path
) -> None:
    """The worker dies while its cancel waits for the agent's answer (the agent acted); the
    agent's heartbeats show the release while no worker runs; the activity's retry reads
    keeper's memory, sends nothing, and the reclaim ends released, the status counting the
    one cancel whose answer was lost."""
    async with reclaim_world(
        dev_env.client, tmp_path, agents=nodes(), policy=PATIENT, worker=False
    ) as w:
        node = names(w)[0]
        live(w, node)  # keeps the node's heartbeats complete and non-empty
        job = stale(w, node)
        w.emu.set_reports(node, False)
        w.emu.set_cancel_timeout(node, 30.0, acts=True)  # it acts at once, answers late
        w.settings.reclaim.cancel_timeout = timedelta(seconds=20)
        config = write_config(tmp_path / "keeper.yaml", w, dev_address(dev_env))
        log = tmp_path / "worker.log"
        worker = start_worker_process(config, log)
        try:
            await w.beat(node)
            wf = only_workflow(w, node, job)
            await until(lambda: w.cancels(job), within=60, what="the first cancel")
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            await until(lambda: job not in w.emu.holdings(node), what="the kill")
            for _ in range(FAST.release_beats + 1):
                await w.beat(node)  # through the tap: absent, absent, absent
            worker = start_worker_process(config, log)
            # The lost attempt times out (start-to-close) and its retry runs.
            result = await w.result(wf, within=120)
            view = await view_of(w, wf)
            sent = [c.signal for c in w.cancels(job)]
        finally:
            worker.terminate()
            worker.wait(20)
    assert result.outcome is Outcome.RELEASED, log.read_text()[-3000:]
    assert sent == [0], sent
    assert view.cancels_sent == 1


async def test_a_signal_to_a_reclaim_no_longer_running_is_benign_and_frees_the_holding(
    client: Any, tmp_path: Path
) -> None:
    """A terminated reclaim (or one whose history is gone) leaves its holding attached:
    every heartbeat would signal it in vain, each an "error". The intake counts it as
    closed, detaches the holding, and the next stale verdict starts a new run."""
    async with reclaim_world(client, tmp_path, agents=nodes(), mode=Mode.OBSERVE) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        first = await w.handle(wf).describe()
        await w.handle(wf).terminate("an operator's mistake")
        w.emu.agent(node).state.release(job)  # absent from now on: signalled every beat
        errors = w.intake.counters.errors
        await w.beat(node)
        assert w.intake.counters.errors == errors
        assert w.intake.counters.closed == 1
        assert w.workflows(node) == []  # detached: nothing is signalled in vain again
        await w.beat(node)
        assert w.intake.counters.closed == 1
        w.emu.hold(node, job)  # listed again: a new run of the same fence key
        await w.beat(node)
        assert only_workflow(w, node, job) == wf
        again = await w.handle(wf).describe()
        assert again.run_id != first.run_id
        assert again.status is WorkflowExecutionStatus.RUNNING
        await w.handle(wf).terminate("done")


async def test_the_status_shows_when_the_agent_last_listed_the_job(
    client: Any, tmp_path: Path
) -> None:
    """A reclaim in observe mode hears `held` once (signals are change-only), yet its status
    tells when a heartbeat last listed the job, from each fresh read of keeper's memory."""
    async with reclaim_world(client, tmp_path, agents=nodes(), mode=Mode.OBSERVE) as w:
        node = names(w)[0]
        job = stale(w, node)
        await w.beat(node)
        wf = only_workflow(w, node, job)
        first = await until(lambda: _listed(w, wf), what="the first read")
        await asyncio.sleep(0.05)  # the next heartbeat comes later, as spurd's does
        await w.beat(node)
        listed = w.memory.last_listed(node, job, 1)
        assert listed is not None and listed > first
        view = await until(lambda: _listed(w, wf, after=first), what="a later read")
        assert view.last is not None and view.last.listed_at == listed
        details = render_details(view, FAST)
        assert f"last listed the job at {listed.isoformat(timespec='seconds')}" in details
        await w.handle(wf).terminate("done")


async def _listed(w: ReclaimWorld, wf: str, after: Any = None) -> Any:
    view = await view_of(w, wf)
    at = view.last.listed_at if view.last is not None else None
    if at is None or (after is not None and at <= after):
        return None
    return view if after is not None else at


async def test_a_completion_report_counts_whatever_the_controller_made_of_the_job_but_not_from_a_refused_caller(  # noqa: E501
    client: Any, tmp_path: Path
) -> None:
    """spurctld answers NOT_FOUND to a report of a job it lost (aged out here): still the
    agent's word about its own map. A caller the controller refuses (no token) is nobody's."""
    token = "s3cr3t-spur-token"
    token_file = tmp_path / "spur-token"
    token_file.write_text(token)
    async with reclaim_world(
        client, tmp_path, agents=nodes(), policy=PATIENT, token=token, token_file=token_file
    ) as w:
        node = names(w)[0]
        job = stale(w, node)
        w.emu.set_reports(node, False)
        w.emu.set_cancel_timeout(node, 0.01, acts=False)  # it keeps the job: no evidence
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: w.cancels(job), what="the first cancel")
        w.emu.advance(2 * 3600)  # the controller ages the job out
        assert w.emu.cluster.jobs.get(job) is None
        hostname = w.emu.agent(node).state.hostname
        report = slurm_pb2.ReportJobStatusRequest(
            job_id=job, state=slurm_pb2.JOB_COMPLETED, reporting_node=hostname, signal=9
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{w.tap.port}") as channel:
            stub = slurm_pb2_grpc.SlurmControllerStub(channel)
            refused = w.intake.counters.refused
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await stub.ReportJobStatus(report, timeout=5)
            assert denied.value.code() is grpc.StatusCode.UNAUTHENTICATED
            await w.tap.drained()
            await w.intake.idle()
            assert w.intake.counters.refused == refused + 1
            assert await _running(w, wf)
            with pytest.raises(grpc.aio.AioRpcError) as lost:
                await stub.ReportJobStatus(
                    report, timeout=5, metadata=(("authorization", f"Bearer {token}"),)
                )
            assert lost.value.code() is grpc.StatusCode.NOT_FOUND
        result = await w.result(wf)
    assert result.outcome is Outcome.RELEASED and "ReportJobStatus" in result.detail
