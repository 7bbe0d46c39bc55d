"""A watch runs for weeks: through continue-as-new, a worker restart and a Temporal server
restart, it keeps its verdict history and carries on judging the same job."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState, TimeoutType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from keeper.domain.watch.models import WatchView
from keeper.workflows.watch.activity_options import OBSERVE_START_TO_CLOSE
from tests.harness import RestartableServer
from tests.reclaim.world import until
from tests.watch.world import watch_world
from tests.worker_processes import WorkerFleet, until_polling, write_family_worker_config

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


async def test_a_check_cut_short_by_a_sigkilled_worker_runs_again_after_its_heartbeat_timeout(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A check reads the controller for up to its start-to-close (5 min). Its beat lets the
    server hand the attempt a dead worker held to another after the heartbeat timeout."""
    client = dev_env.client
    async with watch_world(client, worker=False, call_timeout=timedelta(seconds=60)) as w:
        config = write_family_worker_config(
            tmp_path / "worker.yaml", client.service_client.config.target_host, w.settings, "watch"
        )
        fleet = WorkerFleet(config, "watch")
        handle: WorkflowHandle[Any, Any] | None = None
        try:
            (first,) = fleet.start(1)
            await until_polling(client, w.queue, [first])
            handle = await w.watch(w.launch("cpu-bound-quiet"))
            watched = handle
            before = await w.until_view(handle, lambda v: v.checks >= 1, what="a first check")
            # The next check hangs on its first read (the read's deadline is a minute); one
            # already past that read when the fault is set would not, so it must start after.
            fault_at = datetime.now(UTC)
            w.emu.set_fault("hang", None, ["GetJobStatus"])
            hanging = await until(
                lambda: _observing(watched, since=fault_at), within=30, what="a hanging check"
            )
            # (A check that waited to be due starts at its 2nd attempt: the 1st said not due.)
            killed_attempt = hanging.attempt
            fleet.kill(first)
            killed_at = time.monotonic()
            (second,) = fleet.start(1)
            await until_polling(client, w.queue, [second])
            # The next attempt hangs too, so it is seen pending with the killed one's failure.
            pending = await until(
                lambda: _observing(watched, attempt=killed_attempt + 1),
                within=120,
                what="the check's next attempt",
            )
            w.emu.set_fault("off", None, None)
            after = await w.until_view(
                handle, lambda v: v.checks > before.checks, within=60, what="the check again"
            )
            waited = time.monotonic() - killed_at
        finally:
            if handle is not None:  # ended here: the shared server keeps no watch open
                with contextlib.suppress(RPCError):
                    await handle.terminate(reason="test over")
            await fleet.stop()
    failure = pending.last_failure
    assert failure is not None and failure.timeout_failure_info.timeout_type == (
        TimeoutType.TIMEOUT_TYPE_HEARTBEAT
    ), pending
    assert waited < OBSERVE_START_TO_CLOSE.total_seconds(), waited
    assert after.verdict in ("running", "unknown"), after


async def _observing(
    handle: WorkflowHandle[Any, Any], attempt: int = 1, since: datetime | None = None
) -> Any:
    """The pending check (watch.observe) once a worker runs attempt `attempt` or later,
    started after `since` if given."""
    desc = await handle.describe()
    for pending in desc.raw_description.pending_activities:
        started_at = pending.last_started_time.ToDatetime(tzinfo=UTC)
        if (
            pending.activity_type.name == "watch.observe"
            and pending.attempt >= attempt
            and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and (since is None or started_at > since)
        ):
            return pending
    return None
