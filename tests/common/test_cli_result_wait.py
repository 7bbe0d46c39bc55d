"""A command that waits for a workflow's end waits as long as the workflow runs: a long poll
for the close that the server ends with nothing is asked again, not taken as an end.

The time-skipping test server ends each such poll after 20 s with no event and no next page,
which the SDK's `result()` raises as "No completion event found"; `keeper tpu cancel` once
exited 1 with that as an internal error while a stuck compensation kept running."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keeper.workers.runner import workflow_runner

with workflow.unsafe.imports_passed_through():  # the CLI's kit, never run in a workflow
    from keeper.cli.workflow_view import result_of

pytestmark = pytest.mark.e2e


@workflow.defn(name="TestWaitsForGo")
class WaitsForGo:
    def __init__(self) -> None:
        self._go = False

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self._go)
        return "went"

    @workflow.signal
    def go(self) -> None:
        self._go = True


class CountingHandle(WorkflowHandle[Any, str]):
    """A handle by id, as the commands find a workflow, counting the waits for its result."""

    asked = 0

    async def result(self, *args: Any, **kwargs: Any) -> str:
        self.asked += 1
        return await super().result(*args, **kwargs)


async def test_a_wait_outlasting_the_servers_long_poll_gets_the_result(
    time_env: WorkflowEnvironment,
) -> None:
    # A plain client, as the CLI's: the environment's own would skip time on a result wait.
    client = await Client.connect(
        time_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
    )
    queue = f"wait-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[WaitsForGo],
        workflow_runner=workflow_runner(False, pydantic_data_converter),
    ):
        started = await client.start_workflow(
            WaitsForGo.run, id=f"waits-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        # By id, with no run: the test server ends only such polls empty.
        handle = CountingHandle(client, started.id, result_type=str)
        waiting = asyncio.create_task(result_of(handle, print))
        async with asyncio.timeout(120):  # the server's poll ends after about 20 s
            while handle.asked < 2:
                await asyncio.wait([waiting], timeout=0.1)
                if waiting.done():
                    raise AssertionError(f"the wait ended with the run open: {waiting!r}")
        await handle.signal(WaitsForGo.go)
        assert await asyncio.wait_for(waiting, 60) == "went"
