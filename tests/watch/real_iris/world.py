"""A job-watch world on the real iris controller: marin-iris's LocalCluster (tests/watch/real_iris/
serve.py, run by the real-iris venv's python), a worker for the watch family on the Temporal
dev server, and zephyr-shaped jobs (tests/watch/real_iris/zephyr_job.py) run by iris's local
workers as local processes.

`make test` builds the real-iris venv (`make iris-venv`: .venv/iris, Python 3.12+) and passes
its python as KEEPER_IRIS_PYTHON, with KEEPER_REQUIRE_REAL_IRIS=1 so that a missing one fails
the run. A bare `pytest` uses .venv/iris when it is there, and otherwise skips the real_iris
tests, saying how to build it.

The real controller keeps no action log: what keeper asked of it is read back from it. A
LaunchJob keeper made is a root job neither there before the test nor launched by it
(`keeper_launched`); a TerminateJob leaves the job KILLED, "Terminated by user".
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from keeper.runtime.watch.iris_client import IrisController
from keeper.wire.iris import connect
from keeper.wire.iris.messages import LaunchJobRequest
from tests.harness import env_flag
from tests.watch.world import WatchWorld, fast_settings

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SERVE = HERE / "serve.py"
ZEPHYR_JOB = HERE / "zephyr_job.py"
IRIS_PYTHON_ENV = "KEEPER_IRIS_PYTHON"
REQUIRE_ENV = "KEEPER_REQUIRE_REAL_IRIS"
# Where `make iris-venv` puts it (IRIS_VENV in the Makefile).
DEFAULT_VENV = Path(".venv", "iris")
DEFAULT_PYTHON = REPO / DEFAULT_VENV / "bin" / "python"
MARIN_IRIS = "marin-iris 0.2.227.dev40316220070"
# serve.py answers within seconds (its imports; LocalCluster.start() itself takes 0.1 s).
START_WITHIN = 60.0
# The user of every call: a LocalCluster has no auth, so each caller is `anonymous`.
USER = "anonymous"
TASK_RESOURCES = {"cpuMillicores": 250, "memoryBytes": str(256 * 2**20)}


def iris_python() -> str:
    """The real-iris venv's python. Skips the test when there is none, or fails it under
    `make test` (KEEPER_REQUIRE_REAL_IRIS=1)."""
    found = os.environ.get(IRIS_PYTHON_ENV, "") or (
        str(DEFAULT_PYTHON) if DEFAULT_PYTHON.exists() else ""
    )
    problem = ""
    if not found:
        problem = (
            f"no real iris controller: {MARIN_IRIS} needs a Python 3.12+ venv of its own, "
            f"which `make test` builds (`make iris-venv`, into {DEFAULT_VENV}); "
            f"or set {IRIS_PYTHON_ENV} to a python that has marin-iris[controller]"
        )
    elif not os.access(found, os.X_OK):
        problem = f"{IRIS_PYTHON_ENV}={found} is not an executable; rebuild it: make iris-venv"
    if problem:
        if env_flag(REQUIRE_ENV):
            pytest.fail(problem)
        pytest.skip(problem)
    return found


@dataclass
class RealIris:
    """A running controller: its URL, the process serving it, and that process's log."""

    url: str
    process: subprocess.Popen[str]
    log: Path

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-limit:]
        except OSError:
            return ""


def _first_line(process: subprocess.Popen[str], within: float) -> str:
    """The first line `process` prints, or "" when it exits or says nothing in time."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            if selector.select(timeout=min(left, 0.5)):
                return process.stdout.readline().strip()
            if process.poll() is not None:
                return ""
    return ""


@contextlib.contextmanager
def real_iris(python: str, workers: int = 2) -> Iterator[RealIris]:
    """marin-iris's LocalCluster in a process of its own, until the block ends."""
    log = Path(tempfile.mkstemp(prefix="keeper-real-iris-", suffix=".log")[1])
    with log.open("w") as sink:
        process = subprocess.Popen(
            [python, str(SERVE), "--workers", str(workers)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
            cwd=HERE,
        )
    server = RealIris(url="", process=process, log=log)
    try:
        url = _first_line(process, START_WITHIN)
        if not url.startswith("http://"):
            raise RuntimeError(
                f"the real iris controller did not start (exit {process.poll()}): "
                f"{url!r}; its log:\n{server.log_tail()}"
            )
        server.url = url
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
        log.unlink(missing_ok=True)


def zephyr_argv(*flags: str) -> list[str]:
    """The root job's command: the zephyr-shaped driver with `flags`. Tasks run in serve.py's
    directory, so the program is named relative to it."""
    return ["python", ZEPHYR_JOB.name, "driver", *flags]


def job_name(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:6]}"


async def launch_zephyr(
    iris: IrisController,
    stem: str,
    *flags: str,
    env: dict[str, str] | None = None,
    max_retries_failure: int = 0,
) -> str:
    """Launches the zephyr-shaped job (its driver, as the root job) as a user would, through
    keeper's client; the job's id."""
    body: dict[str, Any] = {
        "name": f"/{USER}/{job_name(stem)}",
        "entrypoint": {"runCommand": {"argv": zephyr_argv(*flags)}},
        "resources": TASK_RESOURCES,
        "replicas": 1,
    }
    if env:
        body["environment"] = {"envVars": env}
    if max_retries_failure:
        body["maxRetriesFailure"] = max_retries_failure
        body["maxTaskFailures"] = max_retries_failure
    return await iris.launch_job(LaunchJobRequest.model_validate(body))


@dataclass
class RealIrisWorld(WatchWorld):
    """WatchWorld's worker, watch and view helpers, on the real controller (no emulator)."""

    iris: IrisController | None = None
    # The root jobs the test launched itself, and those there before it began: any other root
    # job, keeper launched.
    launched: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return self.settings.watch.controller_url

    @property
    def client_iris(self) -> IrisController:
        assert self.iris is not None
        return self.iris

    async def start_job(
        self,
        stem: str,
        *flags: str,
        env: dict[str, str] | None = None,
        max_retries_failure: int = 0,
    ) -> str:
        """launch_zephyr, remembered as the test's own launch."""
        job_id = await launch_zephyr(
            self.client_iris, stem, *flags, env=env, max_retries_failure=max_retries_failure
        )
        self.launched.add(job_id)
        return job_id

    def adopt(self, job_id: str) -> None:
        """A root job launched for the test another way (`keeper job run`)."""
        self.launched.add(job_id)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One raw Connect call, for what keeper's client does not ask (ListJobs of roots)
        or to see an answer as iris wrote it."""
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                self.url + path,
                json=body,
                headers={connect.PROTOCOL_VERSION_HEADER: connect.PROTOCOL_VERSION},
                timeout=10,
            )
        answer.raise_for_status()
        result: dict[str, Any] = answer.json()
        return result

    async def roots(self) -> dict[str, dict[str, Any]]:
        """Every root job the controller knows, by id, as iris wrote it."""
        found: dict[str, dict[str, Any]] = {}
        while True:
            query = {"scope": "JOB_QUERY_SCOPE_ROOTS", "offset": len(found), "limit": 500}
            page = await self.post(connect.LIST_JOBS, {"query": query})
            jobs = page.get("jobs", [])
            found |= {job["jobId"]: job for job in jobs}
            if not page.get("hasMore") or not jobs:
                return found

    def actions(self) -> list[dict[str, Any]]:
        raise NotImplementedError(
            "the real controller keeps no action log: keeper_launched() and the jobs' states "
            "say what keeper did"
        )

    async def keeper_launched(self) -> list[str]:
        """The root jobs keeper launched: the ones the test did not."""
        return sorted(set(await self.roots()) - self.launched)

    async def status(self, job_id: str) -> dict[str, Any]:
        """GetJobStatus as iris wrote it: `job` and the `request` it rebuilt."""
        return await self.post(connect.GET_JOB_STATUS, {"jobId": job_id})

    async def state(self, job_id: str) -> str:
        return str((await self.status(job_id))["job"].get("state", ""))

    async def children(self, job_id: str) -> list[str]:
        jobs = await self.client_iris.list_children(job_id)
        return sorted(job.job_id for job in jobs)


@contextlib.asynccontextmanager
async def real_iris_world(client: Client, url: str, **watch: Any) -> AsyncIterator[RealIrisWorld]:
    """A watch world on the real controller at `url`, its worker started (fast_settings:
    checks about every second; `watch` overrides watch settings)."""
    base = f"keeper-{uuid.uuid4().hex[:8]}"
    world = RealIrisWorld(
        emu=None,  # type: ignore[arg-type]  # no emulator: the controller is iris itself
        settings=fast_settings(url, **watch),
        client=client,
        queue=f"{base}-watch",
    )
    world.settings.temporal.task_queue = base
    async with IrisController(url, timeout=10) as iris:
        world.iris = iris
        world.launched |= set(await world.roots())
        try:
            await world.start_worker()
            yield world
        finally:
            await world.stop_worker()
