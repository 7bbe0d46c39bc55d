"""The worker's health endpoint (runtime/health.py): /healthz answers while the process does,
/readyz only while Temporal answers and every Worker runs."""

from __future__ import annotations

import uuid

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from keeper.runtime.health import HealthServer, Readiness
from keeper.workers.runner import workflow_runner
from keeper.workflows.watch.job_watch import JobWatch
from tests.harness import free_port
from tests.reclaim.world import until


def _worker(client: Client) -> Worker:
    return Worker(
        client,
        task_queue=f"keeper-health-{uuid.uuid4().hex[:8]}",
        workflows=[JobWatch],
        workflow_runner=workflow_runner(False, client.data_converter),
    )


async def _until_running(worker: Worker) -> None:
    # `async with worker` starts its run as a task; it is running once that task has begun.
    await until(lambda: worker.is_running, within=10, what="the worker running")


async def test_readyz_is_503_until_the_workers_run_and_again_once_they_stop(
    dev_env: WorkflowEnvironment,
) -> None:
    readiness = Readiness()
    async with (
        HealthServer("127.0.0.1:0", readiness) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as http,
    ):
        live = await http.get("/healthz")
        assert (live.status_code, live.json()) == (200, {"status": "ok"})
        starting = await http.get("/readyz")
        assert (starting.status_code, starting.json()["status"]) == (503, "starting")

        worker = _worker(dev_env.client)
        readiness.client = dev_env.client
        readiness.workers = [worker]
        not_yet = await http.get("/readyz")
        assert (not_yet.status_code, not_yet.json()["status"]) == (503, "not running")
        async with worker:
            await _until_running(worker)
            ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json() == {"status": "ok", "task_queues": [worker.task_queue]}
            readiness.stopping = True
            stopping = await http.get("/readyz")
            assert (stopping.status_code, stopping.json()["status"]) == (503, "stopping")
        assert (await http.get("/healthz")).status_code == 200


async def test_readyz_is_503_when_temporal_does_not_answer(dev_env: WorkflowEnvironment) -> None:
    # A client of a frontend nobody serves: connected lazily, its health check fails.
    nowhere = await Client.connect(f"127.0.0.1:{free_port()}", lazy=True)
    worker = _worker(dev_env.client)
    readiness = Readiness(client=nowhere, workers=[worker])
    async with (
        worker,
        HealthServer("127.0.0.1:0", readiness) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=10) as http,
    ):
        await _until_running(worker)
        answer = await http.get("/readyz")
        assert (answer.status_code, answer.json()["status"]) == (503, "temporal unreachable")
