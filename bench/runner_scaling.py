"""Figures for keeper's runner deletion scaled out: deletions per minute with 1, 2 and 4
`keeper worker` processes on one PostgreSQL store, against the dev server's ceiling.

Run from the repository root:

    python bench/runner_scaling.py                     # 2,000 runners per phase, ~25 min
    python bench/runner_scaling.py --runners 200       # a quick check that it works
    python bench/runner_scaling.py --workers 1,2 --store-url postgresql://user@host/db

One phase per worker count, each on a Temporal dev server of its own (from the venv's bin
directory, the search attributes registered, never downloaded) and a fresh PostgreSQL
database (a throwaway server from the machine's binaries, tests/postgres_server.py, unless
--store-url names one). Each phase adds N runners (a record in the store, a registration in
the GitHub emulator, an instance in the emulated GARM provider, mode "normal"), starts W
worker processes, `keeper worker --family runners` from one settings file (one task queue,
one store URL; tests/worker_processes.py, as tests/common/test_scale_out.py), waits until each
polls, runs one deletion alone, then submits all N at once through keeper's own request
path (bench/runner_deletion.py's batch) and times the first submit to the last close. At
the end every record must be `deleted` and no instance or registration may remain.

The ceiling, in the same run: bench/runner_deletion.py's workload of the same N workflows
making as many no-op activities as the sampled deletion, on one worker in this process.
It measures what the dev server completes, not what W workers could.

This process also runs the GitHub emulator and the requesters; the dev server, the workers,
their provider processes and this process share the host's cores, so a rate that stops
growing with W is read against the CPU figures printed beside it. Timings are printed,
never asserted. Raw figures: bench/results/runner_scaling-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner_deletion import (  # first: bench/runner_support.py puts the root on sys.path
    TOKEN,
    Batch,
    CeilingPhase,
    WorkerKnobs,
    World,
    batch_figures,
    ceiling_phase,
    history_shape,
    requester_client,
    run_batch,
    runner_world,
)
from script_runner import progress, run_noting_load, start_dev_server
from temporalio.client import WorkflowHandle

from keeper.domain.runners.models import DeletionOutcome, DeletionRequest, DeletionResult, Requester
from keeper.runtime.runners.requests import request_deletion
from keeper.runtime.settings import Settings
from keeper.workers.main import activity_slots
from tests.e2e_support import dev_address
from tests.postgres_server import postgres_server
from tests.worker_processes import (
    WorkerFleet,
    cpu_seconds,
    rss_mib,
    until_polling,
    write_worker_config,
)

DEFAULT_RUNNERS = 2000
DEFAULT_WORKERS = (1, 2, 4)


@dataclass
class ScalingPhase:
    workers: int
    batch: Batch
    events: int
    activities: int
    worker_cpu_seconds: list[float]  # each worker's own, during the batch
    provider_cpu_seconds: float  # the workers' reaped provider processes, during the batch
    worker_rss_mib: list[float]  # each worker's VmHWM at the end
    leftovers: list[str]
    start_seconds: float  # worker processes started until each polled


def children_cpu(pid: int) -> float:
    """cutime + cstime: the reaped children (provider processes) of one live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def runner_section(world: World, tmp: Path) -> dict[str, Any]:
    token_file = tmp / "github-token"
    token_file.write_text(TOKEN + "\n")
    return {
        "store_url": world.store.engine.url.render_as_string(hide_password=False),
        "github": {"api_url": world.github.url, "token_file": str(token_file)},
        "provider": {"config_file": str(world.provider_config)},
        "reconcile_interval": "1h",
    }


def runner_worker_config(
    world: World, tmp: Path, address: str, base: str, metrics_address: str | None = None
) -> Path:
    """The settings file of `keeper worker --family runners` processes on `world`."""
    return write_worker_config(
        tmp / "keeper.yaml",
        address=address,
        task_queue=base,
        families=["runners"],
        metrics_address=metrics_address,
        runners=runner_section(world, tmp),
    )


async def scaling_phase(
    args: argparse.Namespace, workers: int, store_url: str, tmp: Path
) -> ScalingPhase:
    env = await start_dev_server()
    tag = uuid.uuid4().hex[:6]
    try:
        requester = await requester_client(env)
        async with runner_world(tmp, store_url) as world:
            names = [f"scale-{tag}-{i:05d}" for i in range(args.runners)]
            sample = f"scale-{tag}-sample"
            progress(f"{workers} worker(s): adding {args.runners + 1} runners")
            await asyncio.to_thread(world.add_runners, [sample, *names])
            base = f"keeper-scale-{tag}"
            config = runner_worker_config(world, tmp, dev_address(env), base)
            fleet = WorkerFleet(config, "runners")
            queue = f"{base}-runners"
            request = DeletionRequest(
                requested_by=Requester.SCALE_DOWN, reason="keeper bench scale-down"
            )

            async def start(name: str) -> WorkflowHandle[Any, DeletionResult]:
                requested = await request_deletion(requester, name, request, task_queue=queue)
                return requested.handle

            def check(name: str, result: DeletionResult) -> str | None:
                ok = result.outcome is DeletionOutcome.DELETED
                return None if ok else f"outcome {result.outcome}"

            try:
                started = time.perf_counter()
                await until_polling(env.client, queue, fleet.start(workers), within=300)
                start_seconds = time.perf_counter() - started
                progress(f"{workers} worker(s) polling after {start_seconds:.1f} s")
                handle = await start(sample)
                await asyncio.wait_for(handle.result(), 120)
                shape = await history_shape(handle)
                pids = [w.pid for w in fleet.workers]
                cpu_before = [cpu_seconds(p) for p in pids]
                children_before = sum(children_cpu(p) for p in pids)
                progress(f"{workers} worker(s): {len(names)} deletions")
                batch, _ = await run_batch(
                    names, start, check, args.submit_concurrency, args.timeout
                )
                worker_cpu = [cpu_seconds(p) - b for p, b in zip(pids, cpu_before, strict=True)]
                provider_cpu = sum(children_cpu(p) for p in pids) - children_before
                rss = [round(rss_mib(p, "VmHWM"), 1) for p in pids]
                lost = [w.index for w in fleet.workers if not w.alive()]
                if lost:
                    batch.failures.append(f"workers {lost} exited:\n{fleet.logs()}")
            finally:
                await fleet.stop()
            return ScalingPhase(
                workers=workers,
                batch=batch,
                events=shape.events,
                activities=shape.activities,
                worker_cpu_seconds=[round(c, 1) for c in worker_cpu],
                provider_cpu_seconds=round(provider_cpu, 1),
                worker_rss_mib=rss,
                leftovers=world.leftovers(names),
                start_seconds=round(start_seconds, 1),
            )
    finally:
        await env.shutdown()


@contextlib.contextmanager
def store_urls(given: str | None) -> Iterator[Any]:
    """A fresh PostgreSQL database per phase, or the one --store-url names (runner names
    carry a tag of their phase, so phases never meet in it)."""
    if given:
        yield lambda: given
        return
    with postgres_server() as server:
        if server is None:
            raise SystemExit(
                "PostgreSQL server binaries not found (Debian: apt-get install postgresql); "
                "or pass --store-url"
            )
        yield server.create_database


def render(
    args: argparse.Namespace,
    phases: list[ScalingPhase],
    ceiling: CeilingPhase | None,
    total: float,
) -> tuple[str, bool]:
    failures = [f"{p.workers} worker(s): {f}" for p in phases for f in p.batch.failures]
    leftovers = [f"{p.workers} worker(s): {x}" for p in phases for x in p.leftovers]
    if ceiling is not None:
        failures += [f"ceiling: {f}" for f in ceiling.batch.failures]
    ok = not failures and not leftovers and all(p.batch.n == args.runners for p in phases)
    out = [
        f"keeper runner deletion, scaled out - {datetime.now(UTC):%Y-%m-%d %H:%M UTC} - "
        f"{os.cpu_count()} cores - Python {platform.python_version()} - "
        f"{args.runners} runners per phase - {total:.0f} s - load before {args.load_before}",
        "",
        "Setup: Temporal dev server (in-memory, a fresh one per phase); PostgreSQL store (a "
        "fresh database per phase); `keeper worker --family runners` processes on one queue; "
        f"all {args.runners} requests at once, at most {args.submit_concurrency} client calls "
        "in flight; GitHub emulator in this process; emulated provider mode normal",
        "",
        f"  {'workers':>7}  {'done':>6}  {'seconds':>8}  {'per min':>8}  {'p50 s':>7}  "
        f"{'p99 s':>7}  {'worker CPU s (each)':<24}  {'providers s':>11}  {'server s':>8}  "
        f"{'peak RSS MiB (each)'}",
    ]
    for p in phases:
        b = p.batch
        out.append(
            f"  {p.workers:>7}  {b.n:>6}  {b.seconds:>8.1f}  {b.per_minute:>8,.0f}  "
            f"{b.percentile(0.5):>7.1f}  {b.percentile(0.99):>7.1f}  "
            f"{' '.join(f'{c:.0f}' for c in p.worker_cpu_seconds):<24}  "
            f"{p.provider_cpu_seconds:>11.0f}  {b.cpu.server:>8.0f}  "
            f"{' '.join(f'{r:.0f}' for r in p.worker_rss_mib)}"
        )
    if ceiling is not None:
        c = ceiling.batch
        out.append(
            f"  {ceiling.label}: {c.n} in {c.seconds:.1f} s, {c.per_minute:,.0f}/min "
            f"(dev server CPU {c.cpu.server:.0f} s)"
        )
        for p in phases:
            out.append(
                f"  {p.workers} worker(s) / ceiling: {p.batch.per_minute / c.per_minute:.2f}"
            )
    if phases:
        out.append(
            f"History per deletion (sampled): {phases[0].events} events, "
            f"{phases[0].activities} activities"
        )
    out.append("")
    if ok:
        out.append("Check: PASS - every record deleted, no provider instance or registration left")
    else:
        out.append("Check: FAIL")
        out += [f"  {x}" for x in [*leftovers, *failures][:10]]
    return "\n".join(out), ok


def figures_of(
    args: argparse.Namespace,
    phases: list[ScalingPhase],
    ceiling: CeilingPhase | None,
    total: float,
    ok: bool,
) -> dict[str, Any]:
    return {
        "runners": args.runners,
        "workers": args.workers,
        "seconds": round(total, 1),
        "submit_concurrency": args.submit_concurrency,
        "store": "postgresql",
        "phases": [
            {
                "workers": p.workers,
                "start_seconds": p.start_seconds,
                "history_events": p.events,
                "history_activities": p.activities,
                "worker_cpu_seconds": p.worker_cpu_seconds,
                "provider_cpu_seconds": p.provider_cpu_seconds,
                "worker_peak_rss_mib": p.worker_rss_mib,
                "leftovers": p.leftovers,
                **batch_figures(f"{p.workers} worker(s)", p.batch),
            }
            for p in phases
        ],
        "ceiling": None if ceiling is None else batch_figures(ceiling.label, ceiling.batch),
        "over_ceiling": None
        if ceiling is None
        else {
            str(p.workers): round(p.batch.per_minute / ceiling.batch.per_minute, 3) for p in phases
        },
        "check": {"passed": ok},
    }


async def main(args: argparse.Namespace) -> tuple[str, bool, dict[str, Any]]:
    started = time.monotonic()
    phases: list[ScalingPhase] = []
    with (
        tempfile.TemporaryDirectory(prefix="keeper-scale-") as tmp,
        store_urls(args.store_url) as new_store,
    ):
        for workers in args.workers:
            phase_dir = Path(tmp) / f"w{workers}"
            phase_dir.mkdir()
            phase = await scaling_phase(args, workers, new_store(), phase_dir)
            b = phase.batch
            progress(
                f"{workers} worker(s): {b.n} deletions in {b.seconds:.1f} s "
                f"({b.per_minute:,.0f}/min)"
                + (f", {len(b.failures)} failures" if b.failures else "")
            )
            phases.append(phase)
    ceiling = None
    if not args.skip_ceiling and phases:
        knobs = WorkerKnobs(activity_slots(Settings()), args.max_workflow_tasks)
        ceiling = await ceiling_phase(args, knobs, phases[0].activities, uuid.uuid4().hex[:6], 0)
        c = ceiling.batch
        progress(f"{ceiling.label}: {c.n} in {c.seconds:.1f} s ({c.per_minute:,.0f}/min)")
    total = time.monotonic() - started
    text, ok = render(args, phases, ceiling, total)
    return text, ok, figures_of(args, phases, ceiling, total, ok)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runners", type=int, default=DEFAULT_RUNNERS, help="runners deleted per phase (2000)"
    )
    parser.add_argument(
        "--workers",
        default=",".join(map(str, DEFAULT_WORKERS)),
        help="worker counts, one phase each (default 1,2,4)",
    )
    parser.add_argument("--store-url", help="a PostgreSQL URL; default a throwaway server")
    parser.add_argument(
        "--submit-concurrency", type=int, default=100, help="client calls in flight (100)"
    )
    parser.add_argument(
        "--max-workflow-tasks",
        type=int,
        default=100,
        help="the ceiling worker's max_concurrent_workflow_tasks (the SDK's default, 100)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds one batch may take (1800)"
    )
    parser.add_argument("--skip-ceiling", action="store_true", help="keeper's phases only")
    parser.add_argument("--verbose", action="store_true", help="keep the SDK's warnings")
    args = parser.parse_args(argv)
    try:
        args.workers = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        parser.error("--workers: comma-separated whole numbers, e.g. 1,2,4")
    if not args.workers or min(args.workers) < 1:
        parser.error("--workers: each count must be at least 1")
    if args.runners < 1:
        parser.error("--runners must be at least 1")
    if args.store_url and not args.store_url.startswith("postgresql"):
        parser.error("--store-url: a postgresql:// URL (the workers share the store)")
    return args


if __name__ == "__main__":
    sys.exit(run_noting_load("runner_scaling", parse_args, main))
