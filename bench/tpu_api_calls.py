"""TPU API calls per hour with 1, 100 and 1,000 slices waiting for assignment in one zone.

Run from the repository root:

    python bench/tpu_api_calls.py            # 1, 100 and 1,000 slices, 10 emulated minutes each
    python bench/tpu_api_calls.py --quick    # 1 and 100 slices, 2 emulated minutes
    python bench/tpu_api_calls.py --json     # the same figures as JSON on stdout

One worker process is modelled by one TpuActivities on one real google-cloud-tpu client, as
workers/families/tpu.py builds it. Its observe_slice is run the way Temporal runs it for a
bootstrap waiting in assign: once per poll interval per slice, each attempt carrying the
server time it started and the poll retry policy (activity.info()). The time is the TPU
emulator's clock, moved to each attempt's start, so emulated minutes take seconds of real
time. The slices' polls are spread evenly over the interval, as bootstraps started at
different times are. The emulator counts every call per method; the figure is those calls
divided by the emulated time. History events per bootstrap come from whole bootstraps on
Temporal's time-skipping server (bench/tpu_bootstrap.py's harness). Nothing is asserted;
raw figures go to bench/results/tpu_api_calls-<UTC time>.json. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import tpu_v2
from run_record import Run
from script_runner import progress, report_run
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from tpu_bootstrap import Bootstraps, free_port

from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator
from keeper.activities.tpu.cloud import TpuActivities, build_queued_resource
from keeper.domain.tpu import naming
from keeper.domain.tpu.models import ObserveInput, SliceRef
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.runtime.tpu.client import emulator_client
from keeper.workflows.tpu.activity_options import poll_retry

# A prefix no test suite and no other bench script uses.
IP_PREFIX = "127.44"
PROJECT = "keeper-bench"
ZONE = "us-central2-b"
POLL = timedelta(seconds=30)  # SliceRequest's default poll interval
HOUR = 3600.0
SLICES_FULL = (1, 100, 1000)
SLICES_QUICK = (1, 100)
# Emulated time per case. Every poll moves the emulator's clock, and the emulator evaluates
# all its resources on each move, so 1,000 slices cost minutes of real time per emulated
# ten minutes; the rate is steady after the first interval, so ten minutes measure it.
WAIT_FULL = timedelta(minutes=10)
WAIT_QUICK = timedelta(minutes=2)
HISTORY_WAIT = timedelta(minutes=10)
HISTORY_REPEATS = 3  # full run; --quick runs it once


def request(name: str) -> SliceRequest:
    return SliceRequest.model_validate(
        {
            "slice_name": name,
            "project": PROJECT,
            "zone": ZONE,
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-ubuntu2204-base",
            "capacity": "reserved",
            "reservation_name": "res-bench",
            "poll_interval": POLL,
        }
    )


async def create_waiting(client: tpu_v2.TpuAsyncClient, count: int) -> list[SliceRequest]:
    """`count` reserved QRs that are never assigned, created with keeper's own request body."""
    requests = [request(f"calls-{i:04d}-{uuid.uuid4().hex[:6]}") for i in range(count)]
    for req in requests:
        labels = naming.owner_labels(naming.bootstrap_workflow_id(req.slice_name), "bench-run")
        await client.create_queued_resource(
            request=tpu_v2.CreateQueuedResourceRequest(
                parent=naming.parent(PROJECT, ZONE),
                queued_resource_id=req.slice_name,
                queued_resource=build_queued_resource(req, labels, timedelta(hours=4)),
            ),
            timeout=10,
        )
    return requests


async def waiting_case(emu: TpuEmulator, count: int, wait: timedelta) -> dict[str, Any]:
    """`count` slices polled for `wait` of emulated time by one worker's activities."""
    emu.reset()
    emu.set_default_scenario(Scenario(assign_after=None))
    client = emulator_client(emu.grpc_target)
    activities = TpuActivities(client, call_timeout=timedelta(seconds=30))
    requests = await create_waiting(client, count)
    # Every slice's first poll is spread over one interval after the creates.
    emu.advance(1.0)
    start = emu.clock.now()
    baseline = Counter(emu.state()["calls"])
    env = ActivityEnvironment()
    base_info = dataclasses.replace(
        ActivityEnvironment.default_info(),
        activity_type="tpu.observe_slice",
        activity_id="1",
        retry_policy=poll_retry(POLL),
    )
    interval = POLL.total_seconds()
    due: list[tuple[float, int]] = [(start + interval * i / count, i) for i in range(count)]
    heapq.heapify(due)
    end = start + wait.total_seconds()
    polls = waited = returned = failed = 0
    real_started = time.monotonic()
    while due and due[0][0] < end:
        at, i = heapq.heappop(due)
        emu.advance(max(0.0, at - emu.clock.now()))
        req = requests[i]
        env.info = dataclasses.replace(
            base_info,
            workflow_id=naming.bootstrap_run_workflow_id(req.slice_name),
            workflow_run_id=f"run-{i}",
            attempt=polls // count + 1,
            started_time=datetime.fromtimestamp(at, UTC),
            current_attempt_scheduled_time=datetime.fromtimestamp(at, UTC),
        )
        inp = ObserveInput(slice=SliceRef.of(req), expected_vms=4, last_key="", phase=Phase.ASSIGN)
        polls += 1
        try:
            # last_key "" never matches, so each poll returns what it saw: the figure is
            # the cost of reading, whichever way the attempt ends.
            await env.run(activities.observe_slice, inp)
            returned += 1
        except ApplicationError as err:
            if err.type == "Waiting":
                waited += 1
            else:
                failed += 1
        heapq.heappush(due, (at + interval, i))
    real_seconds = time.monotonic() - real_started
    calls = Counter(emu.state()["calls"]) - baseline
    hours = wait.total_seconds() / HOUR
    per_hour = {method: round(n / hours, 1) for method, n in sorted(calls.items())}
    total = round(sum(calls.values()) / hours, 1)
    progress(
        f"  {count} slices: {total} TPU API calls/h {per_hour}, {polls} polls, "
        f"{real_seconds:.1f} s real"
    )
    await client.transport.close()
    return {
        "slices": count,
        "emulated_hours": round(hours, 3),
        "polls": polls,
        "polls_returned": returned,
        "polls_failed": failed,
        "calls": dict(sorted(calls.items())),
        "calls_per_hour": per_hour,
        "calls_per_hour_total": total,
        "calls_per_hour_per_slice": round(total / count, 2),
        "real_seconds": round(real_seconds, 1),
    }


async def history_case(repeats: int) -> list[dict[str, Any]]:
    """Whole bootstraps, each assigned after HISTORY_WAIT, on the time-skipping server."""
    emu = TpuEmulator(
        EmulatorConfig(ip_prefix=IP_PREFIX, vm_health_port=free_port(), scenario_file=None)
    )
    await emu.start()
    try:
        runs = Bootstraps(emu)
        found = [await runs.run("10m", HISTORY_WAIT) for _ in range(repeats)]
    finally:
        await emu.stop()
    return [
        {
            "supervisor_events": r.supervisor_events,
            "child_events": r.child_events,
            "events": r.events,
            "polls_returned": r.observations,
            "calls_in_wait": r.calls_in_wait,
            "outcome": r.outcome,
        }
        for r in found
    ]


def render(figures: dict[str, Any]) -> str:
    lines = [
        f"TPU API calls per hour, slices waiting in assign in one zone on one worker "
        f"(poll {POLL.seconds} s, emulated {figures['meta']['emulated_minutes']} min each)",
        f"{'slices':>7} {'calls/h':>9} {'per slice':>10}  by method",
    ]
    one = figures["waiting"][0]["calls_per_hour_total"]
    for row in figures["waiting"]:
        lines.append(
            f"{row['slices']:>7} {row['calls_per_hour_total']:>9.1f} "
            f"{row['calls_per_hour_per_slice']:>10.2f}  {row['calls_per_hour']}"
            f"  ({row['calls_per_hour_total'] / one:.2f}x one slice)"
        )
    lines.append(f"History events per bootstrap (assigned after {HISTORY_WAIT}):")
    for row in figures["history"]:
        lines.append(
            f"  {row['events']} ({row['supervisor_events']} + {row['child_events']}), "
            f"{row['polls_returned']} polls returned, calls in wait {row['calls_in_wait']}"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> tuple[str, bool, dict[str, Any]]:
    wait = WAIT_QUICK if args.quick else WAIT_FULL
    slices = SLICES_QUICK if args.quick else SLICES_FULL
    figures: dict[str, Any] = {
        "meta": {
            "quick": args.quick,
            "poll_seconds": POLL.total_seconds(),
            "emulated_minutes": wait.total_seconds() / 60,
            "zone": ZONE,
            # Which observer was measured (a before/after comparison may load another).
            "observer_module": TpuActivities.__module__,
            "observer_file": sys.modules[TpuActivities.__module__].__file__,
        },
        "waiting": [],
    }
    emu = TpuEmulator(
        EmulatorConfig(ip_prefix=IP_PREFIX, vm_health_port=free_port(), scenario_file=None)
    )
    await emu.start()
    try:
        figures["meta"]["emulator_max_page_size"] = getattr(emu.config, "max_page_size", None)
        for count in slices:
            figures["waiting"].append(await waiting_case(emu, count, wait))
    finally:
        await emu.stop()
    progress("history: whole bootstraps on the time-skipping server")
    figures["history"] = await history_case(1 if args.quick else HISTORY_REPEATS)
    text = json.dumps(figures, indent=2) if args.json else render(figures)
    return text, True, figures


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 and 100 slices, 2 minutes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--verbose", action="store_true", help="keep activity failure logs")
    return parser.parse_args()


def run() -> int:
    record = Run("tpu_api_calls")
    args = parse_args()
    return report_run(record, args.verbose, lambda: main(args))


if __name__ == "__main__":
    sys.exit(run())
