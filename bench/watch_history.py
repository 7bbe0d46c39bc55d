"""Figures for the job watch's history: events per watched day, which continue-as-new keeps
flat per run (goal: every run under watch.history_events_limit, default 2,000).

Run from the repository root:

    python bench/watch_history.py                 # 7 simulated days, two cadences
    python bench/watch_history.py --days 2
    python bench/watch_history.py --json

One Temporal time-skipping test server (from the venv's bin directory, never downloaded),
the iris emulator in this process, and two in-process workers of the watch family, each on
its own task queue with its own settings, watching one job each:

- **production**: the cadence defaults (smoke every 30 s for 5 min, then steady checks at
  the median stage duration clamped to 2-30 min, 5 min before any stage transition);
- **1-minute**: every check 1 min apart (min = max = default interval).

The job plays `cpu-bound-quiet` (busy workers, a progress line every 40 scenario minutes)
with a single stage of 10,000 hours, so it runs for the whole bench. The script lets the
server skip a day at a time (`env.sleep`, `--step-minutes` a call); the watches' timers fire at
once and each check is a real `watch.observe` against the emulator over HTTP. After each
day it walks every watch's run chain (each run's last event names the next:
WorkflowExecutionContinuedAsNew) and counts the events of each run: the current run's
events, the total across runs, the number of continue-as-new, and the largest single run.

Clocks: the emulator's scenario clock follows the wall (speed 1), not the test server's
skipped time, so the job the watch sees moves a second per real second while the watch's own
clock moves days. (At speed 60 the emulator's GetTaskLogs grows costly: a job that writes no
line leaves the cursor at 0, and every read walks every progress beat since the launch.)
The history's shape (events per check, checks per day, runs per day) comes from the
watch's timers and is what the figures are about; the verdicts are not. The delta probe
sleeps on the wall clock (watch.probe_gap): 0.2 s here, so a probe costs little real time.

Figures are printed, never asserted. Raw figures go to bench/results/watch_history-<UTC>.json
(bench/run_record.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from run_record import Run  # noqa: E402
from script_runner import Interrupted, configure, progress, run_for_figures, tool_path  # noqa: E402
from temporalio.api.enums.v1 import EventType, IndexedValueType  # noqa: E402
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest  # noqa: E402
from temporalio.api.testservice.v1 import SleepRequest  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from emulators.iris import IrisEmulator, IrisEmulatorConfig, start_emulator  # noqa: E402
from keeper.domain.watch.cadence import CadencePolicy  # noqa: E402
from keeper.domain.watch.calls import JobWatchInput  # noqa: E402
from keeper.domain.watch.models import WatchView, watch_id  # noqa: E402
from keeper.runtime import search_attributes as all_sa  # noqa: E402
from keeper.runtime.settings import Settings  # noqa: E402
from keeper.runtime.watch import search_attributes as sa  # noqa: E402
from keeper.runtime.watch.deps import WatchDeps, open_watch_deps  # noqa: E402
from keeper.workers.families.watch import watch_activities  # noqa: E402
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS  # noqa: E402
from keeper.workers.runner import workflow_runner  # noqa: E402
from keeper.workflows.watch.job_watch import JobWatch  # noqa: E402

DAY = timedelta(days=1)
SPEED = 1.0
PROBE_GAP = timedelta(milliseconds=200)
SCENARIO = "cpu-bound-quiet"
# One stage long enough for any run of this script (10,000 scenario hours).
OVERRIDES = {"stages": [{"name": "stage0-Tokenize → Write", "shards": 64, "seconds": 3.6e7}]}
ONE_MINUTE = CadencePolicy(
    min_interval=timedelta(minutes=1),
    max_interval=timedelta(minutes=1),
    default_interval=timedelta(minutes=1),
)
# case -> the cadence its worker runs with
CASES: dict[str, CadencePolicy] = {"production": CadencePolicy(), "1-minute": ONE_MINUTE}


@dataclass
class Chain:
    """One watch's runs, first to current, and each closed run's event count."""

    handle: WorkflowHandle[Any, Any]
    first_run: str
    closed: list[tuple[str, int]] = field(default_factory=list)
    current: str = ""

    async def walk(self, client: Client) -> tuple[int, bool]:
        """Follows continue-as-new from the last known run; the current run's events and
        whether it is still running."""
        run = self.current or self.first_run
        while True:
            events = [e async for e in client.get_workflow_handle(self.handle.id, run_id=run)
                      .fetch_history_events()]  # fmt: skip
            last = events[-1] if events else None
            if (
                last is not None
                and last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            ):
                self.closed.append((run, len(events)))
                run = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                continue
            self.current = run
            running = last is None or last.event_type not in _CLOSING
            return len(events), running


_CLOSING = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    }
)


def case_settings(emulator_url: str, cadence: CadencePolicy) -> Settings:
    settings = Settings()
    settings.watch.controller_url = emulator_url
    settings.watch.call_timeout = timedelta(seconds=10)
    settings.watch.probe_gap = PROBE_GAP
    settings.watch.cadence = cadence
    return settings


async def skip(env: WorkflowEnvironment, duration: timedelta) -> None:
    """`env.sleep` with a deadline of its own: the server answers once `duration` of its
    time has passed, and the checks inside it take real time (more than the default RPC
    deadline in a long run)."""
    request = SleepRequest()
    request.duration.FromTimedelta(duration)
    await env.client.test_service.unlock_time_skipping_with_sleep(
        request, timeout=timedelta(minutes=10)
    )


async def register_search_attributes(client: Client) -> None:
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: IndexedValueType.ValueType(key.indexed_value_type) for key in all_sa.ALL
            },
        )
    )


async def measure(args: argparse.Namespace, run: Run) -> dict[str, Any]:
    progress("starting the time-skipping test server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=tool_path("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    emu: IrisEmulator | None = None
    deps: list[WatchDeps] = []
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(env.shutdown)
        await register_search_attributes(env.client)
        emu = await start_emulator(IrisEmulatorConfig(speed=SPEED))
        stack.push_async_callback(emu.stop)
        tag = uuid.uuid4().hex[:6]
        chains: dict[str, Chain] = {}
        limit = 0
        for case, cadence in CASES.items():
            settings = case_settings(emu.url, cadence)
            limit = settings.watch.history_events_limit
            dep = open_watch_deps(settings.watch)
            deps.append(dep)
            stack.push_async_callback(dep.aclose)
            queue = f"bench-history-{tag}-{case}"
            worker = Worker(
                env.client,
                task_queue=queue,
                workflows=[JobWatch],
                activities=watch_activities(settings, env.client, dep),
                interceptors=WORKFLOW_INTERCEPTORS,
                workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
                graceful_shutdown_timeout=timedelta(seconds=1),
                workflow_runner=workflow_runner(False, env.client.data_converter),
            )
            await stack.enter_async_context(worker)
            job = emu.create_job(f"history-{tag}-{case}", "alice", SCENARIO, 7, OVERRIDES)
            handle = await env.client.start_workflow(
                JobWatch.run,
                JobWatchInput(job_id=job.job_id, requested_by="bench"),
                id=watch_id(job.job_id),
                task_queue=queue,
                search_attributes=sa.for_job(job.job_id),
            )
            assert handle.first_execution_run_id is not None
            chains[case] = Chain(handle=handle, first_run=handle.first_execution_run_id)
        horizon = {
            "production": timedelta(days=args.days),
            "1-minute": timedelta(hours=args.minute_hours or 24 * args.days),
        }
        row_every = timedelta(hours=args.row_hours)
        marks = {row_every * k for k in range(1, int(max(horizon.values()) / row_every) + 1)}
        marks |= set(horizon.values())
        days: list[dict[str, Any]] = []
        last: dict[str, dict[str, Any]] = {}
        real_start = time.monotonic()
        now = timedelta(0)
        step = timedelta(minutes=args.step_minutes)
        for mark in sorted(marks):
            t0 = time.monotonic()
            # In steps, so a stuck run shows in --verbose.
            while now < mark:
                t_step = time.monotonic()
                await skip(env, min(step, mark - now))
                now = min(now + step, mark)
                if args.verbose:
                    progress(f"at {now}: step {time.monotonic() - t_step:.2f} s real")
            real = time.monotonic() - t0
            row: dict[str, Any] = {
                "day": round(mark / DAY, 3),
                "real_seconds": round(real, 1),
            }
            for case, chain in chains.items():
                if now > horizon[case]:
                    continue
                current, running = await chain.walk(env.client)
                view = await chain.handle.query("status", result_type=WatchView)
                sizes = [n for _, n in chain.closed] + [current]
                row[case] = {
                    "current_run_events": current,
                    "total_events": sum(sizes),
                    "continue_as_new": len(chain.closed),
                    "largest_run_events": max(sizes),
                    "checks": view.checks if view else None,
                    "phase": view.phase.value if view else None,
                    "verdict": view.verdict if view else None,
                    "generation": view.generation if view else None,
                    "running": running,
                }
                last[case] = {**row[case], "days": mark / DAY}
                if now == horizon[case]:
                    # Its horizon: the watch ends (unwatched), its figures are in.
                    await chain.handle.cancel()
            days.append(row)
            # Written after every row too, so a run stopped early keeps what it measured.
            run.write({"partial": True, "per_day": days})
            progress(
                f"day {row['day']}: "
                + "; ".join(
                    f"{c} {row[c]['total_events']} events, {row[c]['continue_as_new']} CAN"
                    for c in chains
                    if c in row
                )
                + f" ({real:.1f} s real)"
            )
        summary = {}
        for case, chain in chains.items():
            sizes = [n for _, n in chain.closed]
            end = last[case]
            summary[case] = {
                "simulated_days": round(end["days"], 3),
                "events_per_day": round(end["total_events"] / end["days"], 1),
                "checks_per_day": round(end["checks"] / end["days"], 1) if end["checks"] else None,
                "events_per_check": round(end["total_events"] / end["checks"], 2)
                if end["checks"]
                else None,
                "runs": len(sizes) + 1,
                "closed_run_events_min": min(sizes) if sizes else None,
                "closed_run_events_max": max(sizes) if sizes else None,
                "largest_run_events": end["largest_run_events"],
                # A run rolls over after the check that reached the limit: a few over it.
                "over_limit_by": end["largest_run_events"] - limit,
            }
        return {
            "server": "time-skipping test server",
            "scenario": SCENARIO,
            "emulator_speed": SPEED,
            "probe_gap_s": PROBE_GAP.total_seconds(),
            "days": args.days,
            "minute_hours": args.minute_hours,
            "history_events_limit": limit,
            "cadences": {c: p.model_dump(mode="json") for c, p in CASES.items()},
            "real_seconds": round(time.monotonic() - real_start, 1),
            "per_day": days,
            "summary": summary,
        }
    raise AssertionError("unreachable")


def render(f: dict[str, Any]) -> str:
    cases = list(f["summary"])
    rows = [
        f"Job watch history on the {f['server']}, "
        f"watch.history_events_limit {f['history_events_limit']}",
        "",
        f"{'day':>6} | "
        + " | ".join(f"{c + ': current / total / CAN / largest':<44}" for c in cases)
        + " | real s",
    ]
    for row in f["per_day"]:
        cells = []
        for c in cases:
            d = row.get(c)
            if d is None:
                cells.append("-".ljust(44))
                continue
            cells.append(
                f"{d['current_run_events']:>7} / {d['total_events']:>7} / "
                f"{d['continue_as_new']:>4} / {d['largest_run_events']:>6}"
                f"{'' if d['running'] else ' (closed)'}".ljust(44)
            )
        rows.append(f"{row['day']:>6} | " + " | ".join(cells) + f" | {row['real_seconds']}")
    rows.append("")
    for c, s in f["summary"].items():
        rows.append(
            f"{c} ({s['simulated_days']} days): {s['events_per_day']} events/day, "
            f"{s['checks_per_day']} checks/day, "
            f"{s['events_per_check']} events/check, {s['runs']} runs, closed runs "
            f"{s['closed_run_events_min']}-{s['closed_run_events_max']} events, largest "
            f"{s['largest_run_events']} (the limit {s['over_limit_by']:+d})"
        )
    rows.append(f"real time: {f['real_seconds']} s")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0, help="the production case's")
    parser.add_argument(
        "--minute-hours", type=float, default=None, help="the 1-minute case's horizon, hours"
    )
    parser.add_argument("--row-hours", type=float, default=24.0, help="a table row every")
    parser.add_argument("--step-minutes", type=int, default=20, help="simulated per sleep")
    parser.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    configure(args.verbose)
    run = Run("watch_history")
    try:
        figures, out = run_for_figures(lambda: measure(args, run))
    except Interrupted:
        raise SystemExit(130) from None
    path = run.write(figures)
    out.write((json.dumps(figures, indent=2) if args.json else render(figures)) + "\n")
    out.write(f"raw results: {os.path.relpath(path, ROOT)}\n")
    out.flush()


if __name__ == "__main__":
    main()
