"""Several `keeper worker` processes on one task queue base: started from one settings file,
waited for until each polls, killed one by one, and read from /proc.

Shared by tests/common/test_scale_out.py and the scale-out benchmarks (bench/scale_out.py,
bench/runner_scaling.py), so the suite and the figures run the same workers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from keeper.runtime.settings import Settings

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Variables that would point a worker elsewhere than its settings file.
_OVERRIDES = ("KEEPER_", "TEMPORAL_")


def write_worker_config(
    path: Path,
    *,
    address: str,
    task_queue: str,
    families: list[str],
    max_cached_workflows: int | None = None,
    metrics_address: str | None = None,
    **sections: Any,
) -> Path:
    """A settings file for unversioned workers (the dev server has no deployments) on one
    queue base; `sections` are further top-level sections (runners, tpu, ...)."""
    worker: dict[str, Any] = {
        "log_dir": str(path.parent),
        "graceful_shutdown": "1s",
        "versioned": False,
        "families": families,
    }
    if max_cached_workflows is not None:
        worker["max_cached_workflows"] = max_cached_workflows
    if metrics_address is not None:
        worker["metrics_address"] = metrics_address
    config: dict[str, Any] = {
        "temporal": {"address": address, "namespace": "default", "task_queue": task_queue},
        "worker": worker,
        "sweeper": {"interval": "1h"},
        **sections,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def write_family_worker_config(
    path: Path,
    address: str,
    settings: Settings,
    family: Literal["reclaim", "watch"],
    metrics_address: str | None = None,
) -> Path:
    """Settings for a worker process serving only `family` as a test world's own worker
    would: the world's section of that family (its controller, token and webhook files,
    store, pace) on the world's queue base."""
    section = getattr(settings, family).model_dump(mode="json", exclude_none=True)
    return write_worker_config(
        path,
        address=address,
        task_queue=settings.temporal.task_queue,
        families=[family],
        metrics_address=metrics_address,
        runners={"store_url": f"sqlite:///{path.parent / 'runners.db'}"},
        **{family: section},
    )


# ----------------------------------------------------------------- /proc readers


def _stat_fields(pid: int) -> list[str]:
    return _split_stat(Path(f"/proc/{pid}/stat"))[1]


def _split_stat(path: Path) -> tuple[str, list[str]]:
    """A /proc stat file's command, and its fields after it (the command may hold spaces and
    parentheses, so it ends at the last ')'; man 5 proc)."""
    head, rest = path.read_text().rsplit(")", 1)
    return head.split("(", 1)[1], rest.split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def cpu_seconds(pid: int) -> float:
    """utime + stime of one live process."""
    return _cpu(_stat_fields(pid))


def threads_cpu(pid: int) -> dict[str, float]:
    """utime + stime of a live process's threads, summed by thread name (a thread that
    ended meanwhile is not counted: the figure is a split, the process total stays apart)."""
    totals: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, fields = _split_stat(task / "stat")
        except FileNotFoundError:
            continue
        totals[name] = totals.get(name, 0.0) + _cpu(fields)
    return totals


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    """VmRSS (now) or VmHWM (peak) of one live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def parent_of(pid: int) -> int | None:
    try:
        return int(_stat_fields(pid)[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestor_among(pid: int, candidates: set[int]) -> int | None:
    """The first of `candidates` on pid's chain of parents (pid itself included)."""
    seen: int | None = pid
    for _ in range(32):  # a chain deeper than this is no child of ours
        if seen is None or seen <= 1:
            return None
        if seen in candidates:
            return seen
        seen = parent_of(seen)
    return None


# ----------------------------------------------------------------- the workers


@dataclass
class WorkerProcess:
    index: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def identity(self) -> str:
        # The SDK's default worker identity, which keeper's worker keeps.
        return f"{self.pid}@{os.uname().nodename}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class WorkerFleet:
    """`keeper worker --family <families>` processes started from one settings file."""

    config: Path
    families: str
    log_level: str = "WARNING"
    # Put before `-m keeper.cli.main`: ["-m", "cProfile", "-o", FILE] profiles a worker.
    interpreter_args: list[str] = field(default_factory=list)
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(self, count: int) -> list[WorkerProcess]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_OVERRIDES)}
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(REPO)
        started = []
        for _ in range(count):
            index = len(self.workers)
            log = self.config.parent / f"worker-{index}.log"
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, *self.interpreter_args, "-m", "keeper.cli.main",
                     "--config", str(self.config),
                     "worker", "--family", self.families, "--log-level", self.log_level],
                    cwd=REPO,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )  # fmt: skip
            worker = WorkerProcess(index, proc, log)
            self.workers.append(worker)
            started.append(worker)
        return started

    @property
    def live(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive()]

    def by_pid(self, pid: int) -> WorkerProcess:
        return next(w for w in self.workers if w.pid == pid)

    def kill(self, worker: WorkerProcess) -> None:
        """SIGKILL the worker alone: its provider processes die with it (parent death)."""
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(10)

    async def stop(self, grace: float = 15.0) -> None:
        for worker in self.live:
            worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for worker in self.workers:
            left = max(0.0, deadline - time.monotonic())
            try:
                await asyncio.to_thread(worker.proc.wait, left)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                await asyncio.to_thread(worker.proc.wait, 10)

    def logs(self) -> str:
        return "\n".join(f"--- worker {w.index} (pid {w.pid})\n{w.tail()}" for w in self.workers)


async def pollers(client: Client, queue: str, kind: TaskQueueType.ValueType) -> set[str]:
    answer = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind
        )
    )
    return {p.identity for p in answer.pollers}


async def until_polling(
    client: Client, queue: str, workers: list[WorkerProcess], within: float = 90.0
) -> None:
    """Until every worker polls the queue for workflow and activity tasks; a worker that
    exits first fails the wait with its log."""
    wanted = {w.identity for w in workers}
    deadline = time.monotonic() + within
    while True:
        for w in workers:
            if not w.alive():
                raise AssertionError(f"worker {w.index} exited {w.proc.returncode}:\n{w.tail()}")
        seen = await pollers(client, queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
        seen &= await pollers(client, queue, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
        if wanted <= seen:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"workers {sorted(wanted - seen)} not polling {queue} after {within:.0f} s"
            )
        await asyncio.sleep(0.2)
