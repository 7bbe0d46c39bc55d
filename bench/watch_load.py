"""What one watched job costs the Temporal server at the production defaults: history events
and bytes per watched hour, and events per second for 1,000 watches.

Run from the repository root:

    python bench/watch_load.py                  # 3 watched hours of each case
    python bench/watch_load.py --hours 2 --json

One Temporal time-skipping test server (from the venv's bin directory, never downloaded),
the iris emulator in this process and one in-process worker of the watch family with
keeper's default watch settings (`Settings().watch`: smoke checks every 30 s for 5 min,
then about one stage per check, 2-30 min, 5 min before any stage transition; the stall gate
of 3 checks and 10 min; a 3 s delta probe). Each case watches one job:

- **healthy**: twelve 20-minute stages (4 hours), every worker busy: steady checks every
  20 minutes (the median stage duration);
- **zombie**: the zombie-coordinator scenario: the pipeline exits at 400 s, the coordinator
  lingers; the watch escalates, proposes a restart and checks on while it waits (nobody
  approves);
- **quiet**: cpu-bound-quiet with one 10,000-hour stage: busy workers, a progress line every
  40 minutes, no stage transition: checks every 5 minutes (default_interval).

Clocks: the emulator's wall clock is a manual one that the script moves with the server's
skipped time (`--step-seconds` at a time), at speed 1, so each job lives its scenario at the
pace a real one would, in the watch's own time. The delta probe's two reads sleep real time
while the manual clock stands still, so a probe never sees a rise: fine for the zombie (its
CPU is flat) and never asked of the others (their counters rise between checks).

At the end it walks each watch's run chain (continue-as-new) and counts every event, by type,
and its protobuf size. Per watched hour: the first hour (with the smoke checks) and the
hours after it (steady). Events per second for 1,000 watches is the steady rate times 1,000
over 3,600 s: computed from the measured per-watch rate, not measured at 1,000.

Figures are printed, never asserted. Raw figures go to bench/results/watch_load-<UTC>.json
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
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from run_record import Run  # noqa: E402
from script_runner import progress, report_run, tool_path  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402
from watch_history import register_search_attributes, skip  # noqa: E402

from emulators.iris import IrisEmulatorConfig, ManualWallClock, start_emulator  # noqa: E402
from keeper.domain.watch.calls import JobWatchInput  # noqa: E402
from keeper.domain.watch.models import WatchView, watch_id  # noqa: E402
from keeper.runtime.settings import Settings  # noqa: E402
from keeper.runtime.watch import search_attributes as sa  # noqa: E402
from keeper.runtime.watch.deps import open_watch_deps  # noqa: E402
from keeper.workers.families.watch import watch_activities  # noqa: E402
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS  # noqa: E402
from keeper.workers.runner import workflow_runner  # noqa: E402
from keeper.workflows.watch.job_watch import JobWatch  # noqa: E402

HOUR = timedelta(hours=1)
WATCHES = 1000
# case -> (scenario, overrides)
CASES: dict[str, tuple[str, dict[str, Any] | None]] = {
    "healthy": (
        "healthy",
        {
            "stages": [
                {"name": f"stage{i}-Tokenize", "shards": 1000, "seconds": 1200} for i in range(12)
            ]
        },
    ),
    "zombie": ("zombie-coordinator", None),
    "quiet": (
        "cpu-bound-quiet",
        {"stages": [{"name": "stage0-Tokenize → Write", "shards": 64, "seconds": 3.6e7}]},
    ),
}
_CLOSING = frozenset(
    {
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    }
)


@dataclass
class Watched:
    case: str
    handle: WorkflowHandle[Any, Any]
    first_run: str
    # Checks done at each whole hour (from the status query), to split the first hour off.
    checks_at: dict[int, int] = field(default_factory=dict)

    async def events(self, client: Client) -> list[tuple[int, HistoryEvent]]:
        """Every event of every run, first to current, with its run's index."""
        found: list[tuple[int, HistoryEvent]] = []
        run, index = self.first_run, 0
        while True:
            handle = client.get_workflow_handle(self.handle.id, run_id=run)
            events = [e async for e in handle.fetch_history_events()]
            found += [(index, e) for e in events]
            last = events[-1] if events else None
            kind = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            if last is None or last.event_type != kind:
                return found
            run = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            index += 1


def _type_name(event: HistoryEvent) -> str:
    return EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")


def summarise(events: list[tuple[int, HistoryEvent]], hours: float, first_hour_end: float,
              checks: dict[int, int]) -> dict[str, Any]:  # fmt: skip
    """Per watched hour: everything, the first hour, and the hours after it."""
    start = events[0][1].event_time.ToDatetime().timestamp() if events else 0.0

    def window(lo: float, hi: float) -> tuple[int, int]:
        picked = [e for _, e in events if lo <= e.event_time.ToDatetime().timestamp() - start < hi]
        return len(picked), sum(e.ByteSize() for e in picked)

    total = (len(events), sum(e.ByteSize() for _, e in events))
    first = window(0, first_hour_end)
    steady = window(first_hour_end, hours * 3600 + 1)
    steady_hours = max(hours - first_hour_end / 3600, 1e-9)
    steady_checks = checks.get(int(hours), 0) - checks.get(1, 0)
    by_type = Counter(_type_name(e) for _, e in events)
    bytes_by_type: Counter[str] = Counter()
    for _, e in events:
        bytes_by_type[_type_name(e)] += e.ByteSize()
    return {
        "events": total[0],
        "bytes": total[1],
        "runs": (events[-1][0] + 1) if events else 0,
        "checks": checks.get(int(hours), 0),
        "first_hour": {"events": first[0], "bytes": first[1], "checks": checks.get(1, 0)},
        "steady_per_hour": {
            "events": round(steady[0] / steady_hours, 1),
            "bytes": round(steady[1] / steady_hours),
            "checks": round(steady_checks / steady_hours, 1),
        },
        "events_per_check_steady": round(steady[0] / steady_checks, 2) if steady_checks else None,
        "bytes_per_event": round(total[1] / total[0]) if total[0] else None,
        "by_type": dict(by_type.most_common()),
        "bytes_by_type": dict(bytes_by_type.most_common()),
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    progress("starting the time-skipping test server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=tool_path("temporal-test-server"),
        data_converter=pydantic_data_converter,
    )
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(env.shutdown)
        await register_search_attributes(env.client)
        wall = ManualWallClock(start=time.time())
        emu = await start_emulator(IrisEmulatorConfig(speed=1.0), wall)
        stack.push_async_callback(emu.stop)
        settings = Settings()
        settings.watch.controller_url = emu.url
        deps = open_watch_deps(settings.watch)
        stack.push_async_callback(deps.aclose)
        tag = uuid.uuid4().hex[:6]
        queue = f"bench-load-{tag}"
        worker = Worker(
            env.client,
            task_queue=queue,
            workflows=[JobWatch],
            activities=watch_activities(settings, env.client, deps),
            interceptors=WORKFLOW_INTERCEPTORS,
            workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
            graceful_shutdown_timeout=timedelta(seconds=1),
            workflow_runner=workflow_runner(False, env.client.data_converter),
        )
        await stack.enter_async_context(worker)
        watched: list[Watched] = []
        for case, (scenario, overrides) in CASES.items():
            job = emu.create_job(f"load-{tag}-{case}", "alice", scenario, 7, overrides)
            handle = await env.client.start_workflow(
                JobWatch.run,
                JobWatchInput(job_id=job.job_id, requested_by="bench"),
                id=watch_id(job.job_id),
                task_queue=queue,
                search_attributes=sa.for_job(job.job_id),
            )
            assert handle.first_execution_run_id is not None
            watched.append(Watched(case, handle, handle.first_execution_run_id))
        step = timedelta(seconds=args.step_seconds)
        horizon = timedelta(hours=args.hours)
        now = timedelta(0)
        real_start = time.monotonic()
        while now < horizon:
            delta = min(step, horizon - now)
            await skip(env, delta)
            wall.advance(delta.total_seconds())
            now += delta
            if now % HOUR == timedelta(0):
                hour = int(now / HOUR)
                line = []
                for w in watched:
                    view = await w.handle.query("status", result_type=WatchView)
                    w.checks_at[hour] = view.checks if view else 0
                    line.append(f"{w.case} {w.checks_at[hour]} checks ({view and view.verdict})")
                progress(f"hour {hour}: " + ", ".join(line))
        cases = {}
        for w in watched:
            events = await w.events(env.client)
            view = await w.handle.query("status", result_type=WatchView)
            cases[w.case] = {
                **summarise(events, args.hours, HOUR.total_seconds(), w.checks_at),
                "phase": view.phase.value if view else None,
                "verdict": view.verdict if view else None,
                "pending": [p.id for p in view.pending()] if view else [],
                "escalations": view.escalations if view else [],
            }
            await w.handle.cancel()
        steady = [c["steady_per_hour"]["events"] for c in cases.values()]
        steady_bytes = [c["steady_per_hour"]["bytes"] for c in cases.values()]
        return {
            "server": "time-skipping test server",
            "hours": args.hours,
            "step_seconds": args.step_seconds,
            "emulator_speed": 1.0,
            "settings": "Settings().watch (production defaults)",
            "cadence": settings.watch.cadence.model_dump(mode="json"),
            "history_events_limit": settings.watch.history_events_limit,
            "cases": cases,
            "thousand_watches": {
                "watches": WATCHES,
                "events_per_second": {
                    c: round(v["steady_per_hour"]["events"] * WATCHES / 3600, 2)
                    for c, v in cases.items()
                },
                "bytes_per_second": {
                    c: round(v["steady_per_hour"]["bytes"] * WATCHES / 3600)
                    for c, v in cases.items()
                },
                "busiest_events_per_second": round(max(steady) * WATCHES / 3600, 2),
                "busiest_bytes_per_second": round(max(steady_bytes) * WATCHES / 3600),
            },
            "real_seconds": round(time.monotonic() - real_start, 1),
        }
    raise AssertionError("unreachable")


def render(f: dict[str, Any]) -> str:
    rows = [
        f"Job watch load on the {f['server']}, production defaults, {f['hours']} watched hours "
        f"each (steps of {f['step_seconds']} s)",
        "",
        f"{'case':<8} | {'checks':>6} | {'events':>6} | {'KB':>6} | runs | first hour ev / KB "
        f"| steady/h: checks, events, KB | ev/check | end",
    ]
    for case, c in f["cases"].items():
        first, steady = c["first_hour"], c["steady_per_hour"]
        rows.append(
            f"{case:<8} | {c['checks']:>6} | {c['events']:>6} | {c['bytes'] / 1000:>6.1f} | "
            f"{c['runs']:>4} | {first['events']:>5} / {first['bytes'] / 1000:>6.1f} | "
            f"{steady['checks']:>5}, {steady['events']:>6}, {steady['bytes'] / 1000:>6.1f} | "
            f"{c['events_per_check_steady']} | {c['phase']} {c['verdict']}"
            + (f" pending {','.join(c['pending'])}" if c["pending"] else "")
        )
    rows.append("")
    for case, c in f["cases"].items():
        top = ", ".join(f"{k} {v}" for k, v in list(c["by_type"].items())[:8])
        rows.append(f"{case}: {top}")
    t = f["thousand_watches"]
    rows.append("")
    rows.append(
        "1,000 watches (computed from the steady per-watch rate): "
        + ", ".join(f"{c} {v} events/s" for c, v in t["events_per_second"].items())
        + f"; at most {t['busiest_bytes_per_second'] / 1000:.1f} KB/s of history"
    )
    rows.append(f"real time: {f['real_seconds']} s")
    return "\n".join(rows)


async def main(args: argparse.Namespace) -> tuple[str, bool, dict[str, Any]]:
    figures = await measure(args)
    text = json.dumps(figures, indent=2) if args.json else render(figures)
    return text, True, figures


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, default=3, help="watched hours of each case")
    parser.add_argument(
        "--step-seconds", type=int, default=10, help="server time skipped (and wall moved) a step"
    )
    parser.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    return report_run(Run("watch_load"), args.verbose, lambda: main(args))


if __name__ == "__main__":
    raise SystemExit(cli())
