"""Figures for keeper's TPU family scaled out: N bootstraps in flight, waiting in assign,
across W `keeper worker` processes; each worker's RSS and CPU once all are in flight.

Run from the repository root:

    python bench/scale_out.py                           # 10,000 bootstraps on 2 workers
    python bench/scale_out.py --bootstraps 200          # a quick check that it works
    python bench/scale_out.py --bootstraps 1000 --workers 1 --window 120

Three kinds of process on loopback, all started here: a Temporal dev server (in memory,
from the venv's bin directory, keeper's search attributes registered), this process (the
TPU emulator over real gRPC, and the client that starts the bootstraps) and W worker
processes, `keeper worker --family tpu` from one settings file on one task queue
(tests/worker_processes.py). The emulator never assigns capacity (Scenario
assign_after=None), so every bootstrap creates its queued resource and then polls it at its
poll interval (--poll, default 30 s, keeper's default) until the run ends.

The script starts all N bootstraps (at most --start-concurrency calls in flight) and times
the first start to the last; then waits until every supervisor reports phase `assign`
(the Phase search attribute, through the server's visibility) and times that too. Then it
measures a steady window (--window seconds): each worker's CPU (utime + stime over the
window, in cores), its RSS (VmRSS every 2 s: mean and peak in the window; VmHWM for its
whole life), and the CPU of the dev server and of this process for comparison, since all of
them share the host's cores. Goal: each worker under 1 GiB RSS and under 1 core.

Timings are printed, never asserted: the machine is shared. Raw figures:
bench/results/scale_out-<UTC time>.json (bench/run_record.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import runner_support  # noqa: F401 - first: puts the repository root on sys.path
from run_record import Run
from runner_deletion import CpuMark, requester_client
from script_runner import Interrupted, configure, progress, run_for_figures, start_dev_server
from temporalio.client import Client
from tpu_bootstrap import make_request

from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator
from emulators.tpu.testing import free_port
from keeper.domain.tpu.naming import bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.e2e_support import dev_address
from tests.worker_processes import (
    WorkerFleet,
    cpu_seconds,
    rss_mib,
    until_polling,
    write_worker_config,
)

DEFAULT_BOOTSTRAPS = 10_000
DEFAULT_WORKERS = 2
# A loopback prefix of this script's own (tests/conftest.py lists the taken ones); no VM
# ever gets an address here, since no capacity is assigned.
IP_PREFIX = "127.47"
SAMPLE_EVERY = 2.0
DEFAULT_BACKLOG = 300
ADMIT_EVERY = 0.2
LEAN_REFRESH = 1.0
GOAL_RSS_MIB = 1024.0
GOAL_CORES = 1.0


def worker_config(path: Path, address: str, base: str, emu: TpuEmulator) -> Path:
    return write_worker_config(
        path,
        address=address,
        task_queue=base,
        families=["tpu"],
        tpu={
            "endpoint": "emulator",
            "emulator_address": emu.grpc_target,
            "project": "keeper-bench",
            "zone": "us-central2-b",
            "call_timeout": "10s",
        },
        # Not opened by a TPU-only worker; beside the config rather than in the checkout.
        runners={"store_url": f"sqlite:///{path.parent / 'runners.db'}"},
    )


def lean_emulator(emu: TpuEmulator) -> None:
    """At most one evaluation of the emulated world every LEAN_REFRESH seconds.

    The emulator evaluates its whole world on every request: about 3 us per queued
    resource here, so 30 ms a request at 10,000, and at 10,000 polls every 300 s that alone
    is a core of this process. A state at most a second old is all keeper's polls need
    (a create's operation completes a second later at most); `--full-emulator` keeps the
    evaluation per request."""
    full = emu.refresh
    last = -LEAN_REFRESH

    def refresh() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= LEAN_REFRESH:
            last = now
            full()

    emu.refresh = refresh  # type: ignore[method-assign]


async def start_bootstraps(
    client: Client,
    queue: str,
    names: list[str],
    poll: timedelta,
    concurrency: int,
    backlog: int,
    created: Callable[[], int],
) -> tuple[float, list[str], int]:
    """Starts every bootstrap; returns the seconds from the first start to the last, the
    starts that failed, and the largest backlog seen.

    A start is admitted only while fewer than `backlog` started bootstraps have yet to
    create their queued resource (`created()`, read from the emulator). Started all at once,
    10,000 bootstraps queue more work on the dev server than its one SQLite writer clears
    within its own persistence deadlines; it then fails and retries its updates ("context
    canceled") and reaches assign far slower than it can when fed at its own pace."""
    gate = asyncio.Semaphore(concurrency)
    failures: list[str] = []
    done = 0
    admitted = 0
    peak = 0

    async def admit() -> None:
        nonlocal admitted, peak
        # The emulator tells no one when it creates a queued resource, so the count is read
        # again every ADMIT_EVERY; no await between the last read and the count below.
        while backlog and admitted - created() >= backlog:  # noqa: ASYNC110
            await asyncio.sleep(ADMIT_EVERY)
        admitted += 1
        peak = max(peak, admitted - created())

    async def one(name: str) -> None:
        nonlocal done
        request = make_request(8080, slice_name=name, poll_interval=poll)
        async with gate:
            await admit()
            try:
                await client.start_workflow(
                    TpuSliceBootstrap.run,
                    request,
                    id=bootstrap_workflow_id(name),
                    task_queue=queue,
                )
            except Exception as err:  # reported, not raised: the run goes on
                failures.append(f"{name}: {type(err).__name__}: {err}")
        done += 1
        if done % 1000 == 0:
            progress(f"  {done} started")

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in names))
    return time.perf_counter() - started, failures, peak


async def in_assign(client: Client, tag: str) -> int:
    query = (
        f'WorkflowType = "TpuSliceBootstrap" AND ExecutionStatus = "Running" '
        f'AND KeeperStep = "{Phase.ASSIGN.value}" AND SliceName STARTS_WITH "scale-{tag}-"'
    )
    return (await client.count_workflows(query)).count


async def until_all_in_assign(
    client: Client, tag: str, n: int, fleet: WorkerFleet, limit: float
) -> tuple[float, int]:
    """Seconds until all n are in assign, and how many are; after `limit` seconds the run
    goes on with those that are (the figures say so), so a slow host still gets a window."""
    started = time.perf_counter()
    last = -1
    while True:
        seen = await in_assign(client, tag)
        waited = time.perf_counter() - started
        if seen >= n or waited > limit:
            return waited, seen
        lost = [w.index for w in fleet.workers if not w.alive()]
        if lost:
            raise SystemExit(f"workers {lost} exited:\n{fleet.logs()}")
        if seen != last:
            progress(f"  {seen} of {n} in assign")
            last = seen
        await asyncio.sleep(2.0)


async def steady_window(fleet: WorkerFleet, seconds: float) -> dict[str, Any]:
    pids = [w.pid for w in fleet.workers]
    cpu_before = [cpu_seconds(p) for p in pids]
    others_before = CpuMark.now()
    samples: list[list[float]] = [[] for _ in pids]
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for i, pid in enumerate(pids):
            samples[i].append(rss_mib(pid))
        await asyncio.sleep(SAMPLE_EVERY)
    elapsed = time.perf_counter() - started
    others = CpuMark.now() - others_before
    workers = []
    for i, pid in enumerate(pids):
        cores = (cpu_seconds(pid) - cpu_before[i]) / elapsed
        workers.append(
            {
                "worker": i,
                "cores": round(cores, 3),
                "rss_mib_mean": round(statistics.mean(samples[i]), 1),
                "rss_mib_peak": round(max(samples[i]), 1),
                "vm_hwm_mib": round(rss_mib(pid, "VmHWM"), 1),
            }
        )
    return {
        "seconds": round(elapsed, 1),
        "workers": workers,
        "dev_server_cores": round(others.server / elapsed, 3),
        "benchmark_process_cores": round(others.own / elapsed, 3),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:6]
    env = await start_dev_server()
    emu = TpuEmulator(
        EmulatorConfig(
            ip_prefix=IP_PREFIX,
            vm_health_port=free_port(),
            default_scenario=Scenario(assign_after=None),
        )
    )
    if not args.full_emulator:
        lean_emulator(emu)
    await emu.start()
    figures: dict[str, Any] = {
        "bootstraps": args.bootstraps,
        "workers": args.workers,
        "poll_seconds": args.poll,
        "start_concurrency": args.start_concurrency,
        "backlog": args.backlog,
        "lean_emulator": not args.full_emulator,
    }
    try:
        with tempfile.TemporaryDirectory(prefix="keeper-scale-out-") as tmp:
            base = f"keeper-scale-{tag}"
            config = worker_config(Path(tmp) / "keeper.yaml", dev_address(env), base, emu)
            fleet = WorkerFleet(config, "tpu")
            queue = f"{base}-tpu"
            try:
                t0 = time.perf_counter()
                await until_polling(env.client, queue, fleet.start(args.workers), within=300)
                figures["workers_polling_seconds"] = round(time.perf_counter() - t0, 1)
                progress(f"{args.workers} worker(s) polling {queue}")
                requester = await requester_client(env)
                names = [f"scale-{tag}-{i:05d}" for i in range(args.bootstraps)]
                seconds, failures, peak = await start_bootstraps(
                    requester,
                    queue,
                    names,
                    timedelta(seconds=args.poll),
                    args.start_concurrency,
                    args.backlog,
                    lambda: len(emu.world.all_qrs),
                )
                figures["backlog_peak"] = peak
                figures["start_seconds"] = round(seconds, 1)
                figures["starts_per_second"] = round(len(names) / seconds, 1)
                figures["start_failures"] = failures[:10]
                progress(f"{len(names)} started in {seconds:.1f} s; waiting for assign")
                wait, seen = await until_all_in_assign(
                    env.client, tag, len(names) - len(failures), fleet, args.timeout
                )
                figures["in_assign_at_window"] = seen
                figures["all_in_assign_after_start_seconds"] = round(wait, 1)
                figures["in_flight_seconds"] = round(seconds + wait, 1)
                figures["queued_resources"] = len(emu.state().get("queued_resources", []))
                progress(f"{seen} in assign {wait:.1f} s after the last start; window")
                figures["steady"] = await steady_window(fleet, args.window)
                figures["still_in_assign"] = await in_assign(env.client, tag)
                figures["workers_alive"] = len(fleet.live)
            finally:
                await fleet.stop()
    finally:
        await emu.stop()
        await env.shutdown()
    figures["seconds"] = round(time.monotonic() - started, 1)
    return figures


def render(f: dict[str, Any], load_before: list[float] | None) -> tuple[str, bool]:
    steady = f["steady"]
    partial = f["in_assign_at_window"] < f["bootstraps"]
    out = [
        f"keeper TPU bootstraps, scaled out - {datetime.now(UTC):%Y-%m-%d %H:%M UTC} - "
        f"{os.cpu_count()} cores - Python {platform.python_version()} - {f['seconds']:.0f} s - "
        f"load before {load_before}",
        "",
        f"{f['bootstraps']:,} bootstraps waiting in assign (capacity never assigned, poll "
        f"{f['poll_seconds']:g} s) across {f['workers']} `keeper worker --family tpu` "
        "processes on one queue; dev server in memory; TPU emulator in this process",
        f"  workers polling after {f['workers_polling_seconds']} s",
        f"  started in {f['start_seconds']} s ({f['starts_per_second']}/s, at most "
        f"{f['start_concurrency']} in flight, at most {f['backlog'] or 'any number'} without "
        f"a queued resource, {f['backlog_peak']} at the most); "
        f"{f['in_assign_at_window']:,} in assign "
        f"{f['all_in_assign_after_start_seconds']} s after the last start "
        f"({f['in_flight_seconds']} s from the first)" + ("" if partial else " - all of them"),
        f"  still in assign after the window: {f['still_in_assign']:,}; workers alive "
        f"{f['workers_alive']} of {f['workers']}",
        "",
        f"Steady window, {steady['seconds']:.0f} s:",
        f"  {'worker':>6}  {'cores':>6}  {'RSS mean MiB':>12}  {'RSS peak MiB':>12}  "
        f"{'VmHWM MiB':>9}  goal (<{GOAL_RSS_MIB:.0f} MiB, <{GOAL_CORES:g} core)",
    ]
    # A partial window (not all in assign when --timeout ran out) measures fewer in flight.
    ok = f["still_in_assign"] == f["bootstraps"] and f["workers_alive"] == f["workers"]
    for w in steady["workers"]:
        met = w["vm_hwm_mib"] < GOAL_RSS_MIB and w["cores"] < GOAL_CORES
        out.append(
            f"  {w['worker']:>6}  {w['cores']:>6.2f}  {w['rss_mib_mean']:>12.0f}  "
            f"{w['rss_mib_peak']:>12.0f}  {w['vm_hwm_mib']:>9.0f}  {'met' if met else 'MISSED'}"
        )
    out.append(
        f"  dev server {steady['dev_server_cores']:.2f} cores, this process (emulator, "
        f"client) {steady['benchmark_process_cores']:.2f} cores"
    )
    if f["start_failures"]:
        ok = False
        out += ["Start failures:", *(f"  {x}" for x in f["start_failures"])]
    out += ["", "Check: PASS" if ok else "Check: FAIL - not every bootstrap was in assign"]
    return "\n".join(out), ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bootstraps", type=int, default=DEFAULT_BOOTSTRAPS, help="bootstraps started (10000)"
    )
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="worker processes (2)")
    parser.add_argument(
        "--window", type=float, default=120.0, help="seconds of the steady window (120)"
    )
    parser.add_argument(
        "--poll", type=float, default=30.0, help="each bootstrap's poll interval, s (30)"
    )
    parser.add_argument(
        "--start-concurrency", type=int, default=100, help="start calls in flight (100)"
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=DEFAULT_BACKLOG,
        help=f"started bootstraps without a queued resource yet, at most; 0: no limit "
        f"({DEFAULT_BACKLOG})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds to wait for all to be in assign before the window starts anyway (1800)",
    )
    parser.add_argument(
        "--full-emulator",
        action="store_true",
        help="evaluate the emulated world on every request, not at most once a second",
    )
    parser.add_argument("--verbose", action="store_true", help="keep the SDK's warnings")
    args = parser.parse_args(argv)
    for name in ("bootstraps", "workers", "start_concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.backlog < 0:
        parser.error("--backlog must be 0 (no limit) or more")
    if args.poll < 1 or args.window < SAMPLE_EVERY:
        parser.error(f"--poll must be at least 1 and --window at least {SAMPLE_EVERY:g}")
    return args


def run() -> int:
    record = Run("scale_out")
    args = parse_args()
    configure(args.verbose)
    try:
        figures, out = run_for_figures(lambda: main(args))
    except Interrupted:
        progress("interrupted")
        return 130
    text, ok = render(figures, record.load_before)
    figures["check"] = {"passed": ok}
    progress(f"raw results: {record.write(figures)}")
    print(text, file=out)
    out.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run())
