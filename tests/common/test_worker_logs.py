"""The worker's JSON log lines: one object a line, and the run's ids on every line logged
inside a workflow or an activity; a `keeper worker` process also serves its metrics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.cloud import tpu_v2
from temporalio import activity, workflow
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.activities.tpu.cloud import build_queued_resource
from keeper.domain.runners.models import DeletionOutcome
from keeper.domain.tpu.models import DeletionReport, TeardownRequest
from keeper.domain.tpu.naming import (
    bootstrap_workflow_id,
    owner_labels,
    parent,
    teardown_workflow_id,
)
from keeper.runtime import logs
from keeper.runtime.settings import LogFormat
from keeper.runtime.tpu.client import emulator_client
from keeper.workflows.tpu.teardown import TpuSliceTeardown
from tests.e2e_support import REPO, write_config
from tests.harness import assert_no_leaks, free_port, slice_request
from tests.runners.world import RunnerWorld, runner_worker

FIELDS = {"time", "level", "logger", "message"}
KEEPER = (sys.executable, "-m", "keeper.cli.main")


def parsed(text: str) -> list[dict[str, Any]]:
    """Every line, which must be one JSON object with the four fields."""
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    for line in lines:
        assert set(line) >= FIELDS, line
        # RFC 3339 in UTC.
        assert line["time"].endswith("Z"), line
        assert datetime.fromisoformat(line["time"]).utcoffset() == timedelta(0)
    return lines


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The worker's logging set up in this process, restored afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    logs.configure("INFO", LogFormat.JSON, stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        workflow.logger.workflow_info_on_message = True
        activity.logger.activity_info_on_message = True


async def test_a_workflow_line_carries_its_workflow_and_run_id(
    dev_env: WorkflowEnvironment, world: RunnerWorld, json_logs: io.StringIO
) -> None:
    world.add_runner("r-logs")
    async with runner_worker(dev_env.client, world):
        # Each request the deletion takes is logged by its update handler, in the workflow.
        handle = await world.request(dev_env.client, "r-logs", reason="logs")
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome is DeletionOutcome.DELETED
    requested = [
        line
        for line in parsed(json_logs.getvalue())
        if line["message"].startswith("deletion requested: operator: logs")
    ]
    assert len(requested) == 1, json_logs.getvalue()
    line = requested[0]
    assert line["level"] == "INFO"
    assert line["workflow_id"] == handle.id
    assert line["run_id"] == handle.result_run_id
    assert line["workflow_type"] == "RunnerDeletion"
    assert line["task_queue"] == world.task_queue
    assert line["attempt"] == 1
    # The fields are in the line, not repeated inside the message.
    assert handle.id not in line["message"]


@contextlib.contextmanager
def worker_process(config: Path, stderr: Path, metrics_address: str) -> Iterator[None]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KEEPER_METRICS_ADDRESS": metrics_address}
    for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "KEEPER_TASK_QUEUE"):
        env.pop(var, None)
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [*KEEPER, "--config", str(config), "worker", "--family", "tpu", "--log-format", "json"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, stderr.read_text()[-2000:]


async def _serving(url: str, within: float = 60) -> str:
    """The worker's /metrics once its pollers are up."""
    deadline = asyncio.get_running_loop().time() + within
    async with httpx.AsyncClient(timeout=2) as http:
        while True:
            with contextlib.suppress(httpx.TransportError):
                text = (await http.get(url)).text
                if "temporal_num_pollers" in text:
                    return text
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"no pollers on {url} after {within}s")
            await asyncio.sleep(0.2)


@pytest.mark.e2e
async def test_keeper_worker_writes_json_lines_and_serves_metrics(
    dev_env: WorkflowEnvironment, emu: TpuEmulator, tmp_path: Path
) -> None:
    emu.set_default_scenario(Scenario(assign_after=None, delete_duration=0.3))
    stem = f"keeper-{uuid.uuid4().hex[:8]}"
    queue = f"{stem}-tpu"
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, stem)
    stderr = tmp_path / "worker.stderr"
    address = f"127.0.0.1:{free_port()}"
    request = slice_request()
    # A slice a bootstrap handed over, waiting in the queue: what the teardown deletes.
    tpu = emulator_client(emu.grpc_target)
    await tpu.create_queued_resource(
        request=tpu_v2.CreateQueuedResourceRequest(
            parent=parent(request.project, request.zone),
            queued_resource_id=request.slice_name,
            queued_resource=build_queued_resource(
                request,
                owner_labels(bootstrap_workflow_id(request.slice_name), "handed-over"),
                timedelta(hours=1),
            ),
        )
    )
    await tpu.transport.close()
    with worker_process(config, stderr, address):
        before = await _serving(f"http://{address}/metrics")
        teardown = await dev_env.client.start_workflow(
            TpuSliceTeardown.run,
            TeardownRequest(
                slice_name=request.slice_name, project=request.project, zone=request.zone
            ),
            id=teardown_workflow_id(request.slice_name),
            task_queue=queue,
            result_type=DeletionReport,
        )
        await asyncio.wait_for(teardown.result(), 60)
    assert_no_leaks(emu)
    # `keeper worker` serves the SDK's metrics on its queue, counters with their _total.
    polling = rf'^temporal_num_pollers\{{[^}}]*task_queue="{queue}"[^}}]*\}} [1-9]'
    assert re.search(polling, before, re.M), before
    assert "# TYPE temporal_request_total counter" in before
    lines = parsed(stderr.read_text())
    # The activity's own logger, inside the teardown's delete.
    deleting = [line for line in lines if line["message"].startswith("deleting ")]
    assert deleting, stderr.read_text()[-3000:]
    for line in deleting:
        assert line["workflow_id"] == teardown.id
        assert line["run_id"] == teardown.result_run_id
        assert line["workflow_type"] == "TpuSliceTeardown"
        assert line["activity_type"] == "tpu.delete_slice"
        assert line["task_queue"] == queue
        assert line["attempt"] >= 1
    # The worker's own lines belong to no run.
    serving = [line for line in lines if line["message"].startswith("serving family tpu")]
    assert serving and "workflow_id" not in serving[0]
    assert datetime.fromisoformat(serving[0]["time"]) <= datetime.now(UTC)


async def test_any_logger_inside_an_activity_carries_the_activity_and_its_run(
    json_logs: io.StringIO,
) -> None:
    # A client library's logger knows nothing of Temporal; the line still names the run.
    def call_a_client() -> None:
        logging.getLogger("keeper.client").warning("retrying after a 503")

    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, workflow_id="runner-delete-r1", workflow_run_id="run-1", attempt=3
    )
    await env.run(activity.defn(name="runners.example")(_async(call_a_client)))
    [line] = [x for x in parsed(json_logs.getvalue()) if x["logger"] == "keeper.client"]
    assert line["message"] == "retrying after a 503"
    assert line["level"] == "WARNING"
    assert (line["workflow_id"], line["run_id"]) == ("runner-delete-r1", "run-1")
    assert line["attempt"] == 3
    assert line["activity_type"] == env.info.activity_type


def _async(fn: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        fn()

    return run
