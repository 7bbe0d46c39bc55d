"""`keeper reclaim release` is a validated Update: the reclaim takes an operator's release
while it waits for one and answers how it ended (exit 0), and refuses, saying why, one it no
longer waits for (exit 1, nothing released).

The reclaim runs on the dev server with activities of the test's own under the family's
activity names, so the test holds the run where it wants it: drained, and then lifting its
drain for as long as the test says."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keeper.domain.common.alerts import Alert
from keeper.domain.reclaim.calls import (
    AssessCall,
    Assessment,
    CloseCall,
    DrainCall,
    DrainResult,
    NodeView,
    UndrainCall,
    UndrainResult,
)
from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport
from keeper.domain.reclaim.models import EVIDENCE_SIGNAL, Decision, Holding, Reason, Verdict
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.state import JobReclaimInput, JobReclaimResult
from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.domain.reclaim.view import ReclaimView
from keeper.runtime.reclaim import search_attributes as sa
from keeper.runtime.settings import Settings
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS
from keeper.workers.runner import workflow_runner
from keeper.workflows.reclaim.job_reclaim import JobReclaim
from tests.e2e_support import dev_address
from tests.reclaim.test_reclaim_cli import Done, keeper
from tests.reclaim.world import FAST, until

pytestmark = pytest.mark.e2e
QUARANTINE = Decision(
    verdict=Verdict.QUARANTINE,
    reason=Reason.NEVER_SEEN,
    detail="the controller does not track job 7, and keeper never saw it issued",
)


@dataclass
class HeldReclaim:
    """A reclaim's activities: the node is always stale and drained at once; the lift of the
    drain waits for `lift`."""

    lift: asyncio.Event = field(default_factory=asyncio.Event)
    closed: list[Outcome] = field(default_factory=list)

    @activity.defn(name="reclaim.policy")
    async def policy(self) -> ReclaimPolicy:
        return FAST

    @activity.defn(name="reclaim.assess")
    async def assess(self, call: AssessCall) -> Assessment:
        node = NodeView(name=call.holding.node, state="drain")
        return Assessment(decision=QUARANTINE, mode=Mode.ACT, node=node, read_at=datetime.now(UTC))

    @activity.defn(name="reclaim.drain")
    async def drain(self, call: DrainCall) -> DrainResult:
        return DrainResult(node=call.holding.node, actual_state="drain", decision=QUARANTINE)

    @activity.defn(name="reclaim.undrain")
    async def undrain(self, call: UndrainCall) -> UndrainResult:
        await self.lift.wait()
        return UndrainResult(
            resumed=True, why=f"{call.holding.node} resumed: keeper's drain lifted"
        )

    @activity.defn(name="reclaim.close")
    async def close(self, call: CloseCall) -> None:
        self.closed.append(call.outcome)

    @activity.defn(name="common.alert")
    async def alert(self, alert: Alert) -> bool:
        return True


@dataclass
class Stage:
    client: Client
    acts: HeldReclaim
    config: Path
    holding: Holding
    handle: WorkflowHandle[Any, JobReclaimResult]

    def release(self, *args: str) -> Any:
        h = self.holding
        return keeper(self.config, "reclaim", "release", h.node, str(h.job_id), *args)

    async def release_in_a_process(self, *args: str) -> Done:
        """`keeper reclaim release` as a process of its own: it runs alongside in-process
        commands, which take turns."""
        h = self.holding
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "TEMPORAL_"))}
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "keeper.cli.main", "--config", str(self.config)),
            *("reclaim", "release", h.node, str(h.job_id), *args),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode is not None
        return Done(process.returncode, out.decode(), err.decode())

    async def view(self) -> ReclaimView:
        return await self.handle.query("status", result_type=ReclaimView)


@pytest.fixture
async def drained(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Stage]:
    """A running reclaim that drained its node and waits for a release."""
    client = dev_env.client
    settings = Settings()
    settings.temporal.task_queue = f"reclaim-release-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "keeper.yaml"
    config.write_text(yaml.safe_dump({
        "temporal": {"address": dev_address(dev_env), "namespace": "default",
                     "task_queue": settings.temporal.task_queue},
        "reclaim": {"store_url": f"sqlite:///{tmp_path / 'reclaim.db'}"},
    }))  # fmt: skip
    holding = Holding(
        node=f"n{uuid.uuid4().hex[:6]}-01",
        job_id=7,
        epoch=1,
        first_seen=datetime.now(UTC) - timedelta(minutes=5),
    )
    acts = HeldReclaim()
    queue = settings.temporal.family_queue("reclaim")
    async with Worker(
        client,
        task_queue=queue,
        workflows=[JobReclaim],
        activities=[acts.policy, acts.assess, acts.drain, acts.undrain, acts.close, acts.alert],
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
        graceful_shutdown_timeout=timedelta(seconds=1),
        workflow_runner=workflow_runner(False, client.data_converter),
    ):
        handle = await client.start_workflow(
            JobReclaim.run,
            JobReclaimInput(holding=holding, first=QUARANTINE),
            id=holding.workflow_id,
            task_queue=queue,
            search_attributes=sa.for_holding(holding.node, holding.job_id, "assess"),
            result_type=JobReclaimResult,
        )
        stage = Stage(client, acts, config, holding, handle)
        await until(lambda: _drained(stage), what="the drain")
        query = f'Node="{holding.node}" AND ExecutionStatus="Running"'
        await until(lambda: _listed(client, query), what="the reclaim in visibility")
        try:
            yield stage
        finally:
            acts.lift.set()


async def _drained(stage: Stage) -> bool:
    return (await stage.view()).drained


async def _listed(client: Client, query: str) -> bool:
    return bool([wf async for wf in client.list_workflows(query)])


async def test_a_release_is_answered_once_the_drain_is_lifted_and_a_second_is_refused(
    drained: Stage,
) -> None:
    first = asyncio.create_task(
        drained.release_in_a_process("--by", "alice", "--reason", "freed by hand")
    )
    view = await until(lambda: _taken(drained), what="the release taken")
    assert view.operator is not None and view.operator.by == "alice"
    assert not first.done()  # the answer waits for the end: the drain is still being lifted

    second = await drained.release("--by", "bob")
    assert second.code == 1 and second.out == "", second
    wf = drained.holding.workflow_id
    assert f"{wf} refused: already released by alice (freed by hand)" in second.err, second
    assert "nothing was released" in second.err
    error = (await drained.release("--by", "bob", "--json")).error()
    assert "already released by alice" in error["message"] and error["released"] == []
    assert error["hint"] and error["job_id"] == drained.holding.job_id

    drained.acts.lift.set()
    done = await asyncio.wait_for(first, 30)
    assert done.code == 0 and done.err == "", done
    node = drained.holding.node
    assert done.out == f"{wf}: operator-released\n  {node} resumed: keeper's drain lifted\n"
    result = await drained.handle.result()
    assert (result.outcome, result.drained, result.undrained) == (
        Outcome.OPERATOR_RELEASED, True, True,
    )  # fmt: skip
    assert drained.acts.closed == [Outcome.OPERATOR_RELEASED]


async def test_a_release_after_the_agent_let_go_is_refused_the_reclaim_no_longer_waits(
    drained: Stage,
) -> None:
    done = BeatReport(evidence=BeatEvidence.DONE, at=datetime.now(UTC))
    await drained.handle.signal(EVIDENCE_SIGNAL, done)
    await until(lambda: _ending(drained), what="the release by the agent's report")

    refused = await drained.release("--json")
    assert refused.code == 1, refused
    error = refused.error()
    assert "the reclaim no longer waits for an operator: it is ending released" in error["message"]
    assert "nothing was released" in error["message"] and error["released"] == []
    view = await drained.view()
    assert view.operator is None and view.outcome is Outcome.RELEASED

    drained.acts.lift.set()
    result = await drained.handle.result()
    assert result.outcome is Outcome.RELEASED and result.undrained


async def _taken(stage: Stage) -> ReclaimView | None:
    view = await stage.view()
    return view if view.operator is not None else None


async def _ending(stage: Stage) -> bool:
    return (await stage.view()).outcome is not None
