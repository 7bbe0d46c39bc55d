"""Bytes of one job-watch check's observation, the payload its `watch.observe` activity
returns and its history keeps (an `ActivityTaskCompleted` event a check), by part.

    python bench/watch_observation.py                       # every built-in scenario
    python bench/watch_observation.py --scenario healthy --scenario zombie-coordinator

For each scenario the iris emulator (in this process, over real HTTP) launches one job and
runs it ten scenario minutes; keeper's observer (activities/watch/observe.py, the real iris
client, the default settings' sample of 4 workers) then reads it twice, as two checks do, and
the second observation is measured: its bytes through keeper's data converter, the CPU
readings it holds, and the bytes of each top-level part (its JSON alone). The second is the
steady case: the first reads the coordinator's log from the start. With `--one-emulator`
every job shares one emulator, and the two checks' wall time shows what its reads cost as it
fills with jobs that ran for hours. Figures are printed, never
asserted; raw figures go to bench/results/watch_observation-<UTC time>.json
(bench/run_record.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import httpx  # noqa: E402
from run_record import Run  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from emulators.iris import (  # noqa: E402
    IrisEmulator,
    IrisEmulatorConfig,
    ManualWallClock,
)
from emulators.iris.scenarios import SCENARIOS  # noqa: E402
from keeper.activities.watch.observe import WatchObserver  # noqa: E402
from keeper.domain.watch.calls import Observation, ObserveCall  # noqa: E402
from keeper.domain.watch.state import ReadingState  # noqa: E402
from keeper.runtime.settings.watch import WatchSettings  # noqa: E402
from keeper.runtime.temporal_client import DATA_CONVERTER  # noqa: E402
from keeper.runtime.watch.iris_client import IrisController  # noqa: E402

RUN_FOR_S = 600


def measure(observation: Observation) -> dict[str, Any]:
    (payload,) = DATA_CONVERTER.payload_converter.to_payloads([observation])
    dumped = observation.model_dump(mode="json")
    parts = {name: len(json.dumps(value, separators=(",", ":"))) for name, value in dumped.items()}
    return {
        "bytes": len(payload.data),
        "cpu_readings": len(observation.cpu or []),
        "parts": dict(sorted(parts.items(), key=lambda item: -item[1])),
    }


async def observe_twice(emulator: IrisEmulator, scenario: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=emulator.url, timeout=10) as http:
        body = {"name": f"obs-{scenario}", "scenario": scenario, "seed": 7, "overrides": {}}
        answer = await http.post("/control/jobs", json=body)
        answer.raise_for_status()
        job = answer.json()["job_id"]
        forward = {"seconds": RUN_FOR_S}
        (await http.post("/control/clock/fast-forward", json=forward)).raise_for_status()
    settings = WatchSettings()
    async with IrisController(emulator.url, timeout=60) as iris:
        observer = WatchObserver(
            iris,
            call_timeout_s=60,
            cpu_sample_workers=settings.cpu_sample_workers,
            log_lines=settings.log_lines_per_check,
        )
        env = ActivityEnvironment()
        started = time.monotonic()
        first = await env.run(observer.observe, ObserveCall(job_id=job, reading=ReadingState()))
        second = await env.run(observer.observe, ObserveCall(job_id=job, reading=first.reading))
        took = round(time.monotonic() - started, 2)
    return {
        "scenario": scenario,
        "first_bytes": measure(first)["bytes"],
        "two_checks_wall_s": took,
        **measure(second),
    }


def fresh_emulator() -> IrisEmulator:
    return IrisEmulator(IrisEmulatorConfig(settle_interval=0), ManualWallClock())


async def main(args: argparse.Namespace) -> int:
    run = Run("watch_observation")
    rows: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        shared = await stack.enter_async_context(fresh_emulator()) if args.one_emulator else None
        for scenario in args.scenario or list(SCENARIOS):
            # An emulator is started and stopped by `async with`; a shared one is left running.
            each = contextlib.nullcontext(shared) if shared is not None else fresh_emulator()
            async with each as emulator:
                row = await observe_twice(emulator, scenario)
            rows.append(row)
            top = ", ".join(f"{name} {size}" for name, size in list(row["parts"].items())[:3])
            print(
                f"  {scenario:20} {row['bytes']:6} bytes, {row['cpu_readings']:3} CPU readings "
                f"(first check {row['first_bytes']}; both {row['two_checks_wall_s']} s); "
                f"largest parts: {top}",
                flush=True,
            )
    figures = {"run_for_s": RUN_FOR_S, "one_emulator": args.one_emulator, "rows": rows}
    path = run.write(figures)
    print(f"raw results: {path}")
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="a built-in iris emulator scenario (repeatable); default every one",
    )
    parser.add_argument(
        "--one-emulator",
        action="store_true",
        help="every scenario's job in one emulator, each run on by the next ten minutes "
        "(by default each has an emulator of its own); the wall time shows what the "
        "emulator's reads cost as it fills",
    )
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
