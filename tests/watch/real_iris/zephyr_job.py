"""A zephyr-shaped job for the real iris controller's local workers: keeper's own test program.

The real_iris tests launch it as a root job (`python zephyr_job.py driver ...`). Like a zephyr
pipeline, the driver runs each attempt as two child jobs of its own job, through LaunchJob at
the controller the task environment names (IRIS_CONTROLLER_ADDRESS):

    <job>/zephyr-<ctx>-<8 hex>-p0-a<N>-coord     one task: `zephyr_job.py coord`
    <job>/zephyr-<ctx>-<8 hex>-p0-a<N>-workers   --workers tasks: `zephyr_job.py worker`

The coordinator logs zephyr's progress line through Python logging in the format iris's
callable runner sets up for zephyr's actors (`I20261204 17:03:12 <logger> <message>` on
stderr, which iris classifies by its first letter), and keeps zephyr's threads: the pipeline's
`_wait_for_stage` and the `_coordinator_loop` thread, besides a pool of `actor-method_*`
threads idle in `_worker`. Workers poll in `_poll_loop` until their coordinator's job ends.

What goes wrong, on demand:

| flag                    | the coordinator (or worker)                                          |
|-------------------------|----------------------------------------------------------------------|
| --stuck-at K            | stage 0 stands at K shards done; the same line is logged every beat  |
| --zombie-at K           | at K the pipeline's threads exit; the actor-method pool idles on     |
| --fail-attempts N       | zephyr attempts a0..a<N-1> abort at 2 shards; the driver starts the  |
|                         | next attempt (a new hash), as zephyr retries a pipeline              |
| --fail-first-task       | the coordinator's first iris task attempt exits 1 (its child job has |
|                         | max_retries_failure and max_task_failures 1, so iris runs attempt 1) |
| --worker-error-every S  | each worker logs the same ValueError traceback every S seconds       |

`--show-env NAME` has the driver log a digest of its environment variable NAME (never the
value), so a test can tell what a job, or its relaunch, was given: `env NAME: sha256 <12 hex>`.

It needs nothing but the standard library: the local workers run it with the interpreter
they run on (iris rewrites a leading `python` to it), in the directory of the controller
(tests/watch/real_iris/serve.py runs there), so the driver names this file relative to it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

CONTROLLER_SERVICE = "iris.cluster.ControllerService"
TERMINAL = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_KILLED",
    "JOB_STATE_WORKER_FAILED",
    "JOB_STATE_UNSCHEDULABLE",
}
# Small tasks: two local workers hold several of these jobs at once.
TASK_RESOURCES = {"cpuMillicores": 250, "memoryBytes": str(256 * 2**20)}
PREFIX = {"DEBUG": "D", "INFO": "I", "WARNING": "W", "ERROR": "E", "CRITICAL": "C"}

log = logging.getLogger("zephyr.execution")


class _LevelPrefix(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.levelprefix = PREFIX.get(record.levelname, "?")
        return True


def setup_logging() -> None:
    """The format zephyr's actors log in under iris: a level letter, the date and time, the
    logger's name, the message; on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_LevelPrefix())
    handler.setFormatter(
        logging.Formatter("%(levelprefix)s%(asctime)s %(name)s %(message)s", "%Y%m%d %H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


# ---- the controller, over Connect JSON ---------------------------------------------------


def call(method: str, body: dict[str, Any]) -> dict[str, Any]:
    url = f"{os.environ['IRIS_CONTROLLER_ADDRESS']}/{CONTROLLER_SERVICE}/{method}"
    headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
    token = os.environ.get("IRIS_TASK_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        result: dict[str, Any] = json.loads(answer.read() or b"{}")
        return result


def job_state(job_id: str) -> str:
    try:
        return str(call("GetJobStatus", {"jobId": job_id})["job"].get("state", ""))
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return "JOB_STATE_KILLED"  # gone: as good as ended
        raise


def launch(name: str, argv: list[str], replicas: int, retries: int = 0) -> str:
    body: dict[str, Any] = {
        "name": name,
        "entrypoint": {"runCommand": {"argv": argv}},
        "resources": TASK_RESOURCES,
        "replicas": replicas,
    }
    if retries:
        # Both: a task's own retries, and the job's budget of failed attempts (max_task_failures
        # 0, the default, fails the job at its first failed attempt, retries left or not).
        body["maxRetriesFailure"] = retries
        body["maxTaskFailures"] = retries
    return str(call("LaunchJob", body)["jobId"])


def wait_ended(job_id: str, beat: float) -> str:
    while True:
        state = job_state(job_id)
        if state in TERMINAL:
            return state
        time.sleep(beat)


def env_digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def own_task() -> tuple[str, int]:
    """(this task's job id, its iris attempt) from IRIS_TASK_ID (`/user/job/0:1`)."""
    task, _, attempt = os.environ["IRIS_TASK_ID"].rpartition(":")
    return task.rsplit("/", 1)[0], int(attempt or 0)


# ---- the driver: the root job ------------------------------------------------------------


def driver(opts: argparse.Namespace, passed: list[str]) -> int:
    job, _ = own_task()
    ctx = opts.ctx
    log.info("Running zephyr pipeline %s (%d workers)", ctx, opts.workers)
    for name in opts.show_env:
        value = os.environ.get(name)
        seen = "unset" if value is None else f"sha256 {env_digest(value)}"
        log.info("env %s: %s", name, seen)
    me = os.path.basename(__file__)
    for attempt in range(opts.fail_attempts + 1):
        digest = hashlib.sha256(f"{job}:{attempt}".encode()).hexdigest()[:8]
        group = f"{job}/zephyr-{ctx}-{digest}-p0-a{attempt}"
        common = [*passed, "--attempt", str(attempt), "--coord-job", f"{group}-coord"]
        coord = launch(
            f"{group}-coord",
            ["python", me, "coord", *common],
            1,
            retries=1 if opts.fail_first_task else 0,
        )
        workers = launch(f"{group}-workers", ["python", me, "worker", *common], opts.workers)
        log.info("attempt a%d: coordinator %s, workers %s", attempt, coord, workers)
        state = wait_ended(coord, opts.beat)
        if state == "JOB_STATE_SUCCEEDED":
            wait_ended(workers, opts.beat)
            log.info("Pipeline %s complete", ctx)
            return 0
        log.warning("attempt a%d ended %s; its workers are stopped", attempt, state)
        call("TerminateJob", {"jobId": workers})
    log.error("Coordinator aborted: every attempt of %s failed", ctx)
    return 1


# ---- the coordinator ---------------------------------------------------------------------


class Coordinator:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.execution = opts.coord_job.rsplit("/", 1)[-1].removesuffix("-coord")
        names = ("Map", "Reduce", "Write")[: opts.stages]
        self.stages = [f"stage{i}-{name}" for i, name in enumerate(names)]
        self.stage = 0
        self.done = 0
        self.stop = threading.Event()
        # What the loop tells the pipeline: a stage done, "zombie" or "failed: <why>".
        self.events: queue.Queue[str] = queue.Queue()
        self.requests: queue.Queue[str] = queue.Queue()

    def progress_line(self) -> str:
        total = self.opts.shards
        in_flight = min(self.opts.workers, total - self.done)
        queued = total - self.done - in_flight
        n = self.opts.workers
        return (
            f"[{self.execution}] [{self.stages[self.stage]}] {self.done}/{total} complete, "
            f"{in_flight} in-flight, {queued} queued, {n}/{n} workers alive, 0 dead"
        )

    def _coordinator_loop(self) -> None:
        opts = self.opts
        while not self.stop.is_set():
            first = self.stage == 0
            if first and opts.zombie_at is not None and self.done >= opts.zombie_at:
                # The pipeline exits and leaves the actor behind: no loop, no stage wait.
                self.events.put("zombie")
                return
            if opts.attempt < opts.fail_attempts and self.done >= 2:
                self.events.put(f"failed: shard {self.done} failed on every worker")
                return
            if not (first and opts.stuck_at is not None and self.done >= opts.stuck_at):
                self.done = min(opts.shards, self.done + opts.workers)
            log.info("%s", self.progress_line())
            if self.done >= opts.shards:
                self.events.put(self.stages[self.stage])
                if self.stage + 1 == len(self.stages):
                    return
                self.stage, self.done = self.stage + 1, 0
                log.info("[%s] Starting stage %s (%d shards)", self.execution,
                         self.stages[self.stage], opts.shards)  # fmt: skip
            self.stop.wait(opts.beat)

    def _wait_for_stage(self) -> str:
        while True:
            try:
                return self.events.get(timeout=0.2)
            except queue.Empty:
                continue

    def _worker(self) -> None:
        """An actor-method thread of the actor's pool: idle until a request comes."""
        while True:
            try:
                self.requests.get(timeout=0.5)
            except queue.Empty:
                continue

    def run(self) -> int:
        opts = self.opts
        _, task_attempt = own_task()
        for i in range(2):
            threading.Thread(target=self._worker, name=f"actor-method_{i}", daemon=True).start()
        log.info("Coordinator initialized (task attempt %d, pid %d)", task_attempt, os.getpid())
        if opts.fail_first_task and task_attempt == 0:
            log.info("%s", self.progress_line())
            log.error("Coordinator lost its host; iris retries the task")
            return 1
        log.info("[%s] Starting stage %s (%d shards)", self.execution, self.stages[0], opts.shards)
        threading.Thread(
            target=self._coordinator_loop, name="zephyr-coordinator-loop", daemon=True
        ).start()
        for _ in self.stages:
            event = self._wait_for_stage()
            if event.startswith("failed: "):
                log.error("[%s] %s, aborting pipeline.", self.execution, event[8:])
                return 1
            if event == "zombie":
                return self._serve()
        log.info("[%s] Execution complete: %d stages", self.execution, len(self.stages))
        self.stop.set()
        return 0

    def _serve(self) -> int:
        """The zombie: the actor serves on with nothing left to run."""
        while True:
            time.sleep(1)


# ---- a worker ----------------------------------------------------------------------------


def _execute_shard(seconds: float) -> int:
    """A little real work, so the worker's process burns CPU while it holds a shard."""
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(2000))
    return n


def _poll_loop(opts: argparse.Namespace, index: int) -> None:
    last_error, shard = time.monotonic(), index
    while job_state(opts.coord_job) not in TERMINAL:
        _execute_shard(0.05)
        shard += opts.workers
        if opts.worker_error_every and time.monotonic() - last_error >= opts.worker_error_every:
            last_error = time.monotonic()
            try:
                raise ValueError(f"bad record in shard {shard}: expected 4 columns, got 3")
            except ValueError:
                logging.getLogger("zephyr.execution.worker").exception("Shard %d failed", shard)
        time.sleep(opts.beat)


def worker(opts: argparse.Namespace) -> int:
    index = int(os.environ["IRIS_TASK_ID"].rpartition(":")[0].rsplit("/", 1)[-1])
    poll = threading.Thread(
        target=_poll_loop, args=(opts, index), name=f"zephyr-poll-{index}", daemon=True
    )
    poll.start()
    poll.join()
    log.info("worker %d: the coordinator ended; shutting down", index)
    return 0


# ---- the command line --------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("role", choices=("driver", "coord", "worker"))
    p.add_argument("--ctx", default="keeper")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stages", type=int, default=2, choices=(1, 2, 3))
    p.add_argument("--shards", type=int, default=12)
    p.add_argument("--beat", type=float, default=0.5, help="seconds between progress lines")
    p.add_argument("--stuck-at", type=int, default=None)
    p.add_argument("--zombie-at", type=int, default=None)
    p.add_argument("--fail-attempts", type=int, default=0)
    p.add_argument("--fail-first-task", action="store_true")
    p.add_argument("--worker-error-every", type=float, default=0.0)
    p.add_argument("--show-env", action="append", default=[], metavar="NAME")
    # Set by the driver for its children.
    p.add_argument("--attempt", type=int, default=0)
    p.add_argument("--coord-job", default="")
    return p


def main(argv: list[str]) -> int:
    setup_logging()
    opts = parser().parse_args(argv)
    if opts.role == "driver":
        return driver(opts, argv[1:])
    if opts.role == "coord":
        return Coordinator(opts).run()
    return worker(opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
