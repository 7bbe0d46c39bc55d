"""A worker SIGKILLed in the middle of a reclaim: the tap, a process of its own, keeps
agents talking to their controller while no worker runs, and the reclaim resumes from its
history on the next worker without sending any cancel twice."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus

from keeper.domain.reclaim.steps import Outcome
from tests.e2e_support import dev_address, start_worker_process
from tests.reclaim.test_reclaim_e2e import live, names, nodes, only_workflow, stale
from tests.reclaim.world import FAST, ReclaimWorld, reclaim_world, until

pytestmark = pytest.mark.e2e
SLOW_WAIT = FAST.model_copy(update={"retry_initial": FAST.retry_max * 2})


def write_config(path: Path, w: ReclaimWorld, address: str) -> Path:
    reclaim = w.settings.reclaim.model_dump(mode="json", exclude={"tap_address", "intake_address"})
    config = {
        "temporal": {"address": address, "namespace": "default",
                     "task_queue": w.settings.temporal.task_queue},
        "worker": {"log_dir": str(path.parent), "graceful_shutdown": "1s", "versioned": False,
                   "families": ["reclaim"]},
        "reclaim": reclaim,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


async def _waiting_on_a_timer(w: ReclaimWorld, wf: str) -> bool:
    desc = await w.handle(wf).describe()
    return not desc.raw_description.pending_activities


async def test_a_killed_worker_resumes_the_reclaim_and_the_tap_forwards_meanwhile(
    dev_env: Any, tmp_path: Path
) -> None:
    async with reclaim_world(
        dev_env.client, tmp_path, agents=nodes(), policy=SLOW_WAIT, worker=False
    ) as w:
        node = names(w)[0]
        live(w, node)
        job = stale(w, node)
        w.emu.set_cancel_timeout(node, 3.0, acts=False)  # every cancel times out: it escalates
        config = write_config(tmp_path / "keeper.yaml", w, dev_address(dev_env))
        log = tmp_path / "worker.log"
        worker = start_worker_process(config, log)
        try:
            await w.beat(node)
            wf = only_workflow(w, node, job)
            await until(lambda: w.cancels(job), within=60, what="the first cancel")
            await until(lambda: _waiting_on_a_timer(w, wf), what="the wait after it")
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            # No worker: the agents' heartbeats still reach the controller through the tap.
            forwarded = w.tap.counters.forwarded
            for _ in range(3):
                await w.beat(node)
            assert w.tap.counters.forwarded >= forwarded + 3
            assert all(b["outcome"] == "ok" for b in w.emu.agent(node).beats[-3:])
            assert len(w.cancels(job)) == 1
            worker = start_worker_process(config, log)
            await until(lambda: w.emu.cluster.drains, within=90, what="the drain")
            w.emu.agent(node).state.release(job)
            for _ in range(6):
                await w.beat(node)
                desc = await w.handle(wf).describe()
                if desc.status is not WorkflowExecutionStatus.RUNNING:
                    break
                await asyncio.sleep(0.3)
            result = await w.result(wf, within=60)
            signals = [c.signal for c in w.cancels(job)]
        finally:
            worker.terminate()
            worker.wait(20)
    assert result.outcome is Outcome.RELEASED, log.read_text()[-3000:]
    assert result.drained and result.undrained
    assert signals == [0] * FAST.graceful_tries + [9] * FAST.forced_tries, signals
