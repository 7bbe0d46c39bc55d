"""Figures for the job watch at scale: watched jobs per worker, its RSS and CPU, and the
controller requests per minute, for 1,000 concurrent watches.

Run from the repository root:

    python bench/watch_scale.py                   # 1,000 watches, 3 measured minutes
    python bench/watch_scale.py --watches 100     # the smaller point
    python bench/watch_scale.py --watches 1000 --minutes 5 --json

Three processes on loopback, all started here: a Temporal dev server (in memory), this
process (the iris emulator and the client that starts the watches) and one worker
subprocess, `keeper worker --family watch`, with a settings file pointing at both. Each
watched job is created in the emulator (`IrisEmulator.create_job`, no LaunchJob) playing a
scenario that keeps running (default `stragglers`, its 8-hour straggler stretch), at
speed 1 (scenario time is wall time). The watch runs with a production-like cadence: a 30 s
smoke interval for the first `--smoke` seconds, then steady checks every 60 s
(min = max = default interval). After every watch has started and a warm-up of one smoke
window and one steady interval, the script measures `--minutes`:

- checks completed (one GetJobStatus per `watch.observe`) and requests by method, counted in
  this process at the emulator's authentication hook, which every RPC passes;
- the worker's RSS (/proc/PID/status VmRSS every 2 s: peak and end; VmHWM for its whole
  life) and CPU seconds (utime + stime), and the same CPU for the dev server and for this
  process (emulator + client), since all three share the host's cores.

The emulator is made cheaper per request for the run (`lean_emulator`): by default it
credits every job's CPU counters on every request and scans every job for an RPC fault, both
linear in the number of jobs (about 15 and 12 ms each per request at 1,000 jobs on this
machine), which would measure the emulator instead of keeper. A job's counters are still
credited before they are read (ExecInContainer settles its own job), so the readings the
watch sees are the same for the constant-rate stretch the scenario plays. ListJobs stays
linear in the number of jobs. `--full-emulator` keeps the emulator as it is.

Timings and rates are printed, never asserted: the machine is shared. Every run writes its
raw figures, the command line and the machine to bench/results/watch_scale-<UTC>.json
(bench/run_record.py). What the figures mean is in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from run_record import Run  # noqa: E402
from script_runner import (  # noqa: E402
    Interrupted,
    configure,
    progress,
    run_for_figures,
    start_dev_server,
)
from temporalio.api.enums.v1 import TaskQueueType  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402

from emulators.iris import IrisEmulator, IrisEmulatorConfig, start_emulator  # noqa: E402
from emulators.iris.service import Faults  # noqa: E402
from keeper.domain.watch.calls import JobWatchInput  # noqa: E402
from keeper.domain.watch.models import WATCH_WORKFLOW_TYPE, watch_id  # noqa: E402
from keeper.runtime.watch import search_attributes as sa  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY = 2.0
STEADY_INTERVAL = 60
SMOKE_INTERVAL = 30
START_CONCURRENCY = 32
# The controller methods keeper's reads use, in the order a check makes them.
METHODS = (
    "GetJobStatus",
    "ListJobs",
    "ListTasks",
    "GetTaskLogs",
    "ProfileTask",
    "ExecInContainer",
)


# ----------------------------------------------------------------- the emulator side


class RequestCounter:
    """Every RPC the emulator answers, by method: counted where it authenticates the caller,
    which every controller and log method does before anything else."""

    def __init__(self, emu: IrisEmulator) -> None:
        self.by_method: Counter[str] = Counter()
        authenticate = emu.authenticate

        def counted(request: Any) -> str | None:
            self.by_method[request.match_info.get("method", "?")] += 1
            return authenticate(request)

        emu.authenticate = counted  # type: ignore[method-assign]

    def snapshot(self) -> Counter[str]:
        return Counter(self.by_method)


class _ExplicitFaultsOnly(Faults):
    """The control API's faults only: no scan of every job for an rpc-timeouts stretch
    (none of the bench's scenarios has one)."""

    def current(self, emulator: IrisEmulator, method: str) -> str | None:
        wall = emulator.controller.clock.wall.now()
        live = self.mode and (self.until_wall is None or wall < self.until_wall)
        if live and (self.methods is None or method in self.methods):
            return self.mode
        return None


def lean_emulator(emu: IrisEmulator) -> None:
    """Per-request work that is linear in the number of jobs, taken out (module docstring)."""
    emu.controller.settle_all = lambda: None  # type: ignore[method-assign]
    emu.faults = _ExplicitFaultsOnly()


# ----------------------------------------------------------------- /proc readers


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def host_busy_seconds() -> float:
    """CPU seconds every core spent not idle (nor waiting on I/O) since boot, host-wide."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLK_TCK


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def children_named(parent: int, word: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and word in comm:
            found.append(int(entry.name))
    return found


def log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:]


def _warnings(log: str) -> int:
    """Lines of the SDK core (WARN, ERROR) and of Python logging (WARNING, ERROR)."""
    marks = (" WARN", " ERROR", "WARNING ")
    return sum(1 for line in log.splitlines() if any(m in line for m in marks))


def mib(kib: int) -> float:
    return round(kib / 1024, 1)


# ----------------------------------------------------------------- the worker process


def worker_settings(
    address: str, controller_url: str, base_queue: str, smoke_s: int, log_dir: str
) -> str:
    """The worker's settings file: the dev server, the emulator and the cadence."""
    lines = [
        "temporal:",
        f"  address: {address}",
        "  namespace: default",
        f"  task_queue: {base_queue}",
        "worker:",
        "  versioned: false",
        f"  log_dir: {log_dir}",
        "  graceful_shutdown: 2s",
        "watch:",
        f"  controller_url: {controller_url}",
        "  cadence:",
        f"    smoke_duration: {smoke_s}s",
        f"    smoke_interval: {SMOKE_INTERVAL}s",
        f"    failure_interval: {SMOKE_INTERVAL}s",
        f"    min_interval: {STEADY_INTERVAL}s",
        f"    max_interval: {STEADY_INTERVAL}s",
        f"    default_interval: {STEADY_INTERVAL}s",
    ]
    return "\n".join(lines) + "\n"


def start_worker(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEEPER_", "TEMPORAL_"))}
    env["PYTHONPATH"] = ROOT
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cli.main import main; main()",
            "--config",
            str(config),
            "worker",
            "--family",
            "watch",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


async def stop_worker(proc: subprocess.Popen[bytes]) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            if proc.poll() is not None:
                break
            await asyncio.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
    return proc.wait()


# ----------------------------------------------------------------- the run


async def start_watches(client: Client, queue: str, jobs: list[str]) -> float:
    gate = asyncio.Semaphore(START_CONCURRENCY)

    async def one(job: str) -> None:
        async with gate:
            await client.start_workflow(
                WATCH_WORKFLOW_TYPE,
                JobWatchInput(job_id=job, requested_by="bench"),
                id=watch_id(job),
                task_queue=queue,
                search_attributes=sa.for_job(job),
            )

    started = time.monotonic()
    await asyncio.gather(*(one(job) for job in jobs))
    return time.monotonic() - started


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    progress("starting the Temporal dev server")
    env = await start_dev_server()
    emu: IrisEmulator | None = None
    worker: subprocess.Popen[bytes] | None = None
    workdir = Path(tempfile.mkdtemp(prefix="watch-scale-"))
    try:
        servers = children_named(os.getpid(), "temporal")
        server_pid = servers[0] if servers else None
        emu = await start_emulator(IrisEmulatorConfig(speed=1.0, settle_interval=0))
        counter = RequestCounter(emu)
        if not args.full_emulator:
            lean_emulator(emu)
        tag = uuid.uuid4().hex[:6]
        jobs = [
            emu.create_job(f"scale-{tag}-{i:05d}", "alice", args.scenario, i).job_id
            for i in range(args.watches)
        ]
        base = f"bench-scale-{tag}"
        address = env.client.service_client.config.target_host
        config = workdir / "keeper.yaml"
        config.write_text(worker_settings(address, emu.url, base, args.smoke, str(workdir)))
        worker = start_worker(config, workdir / "worker.log")
        worker_pid = worker.pid
        await _until_polled(env.client, f"{base}-watch", worker, workdir / "worker.log")
        # Polling, before any watch: the worker's floor.
        idle_rss = status_kib(worker_pid, "VmRSS")
        progress(f"worker pid {worker_pid} up, RSS {mib(idle_rss)} MiB; starting watches")
        start_seconds = await start_watches(env.client, f"{base}-watch", jobs)
        progress(f"{args.watches} watches started in {start_seconds:.1f} s; warming up")
        warmup = args.warmup
        if warmup is None:
            warmup = args.smoke + SMOKE_INTERVAL + STEADY_INTERVAL
        await asyncio.sleep(warmup)

        pids = {"worker": worker_pid, "bench (emulator + client)": os.getpid()}
        if server_pid is not None:
            pids["temporal dev server"] = server_pid
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        host0 = host_busy_seconds()
        requests0 = counter.snapshot()
        t0 = time.monotonic()
        rss: list[int] = []
        window = args.minutes * 60
        progress(f"measuring {args.minutes} min")
        while time.monotonic() - t0 < window:
            if worker.poll() is not None:
                raise SystemExit(log_tail(workdir / "worker.log"))
            rss.append(status_kib(worker_pid, "VmRSS"))
            await asyncio.sleep(SAMPLE_EVERY)
        elapsed = time.monotonic() - t0
        cpu1 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        host = (host_busy_seconds() - host0) / elapsed
        ours = sum(cpu1[name] - cpu0[name] for name in pids) / elapsed
        requests = counter.snapshot() - requests0
        rss.append(status_kib(worker_pid, "VmRSS"))
        hwm = status_kib(worker_pid, "VmHWM")
        minutes = elapsed / 60
        checks = requests["GetJobStatus"]
        ended = await _finished_watches(env.client, base)
        worker_log = (workdir / "worker.log").read_text(errors="replace")
        return {
            "watches": args.watches,
            "scenario": args.scenario,
            "lean_emulator": not args.full_emulator,
            "cadence": {
                "smoke_duration_s": args.smoke,
                "smoke_interval_s": SMOKE_INTERVAL,
                "steady_interval_s": STEADY_INTERVAL,
            },
            "start_seconds": round(start_seconds, 1),
            "warmup_seconds": warmup,
            "window_seconds": round(elapsed, 1),
            "checks": checks,
            "checks_per_min": round(checks / minutes, 1),
            "checks_per_min_expected": round(args.watches * 60 / STEADY_INTERVAL, 1),
            "requests_per_min": round(sum(requests.values()) / minutes, 1),
            "requests_per_min_by_method": {
                m: round(n / minutes, 1) for m, n in sorted(requests.items(), key=lambda x: -x[1])
            },
            "requests_per_check": round(sum(requests.values()) / checks, 2) if checks else None,
            "worker_rss_mib": {
                "idle": mib(idle_rss),
                "window_peak": mib(max(rss)),
                "end": mib(rss[-1]),
                "lifetime_peak_vmhwm": mib(hwm),
                "per_watch_kib": round((rss[-1] - idle_rss) / args.watches, 1),
            },
            "cpu_cores_average": {
                name: round((cpu1[name] - cpu0[name]) / elapsed, 3) for name in pids
            },
            "host_cores": os.cpu_count(),
            "host_busy_cores_average": round(host, 3),
            "other_processes_cores_average": round(max(0.0, host - ours), 3),
            "watches_ended_early": ended,
            "worker_log_warnings": _warnings(worker_log),
            "workflow_task_timeouts": worker_log.count("Workflow task not found"),
            "slow_workflow_tasks": worker_log.count("Workflow task duration exceeded"),
            "worker_log_tail": worker_log.splitlines()[-5:],
        }
    finally:
        if worker is not None:
            await stop_worker(worker)
        if emu is not None:
            await emu.stop()
        await env.shutdown()


async def _until_polled(
    client: Client, queue: str, worker: subprocess.Popen[bytes], log: Path
) -> None:
    """Until the worker polls the watch queue for workflow tasks (or exits: its log)."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise SystemExit(log_tail(log))
        answer = await client.workflow_service.describe_task_queue(request)
        if answer.pollers:
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"the worker did not poll {queue} within 120 s: {log}")


async def _finished_watches(client: Client, base: str) -> int:
    """Watches that closed during the run (a healthy-ish job should keep every one open)."""
    query = f'WorkflowType = "{WATCH_WORKFLOW_TYPE}" AND ExecutionStatus != "Running"'
    count = await client.count_workflows(query)
    return count.count


def render(f: dict[str, Any]) -> str:
    by = f["requests_per_min_by_method"]
    cores = f["cpu_cores_average"]
    rss = f["worker_rss_mib"]
    rows = [
        f"Job watch at scale: {f['watches']} watches of '{f['scenario']}' jobs, one worker",
        f"  cadence: smoke {f['cadence']['smoke_interval_s']} s for "
        f"{f['cadence']['smoke_duration_s']} s, then steady {f['cadence']['steady_interval_s']} s",
        f"  measured window: {f['window_seconds']} s after {f['warmup_seconds']} s of warm-up"
        f" (watches started in {f['start_seconds']} s)",
        f"  checks/min: {f['checks_per_min']} (cadence asks {f['checks_per_min_expected']})",
        f"  requests/min: {f['requests_per_min']} ({f['requests_per_check']} per check)",
    ]
    rows += [f"    {m:<16} {n:>10}/min" for m, n in by.items()]
    rows += [
        f"  worker RSS MiB: idle {rss['idle']}, window peak {rss['window_peak']}, end "
        f"{rss['end']}, lifetime peak {rss['lifetime_peak_vmhwm']}"
        f" ({rss['per_watch_kib']} KiB per watch over idle)",
        "  CPU, cores on average over the window (the host has "
        f"{f['host_cores']} cores, shared by these three and anything else running):",
    ]
    rows += [f"    {name:<28} {c}" for name, c in cores.items()]
    rows.append(f"    {'everything else on the host':<28} {f['other_processes_cores_average']}")
    rows.append(
        f"  watches that ended during the run: {f['watches_ended_early']}; worker log warnings "
        f"and errors: {f['worker_log_warnings']} (workflow tasks timed out: "
        f"{f['workflow_task_timeouts']}, over 5 s: {f['slow_workflow_tasks']})"
    )
    if f["lean_emulator"]:
        rows.append("  (emulator: per-request settle and fault scan off, see the docstring)")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watches", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--scenario", default="stragglers")
    parser.add_argument("--smoke", type=int, default=60, help="smoke_duration, seconds")
    parser.add_argument(
        "--warmup", type=float, default=None, help="seconds (default: smoke + 30 s + 60 s)"
    )
    parser.add_argument("--full-emulator", action="store_true")
    parser.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    configure(args.verbose)
    run = Run("watch_scale")
    try:
        figures, out = run_for_figures(lambda: measure(args))
    except Interrupted:
        raise SystemExit(130) from None
    path = run.write(figures)
    out.write((json.dumps(figures, indent=2) if args.json else render(figures)) + "\n")
    out.write(f"raw results: {os.path.relpath(path, ROOT)}\n")
    out.flush()
    with contextlib.suppress(Exception):
        out.close()


if __name__ == "__main__":
    main()
