"""A watch runs for weeks: through continue-as-new, a worker restart and a Temporal server
restart, it keeps its verdict history and carries on judging the same job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from domain.watch.models import WatchView
from tests.harness import RestartableServer
from tests.watch_world import watch_world

pytestmark = pytest.mark.e2e


async def test_a_watch_continues_as_new_with_its_timeline_and_counts(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client, history_events_limit=200) as w:
        job = w.launch("cpu-bound-quiet")
        handle = await w.watch(job)
        before = await w.until_view(handle, lambda v: v.checks >= 3, what="three checks")
        first_entry = before.timeline[0]
        after: WatchView = await w.until_view(
            handle, lambda v: v.generation >= 2, within=180, what="two continue-as-new runs"
        )
        # The carried view: the first run's timeline entry and check count are still there.
        assert after.timeline[0] == first_entry
        assert after.checks > before.checks
        assert after.verdict == "running", after
        # Every run's history stays under the limit (plus the last check's events).
        runs = [wf async for wf in dev_env.client.list_workflows(f'WorkflowId="{handle.id}"')]
        assert len(runs) >= 3, runs
        for run in runs:
            history = await dev_env.client.get_workflow_handle(
                handle.id, run_id=run.run_id
            ).fetch_history()
            assert len(history.events) <= 260, (run.run_id, len(history.events))
        await handle.cancel()


async def test_a_watch_keeps_its_verdict_history_through_worker_and_server_restarts(
    tmp_path: Path,
) -> None:
    server = RestartableServer(tmp_path / "temporal.db")
    await server.start()
    try:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        async with watch_world(client) as w:
            job = w.launch("cpu-bound-quiet")
            handle = await w.watch(job)
            before = await w.until_view(handle, lambda v: v.checks >= 4, what="four checks")
            await w.stop_worker()
            await server.stop()
            await asyncio.sleep(1)
            await server.start()
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            w.client = client
            await w.start_worker()
            handle = client.get_workflow_handle(handle.id)
            after = await w.until_view(
                handle, lambda v: v.checks >= before.checks + 3, what="three more checks"
            )
            assert after.timeline[: len(before.timeline)] == before.timeline
            assert after.verdict == "running", after
            assert "stalled" not in [e.verdict for e in after.timeline]
            await handle.cancel()
    finally:
        if server.process is not None and server.process.returncode is None:
            await server.stop()
