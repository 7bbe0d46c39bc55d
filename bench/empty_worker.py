"""A worker process for bench/worker_cpu.py's baselines: the empty workflows of
bench/runner_support.py and their activities, on one task queue, on a stock SDK worker
(the SDK's own sandboxed runner) with what `keeper worker` shares with any worker: the
pydantic converter, the SDK metrics on a Prometheus endpoint, the same cache size and
activity slots. What keeper's worker adds to the SDK's per-run cost is what it measures.

    python bench/empty_worker.py --address HOST:PORT --task-queue Q --metrics HOST:PORT

It runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta

from runner_support import (  # first: puts the root on sys.path
    EmptyCheck,
    EmptyDeletion,
    EmptyPoll,
    due,
    noop,
    not_yet,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from keeper.runtime.metrics import prometheus_runtime
from keeper.runtime.settings import Settings
from keeper.workers.main import activity_slots


async def serve(args: argparse.Namespace) -> None:
    settings = Settings()
    client = await Client.connect(
        args.address,
        namespace="default",
        data_converter=pydantic_data_converter,
        runtime=prometheus_runtime(args.metrics),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[EmptyDeletion, EmptyPoll, EmptyCheck],
        activities=[noop, not_yet, due],
        graceful_shutdown_timeout=timedelta(seconds=1),
        max_concurrent_activities=activity_slots(settings),
        max_cached_workflows=settings.worker.max_cached_workflows,
    )
    async with worker:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True, help="the Temporal frontend, HOST:PORT")
    parser.add_argument("--task-queue", required=True, help="the queue it polls")
    parser.add_argument("--metrics", required=True, help="where it serves /metrics, HOST:PORT")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
