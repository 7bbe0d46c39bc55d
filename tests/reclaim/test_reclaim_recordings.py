"""Recordings of JobReclaim runs, replayed by tests/common/test_replay.py like every other
recording:
every path a reclaim takes on the dev server against the spur emulator (released by
heartbeats, by the agent's completion report, by an idle node's empty heartbeats; drained
and released; quarantined and released by an operator's Update, while drained and while
escalating; observe mode switched to act; spared on a fresh read; cancelled with its drain
lifted; a drain's alert; a drained run rolled over). On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> \\
        pytest tests/reclaim/test_reclaim_recordings.py
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from keeper.domain.reclaim.steps import Mode, Outcome, Step
from keeper.domain.reclaim.view import ReclaimView
from keeper.runtime.alerts import ALERT_WEBHOOK_ENV
from tests.reclaim.test_reclaim_e2e import live, names, nodes, only_workflow, stale
from tests.reclaim.world import FAST, ReclaimWorld, reclaim_world, until
from tests.recording import on_demand, until_rolled_over, write_recording
from tests.webhook_receiver import webhook_receiver

SCENARIOS = [
    "reclaim-released",
    "reclaim-drained-released",
    "reclaim-quarantine-operator",
    "reclaim-observe-then-act",
    "reclaim-spared-on-reread",
    "reclaim-cancelled-undrained",
    # An idle node: released by the agent's completion report, or by its empty heartbeats.
    "reclaim-idle-released-by-report",
    "reclaim-idle-released-weak",
    # An operator's release Update, taken while the escalation still sends cancels.
    "reclaim-operator-release-accepted",
]
IDLE = ("reclaim-idle-released-by-report", "reclaim-idle-released-weak")
# Recorded by their own tests below: a drain's alert on a webhook, and a drained reclaim
# whose history rolls over (its first run and the run an operator released).
ALERTED = "reclaim-drained-alert"
ROLLED_OVER = ("reclaim-drained-rolled-over", "reclaim-drained-rolled-over.next")
LABELS: list[str] = [*SCENARIOS, ALERTED, *ROLLED_OVER]


async def _beat_until_closed(w: ReclaimWorld, node: str, wf: str) -> None:
    for _ in range(20):
        await w.beat(node)
        if (await w.handle(wf).describe()).status is not WorkflowExecutionStatus.RUNNING:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{wf} still running")


async def _at_step(w: ReclaimWorld, wf: str, step: Step) -> ReclaimView | None:
    view = await w.handle(wf).query("status", result_type=ReclaimView)
    return view if view is not None and view.step is step else None


def _quarantined(w: ReclaimWorld, node: str) -> int:
    """An id the controller consumed but never stored (an array's parent), held by `node`'s
    agent: quarantined, so drained."""
    parent = w.emu.submit(array_size=1)[0].job_id - 1
    w.emu.hold(node, parent)
    return parent


@on_demand
@pytest.mark.parametrize("label", SCENARIOS)
async def test_record_reclaim(dev_env: WorkflowEnvironment, tmp_path: Path, label: str) -> None:
    client = dev_env.client
    mode = Mode.OBSERVE if label == "reclaim-observe-then-act" else Mode.ACT
    worker = label != "reclaim-spared-on-reread"
    async with reclaim_world(client, tmp_path, agents=nodes(), mode=mode, worker=worker) as w:
        node, other = names(w)[:2]
        if label not in IDLE:
            live(w, node)
        if label == "reclaim-idle-released-weak":
            w.emu.set_reports(node, False)
        if label in ("reclaim-quarantine-operator", "reclaim-cancelled-undrained"):
            job = _quarantined(w, node)
        elif label == "reclaim-spared-on-reread":
            (moved,) = w.emu.submit(nodes=[node])
            w.emu.wrong_eviction(moved.job_id, [other])
            job = moved.job_id
        else:
            job = stale(w, node)
        if label in ("reclaim-drained-released", "reclaim-operator-release-accepted"):
            w.emu.set_cancel_timeout(node, 3.0, acts=False)  # the agent keeps holding it
        await w.beat(node)
        wf = only_workflow(w, node, job)
        expected: Outcome | None = Outcome.RELEASED
        if label in ("reclaim-released", "reclaim-idle-released-weak"):
            await until(lambda: job not in w.emu.holdings(node), what="the release")
            await _beat_until_closed(w, node, wf)
        elif label == "reclaim-idle-released-by-report":
            await until(lambda: w.emu.agent(node).reports, what="the completion report")
        elif label == "reclaim-drained-released":
            await until(lambda: w.emu.cluster.drains, within=30, what="the drain")
            w.emu.agent(node).state.release(job)
            await _beat_until_closed(w, node, wf)
        elif label == "reclaim-quarantine-operator":
            await until(lambda: w.emu.cluster.drains, what="the drain")
            answer = await w.release(wf, by="recorder", reason="freed by hand")
            assert answer.undrained, answer
            expected = Outcome.OPERATOR_RELEASED
        elif label == "reclaim-operator-release-accepted":
            await until(lambda: w.cancels(job), what="the first cancel")
            await until(lambda: _at_step(w, wf, Step.GRACEFUL), what="the escalation")
            answer = await w.release(wf, by="recorder", reason="killed it by hand")
            assert not answer.drained and w.emu.cluster.drains == [], answer
            expected = Outcome.OPERATOR_RELEASED
        elif label == "reclaim-observe-then-act":
            await until(lambda: _at_step(w, wf, Step.OBSERVING), what="the observing step")
            w.settings.reclaim.mode = Mode.ACT
            await until(lambda: job not in w.emu.holdings(node), within=30, what="the release")
            await _beat_until_closed(w, node, wf)
        elif label == "reclaim-spared-on-reread":
            w.emu.requeue(job, to_nodes=[node], leak=True)
            await w.start_worker()
            expected = Outcome.SPARED
        else:
            await until(lambda: w.emu.cluster.drains, what="the drain")
            await w.handle(wf).cancel()
            expected = None
        if expected is None:
            with pytest.raises(WorkflowFailureError):  # cancelled
                await w.result(wf)
        else:
            assert (await w.result(wf)).outcome is expected
        history = await w.handle(wf).fetch_history()
    write_recording(f"{label}.json", history.to_json())


@on_demand
async def test_record_reclaim_drained_alert(
    dev_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quarantined holding's drain alerts once on keeper's alert channel (`common.alert`);
    an operator then releases it."""
    async with webhook_receiver("T0KEEPER/B0RECLAIM/recorded") as receiver:
        monkeypatch.setenv(ALERT_WEBHOOK_ENV, receiver.url)
        async with reclaim_world(dev_env.client, tmp_path, agents=nodes()) as w:
            node = names(w)[0]
            live(w, node)
            wf = await _quarantined_reclaim(w, node)
            await until(lambda: receiver.of("Node drained by reclaim"), what="the drain alert")
            await w.release(wf, by="oncall", reason="freed by hand")
            history = await w.handle(wf).fetch_history()
        assert len(receiver.posts) == 1, receiver.posts
    write_recording(f"{ALERTED}.json", history.to_json())


@on_demand
async def test_record_reclaim_drained_rolled_over(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A drained reclaim whose history reaches its limit hands its whole state to the next
    run (which neither drains nor alerts again); an operator's release ends that one."""
    brisk = FAST.model_copy(
        update={"drained_recheck": timedelta(milliseconds=50), "history_events_limit": 200}
    )
    client = dev_env.client
    async with reclaim_world(client, tmp_path, agents=nodes(), policy=brisk) as w:
        node = names(w)[0]
        wf = await _quarantined_reclaim(w, node)
        first_run = (await w.handle(wf).describe()).run_id
        await until_rolled_over(w.handle(wf), first_run)
        # The last run's history stays small: once the release is in, nothing rolls over.
        w.settings.reclaim.timing = FAST
        await until_rolled_over(w.handle(wf), (await w.handle(wf).describe()).run_id)
        answer = await w.release(wf, by="recorder", reason="freed by hand")
        assert answer.outcome is Outcome.OPERATOR_RELEASED and answer.undrained
        assert len(w.emu.cluster.drains) == 1
        runs = {
            ROLLED_OVER[0]: client.get_workflow_handle(wf, run_id=first_run),
            ROLLED_OVER[1]: client.get_workflow_handle(wf),
        }
        histories = {label: await run.fetch_history() for label, run in runs.items()}
    for label, history in histories.items():
        write_recording(f"{label}.json", history.to_json())


async def _quarantined_reclaim(w: ReclaimWorld, node: str) -> str:
    """The reclaim of a quarantined holding on `node`, started by its heartbeat."""
    job = _quarantined(w, node)
    await w.beat(node)
    return only_workflow(w, node, job)
