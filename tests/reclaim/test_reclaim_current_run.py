"""A command reports the reclaim it started or found for the holding now, never an older one
of the same (node, job): after a stack restart the spur emulator issues job ids from 1 again,
and keeper's closed reclaim of the last stack's job 2 on that node is still in Temporal.

`keeper-dev demo reclaim` once printed "Released job 2 on gpu-node-01 ... took 0.1s" from the
closed `reclaim-gpu-node-01-2-e1.1` of the stack before, while its own reclaim ran on.
`keeper reclaim status NODE JOB` shows the running reclaim of the holding (else the newest)
and names the others. Both run here against the real tap, intake, worker and spur emulator
on the dev server, with the older reclaim made the way a stack restart leaves it: a real
JobReclaim of the same (node, job) that released it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from dev.main import run as keeper_dev
from emulators.spur.config import AgentSpec
from keeper.domain.reclaim.steps import Outcome
from tests.reclaim.test_reclaim_cli import keeper, world_config
from tests.reclaim.test_reclaim_e2e import live, only_workflow, released_after_beats, stale
from tests.reclaim.world import FAST, ReclaimWorld, reclaim_world, until

pytestmark = pytest.mark.e2e
# The demo's leaked job ends now: a short grace keeps the test short.
QUICK = FAST.model_copy(update={"end_grace": timedelta(seconds=1)})


@dataclass(frozen=True)
class OldReclaim:
    workflow_id: str
    run_id: str
    job_id: int


async def released_before(client: Any, tmp_path: Path, agents: list[AgentSpec]) -> OldReclaim:
    """The stack before the restart: job 2 on the node leaked and keeper released it."""
    async with reclaim_world(client, tmp_path, agents=agents) as w:
        node = agents[0].node
        live(w, node)
        job = stale(w, node)
        assert job == 2
        await w.beat(node)
        wf = only_workflow(w, node, job)
        await until(lambda: job not in w.emu.holdings(node), what="the agent letting go")
        result = await released_after_beats(w, node, wf)
        assert result.outcome is Outcome.RELEASED
        desc = await w.handle(wf).describe()
        assert desc.status is WorkflowExecutionStatus.COMPLETED
        return OldReclaim(wf, desc.run_id, job)


@contextlib.asynccontextmanager
async def beating(w: ReclaimWorld) -> AsyncIterator[None]:
    """The agents' heartbeat clock (spurd's runs on its own; the world's agents beat on
    demand): every agent beats through the tap every 0.2 s while the block runs."""

    async def beat() -> None:
        while True:
            with contextlib.suppress(Exception):
                await w.emu.beat_all()
            await asyncio.sleep(0.2)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def demo_config(tmp_path: Path, env: WorkflowEnvironment, w: ReclaimWorld) -> Path:
    """The world's settings, plus where the demo finds the spur emulator and the intake."""
    path = world_config(tmp_path, env, w, intake_address=f"127.0.0.1:{w.intake_port}")
    tree = yaml.safe_load(path.read_text())
    tree["emulator"] = {"spur_control_port": int(w.emu.control_url.rsplit(":", 1)[1])}
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.mark.parametrize("memory", ["kept", "fresh"])
async def test_the_demo_and_status_speak_of_the_reclaim_of_the_holding_now(
    dev_env: WorkflowEnvironment, tmp_path: Path, memory: str
) -> None:
    node = f"n{uuid.uuid4().hex[:6]}-01"
    agents = [AgentSpec(node=node)]
    old = await released_before(dev_env.client, tmp_path, agents)

    # The restart: a new spur emulator (ids from 1 again), tap, intake and worker. "kept":
    # keeper's memory survives, as .dev/reclaim.db does (the new reclaim is another epoch's,
    # another workflow id); "fresh": it is gone too (the same workflow id, a new run).
    where = tmp_path if memory == "kept" else tmp_path / "after"
    where.mkdir(exist_ok=True)
    async with reclaim_world(dev_env.client, where, agents=agents, policy=QUICK) as w:
        config = demo_config(where, dev_env, w)
        leaked_at = datetime.now(UTC)
        async with beating(w):
            done = await keeper(
                config, "demo", "reclaim", "--node", node, "--timeout", "90", "--json",
                entry=keeper_dev,
            )  # fmt: skip
        shown = done.json()
        assert shown["job_id"] == old.job_id, shown  # the same (node, job) as before
        # The demo followed a run that began after it leaked the job, not the closed one.
        assert shown["run_id"] and shown["run_id"] != old.run_id, (shown, old)
        mine = w.handle(shown["workflow_id"])
        desc = await mine.describe()
        assert desc.run_id == shown["run_id"] and desc.start_time >= leaked_at, desc
        if memory == "fresh":
            assert shown["workflow_id"] == old.workflow_id  # one id, two runs
        else:
            assert shown["workflow_id"] != old.workflow_id
        # What it printed is that run's: released by its own cancel, sent after the leak.
        assert done.code == 0, done
        assert shown["outcome"] == "released" and shown["status"] == "COMPLETED", shown
        result = await w.result(shown["workflow_id"])
        assert result.outcome is Outcome.RELEASED and shown["cancels_sent"] == result.attempts
        assert shown["cancels"] and shown["live_cancels"] == [], shown

        # status: the newest (none runs now), and the older one named.
        text = await keeper(config, "reclaim", "status", node, str(old.job_id))
        assert text.code == 0, text
        first, *rest = text.out.splitlines()
        assert first.startswith(f"{shown['workflow_id']}  COMPLETED"), text.out
        assert f"the newest of 2 reclaims of job {old.job_id} on {node}" in text.out, text.out
        assert any(line.startswith(f"  {old.workflow_id}  COMPLETED  started ") for line in rest)
        as_json = (
            await keeper(config, "reclaim", "status", node, str(old.job_id), "--json")
        ).json()
        assert (as_json["workflow_id"], as_json["run_id"]) == (shown["workflow_id"], desc.run_id)
        assert [(o["workflow_id"], o["run_id"], o["status"]) for o in as_json["others"]] == [
            (old.workflow_id, old.run_id, "COMPLETED")
        ]


@dataclass
class _Run:
    id: str
    run_id: str
    status: WorkflowExecutionStatus
    start_time: datetime


def test_the_running_reclaim_comes_first_then_the_newest() -> None:
    from keeper.cli.reclaim.runs import current_first

    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    old_running = _Run("reclaim-n-2-e1.1", "a", WorkflowExecutionStatus.RUNNING, t0)
    new_closed = _Run(
        "reclaim-n-2-e2.1", "b", WorkflowExecutionStatus.COMPLETED, t0 + timedelta(hours=1)
    )
    newer_running = _Run(
        "reclaim-n-2-e2.2", "c", WorkflowExecutionStatus.RUNNING, t0 + timedelta(minutes=5)
    )
    oldest_closed = _Run(
        "reclaim-n-2-e1.1", "d", WorkflowExecutionStatus.TERMINATED, t0 - timedelta(days=1)
    )
    runs = [oldest_closed, new_closed, old_running, newer_running]
    assert [r.run_id for r in current_first(runs)] == ["c", "a", "b", "d"]
    assert [r.run_id for r in current_first([oldest_closed, new_closed])] == ["b", "d"]
