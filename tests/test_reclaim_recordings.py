"""Recordings of JobReclaim runs, replayed by tests/test_replay.py like every other
recording: tests/histories/2026-12-01-reclaim/ from before the `reclaim-cleanup-on-every-exit`
patch, tests/histories/2026-12-01-reclaim-cleanup/ after it, 2026-12-04-reclaim-evidence/
with the agent's completion report and an idle node's empty heartbeats as release evidence.
On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=2026-12-01-reclaim-cleanup \\
        pytest tests/test_reclaim_recordings.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from keeper.domain.reclaim.steps import Mode
from tests.harness import env_flag
from tests.reclaim_world import FAST, reclaim_world, until
from tests.recording import write_recording
from tests.test_reclaim_e2e import live, names, nodes, only_workflow, stale

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
]
IDLE = ("reclaim-idle-released-by-report", "reclaim-idle-released-weak")


async def _beat_until_closed(w: Any, node: str, wf: str) -> None:
    for _ in range(20):
        await w.beat(node)
        if (await w.handle(wf).describe()).status is not WorkflowExecutionStatus.RUNNING:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{wf} still running")


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
@pytest.mark.parametrize("label", SCENARIOS)
async def test_record_reclaim(dev_env: Any, tmp_path: Path, label: str) -> None:
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
            parent = w.emu.submit(array_size=1)[0].job_id - 1
            w.emu.hold(node, parent)
            job = parent
        elif label == "reclaim-spared-on-reread":
            (moved,) = w.emu.submit(nodes=[node])
            w.emu.wrong_eviction(moved.job_id, [other])
            job = moved.job_id
        else:
            job = stale(w, node)
        if label == "reclaim-drained-released":
            w.emu.set_cancel_timeout(node, 3.0, acts=False)
        await w.beat(node)
        wf = only_workflow(w, node, job)
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
            await w.handle(wf).signal("release", {"by": "recorder", "reason": "freed by hand"})
        elif label == "reclaim-observe-then-act":
            await asyncio.sleep(FAST.drained_recheck.total_seconds() * 2)
            w.settings.reclaim.mode = Mode.ACT
            await until(lambda: job not in w.emu.holdings(node), within=30, what="the release")
            await _beat_until_closed(w, node, wf)
        elif label == "reclaim-spared-on-reread":
            w.emu.requeue(job, to_nodes=[node], leak=True)
            await w.start_worker()
        else:
            await until(lambda: w.emu.cluster.drains, what="the drain")
            await w.handle(wf).cancel()
        with pytest.raises(Exception) if label == "reclaim-cancelled-undrained" else _nothing():
            await w.result(wf)
        history = await w.handle(wf).fetch_history()
    write_recording(f"{label}.json", history.to_json())


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False
