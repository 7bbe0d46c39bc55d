"""How long one TPU health round takes, by slice size and by how many VMs never answer.

Run from the repository root:

    python bench/tpu_health_round.py               # 512 and 4,096 VMs, 3 runs a case
    python bench/tpu_health_round.py --runs 1      # one run a case
    python bench/tpu_health_round.py --json        # the figures as JSON on stdout

The VMs are the TPU emulator's fleet on loopback: one node of 4,096 VMs (`vms_per_node`),
each listening on an address of its own. The emulator runs in a child process, as the VMs
are not in the worker's process in production and the two would otherwise share one event
loop; the parent sets which VMs are unreachable (they accept the connection and never
answer) through a pipe. keeper's `HealthProber`, built the way the worker builds it from
the default settings (2 s probe timeout), runs rounds over the first 512 and over all 4,096
VMs with none, 100 and half of them unreachable, after one uncounted warm-up round.

The target is one probe timeout plus 0.5 s for a round, and 1 s for 4,096 healthy VMs.
Figures are printed, never asserted: the machine is shared. Raw figures go to
bench/results/tpu_health_round-<UTC>.json (bench/run_record.py); docs/benchmarks.md says
what they mean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from run_record import Run
from script_runner import configure, progress, run_for_figures

from keeper.activities.tpu.health import HealthProber
from keeper.domain.tpu.observation import VmEndpoint
from keeper.runtime.settings import Settings
from keeper.workers.families.tpu import health_prober

IP_PREFIX = "127.44"  # a loopback prefix of this bench's own
SLICE = "bench-health"
MAX_VMS = 4096
SIZES = (512, 4096)
ALL_HEALTHY_TARGET = 1.0
TARGET_MARGIN = 0.5


@dataclass(frozen=True)
class Case:
    vms: int
    unreachable: int

    @property
    def label(self) -> str:
        if self.unreachable == 0:
            return "all healthy"
        if self.unreachable * 2 == self.vms:
            return "half unreachable"
        return f"{self.unreachable} unreachable"

    def unreachable_indices(self) -> list[int]:
        """Spread over the VMs, so every wave of a bounded prober meets some."""
        if self.unreachable == 0:
            return []
        step = self.vms / self.unreachable
        return sorted({int(i * step) for i in range(self.unreachable)})


def free_port() -> int:
    # The wildcard address, so no (ip, port) pair under any loopback prefix is taken.
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def cases() -> list[Case]:
    return [Case(n, u) for n in SIZES for u in (0, 100, n // 2)]


# --------------------------------------------------------------------------- the fleet


def _fleet_process(conn: Connection, port: int) -> None:
    """The emulator with one node of MAX_VMS VMs, serving until told to stop."""
    asyncio.run(_serve_fleet(conn, port))


async def _serve_fleet(conn: Connection, port: int) -> None:
    from google.cloud import tpu_v2

    from emulators.tpu import EmulatorConfig, Scenario, TpuEmulator
    from keeper.activities.tpu.cloud import build_queued_resource
    from keeper.domain.tpu import naming
    from keeper.domain.tpu.slice_request import SliceRequest
    from keeper.runtime.tpu.client import emulator_client

    _raise_open_files()
    emu = TpuEmulator(EmulatorConfig(ip_prefix=IP_PREFIX, vm_health_port=port, scenario_file=None))
    await emu.start()
    try:
        request = SliceRequest.model_validate(
            {
                "slice_name": SLICE,
                "project": "keeper-bench",
                "zone": "us-central2-b",
                "accelerator_type": "v4-8",
                "runtime_version": "tpu-ubuntu2204-base",
                "capacity": "reserved",
                "reservation_name": "res-bench",
                "health_port": port,
            }
        )
        scenario = Scenario(
            assign_after=0, active_after=0, ips_after=0, phone_home=False, vm_count=MAX_VMS
        )
        emu.set_scenario(SLICE, scenario)
        client = emulator_client(emu.grpc_target)
        await client.create_queued_resource(
            request=tpu_v2.CreateQueuedResourceRequest(
                parent=naming.parent(request.project, request.zone),
                queued_resource_id=SLICE,
                queued_resource=build_queued_resource(
                    request, naming.owner_labels("bench", "none"), timedelta(hours=1)
                ),
            ),
            timeout=10,
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            emu.advance(1)
            vms = [v for v in emu.state()["vms"] if v["qr"] == SLICE]
            serving = sorted((v["index"], v["ip"]) for v in vms if v["booted_at"])
            if len(serving) == MAX_VMS:
                break
            if loop.time() - started > 300:
                raise RuntimeError(f"only {len(serving)} of {MAX_VMS} VMs serving after 300 s")
            await asyncio.sleep(0.2)
        conn.send({"ips": [ip for _, ip in serving], "path": request.health_path})
        while True:
            command = await asyncio.to_thread(conn.recv)
            if command is None:
                break
            emu.set_scenario(SLICE, scenario.model_copy(update={"unreachable_vms": command}))
            conn.send("ok")
    finally:
        await emu.stop()


def _raise_open_files() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


class FleetProcess:
    def __init__(self, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_fleet_process, args=(child, port), daemon=True)

    async def start(self) -> tuple[list[str], str]:
        self._proc.start()
        ready = await self._recv()
        return ready["ips"], ready["path"]

    async def unreachable(self, indices: list[int]) -> None:
        self._conn.send(indices)
        assert await self._recv() == "ok"

    async def stop(self) -> None:
        if self._proc.is_alive():
            self._conn.send(None)
        await asyncio.to_thread(self._proc.join, 30)
        if self._proc.is_alive():
            self._proc.kill()

    async def _recv(self) -> Any:
        # Polled in short waits, so a fleet process that died is noticed.
        while not await asyncio.to_thread(self._conn.poll, 0.2):
            if not self._proc.is_alive():
                raise RuntimeError(f"the fleet process exited ({self._proc.exitcode})")
        return self._conn.recv()


# --------------------------------------------------------------------------- the rounds


def make_prober(settings: Settings) -> HealthProber:
    """The prober as the worker builds it: the open-file limit raised, the bound from it."""
    return health_prober(settings)


def prober_facts(prober: HealthProber) -> dict[str, Any]:
    return {"in_flight": prober.concurrency}


async def measure(runs: int) -> dict[str, Any]:
    limits = _raise_open_files()
    settings = Settings()
    timeout = settings.health.timeout.total_seconds()
    prober = make_prober(settings)
    port = free_port()
    fleet = FleetProcess(port)
    progress(f"booting {MAX_VMS} VMs in the emulator (child process)")
    started = time.monotonic()
    ips, path = await fleet.start()
    progress(f"{len(ips)} VMs serving after {time.monotonic() - started:.1f} s")
    endpoints = [VmEndpoint(node=SLICE, index=i, ip=ip) for i, ip in enumerate(ips)]
    results: list[dict[str, Any]] = []
    try:
        await prober.round(endpoints, port, path)  # warm-up, not counted
        for case in cases():
            indices = case.unreachable_indices()
            await fleet.unreachable(indices)
            seconds: list[float] = []
            healthy: list[int] = []
            for _ in range(runs):
                began = time.perf_counter()
                report = await prober.round(endpoints[: case.vms], port, path)
                seconds.append(time.perf_counter() - began)
                healthy.append(report.healthy)
            target = ALL_HEALTHY_TARGET if case.unreachable == 0 else timeout + TARGET_MARGIN
            row = {
                "vms": case.vms,
                "unreachable": case.unreachable,
                "label": case.label,
                "seconds": [round(s, 3) for s in seconds],
                "median_seconds": round(statistics.median(seconds), 3),
                "max_seconds": round(max(seconds), 3),
                "healthy": healthy,
                "expected_healthy": case.vms - len(indices),
                "target_seconds": target,
                "within_target": max(seconds) <= target,
            }
            results.append(row)
            progress(
                f"  {case.vms} VMs, {case.label}: median {row['median_seconds']:.2f} s "
                f"(target {target:g} s), healthy {healthy}"
            )
    finally:
        await fleet.stop()
    return {
        "probe_timeout_seconds": timeout,
        "open_files_limit": {"soft": limits[0], "hard": limits[1]},
        "prober": prober_facts(prober),
        "runs_per_case": runs,
        "cases": results,
    }


def render(figures: dict[str, Any]) -> str:
    rows = [
        [
            str(r["vms"]),
            r["label"],
            f"{r['median_seconds']:.2f}",
            f"{r['max_seconds']:.2f}",
            f"{r['target_seconds']:g}",
            "yes" if r["within_target"] else "NO",
            f"{r['healthy'][-1]}/{r['vms']}",
        ]
        for r in figures["cases"]
    ]
    headers = ["VMs", "case", "median s", "max s", "target s", "within", "healthy"]
    cells = [headers, *rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(headers))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(headers))) for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    limits = figures["open_files_limit"]
    return "\n".join(
        [
            f"One health round, probe timeout {figures['probe_timeout_seconds']:g} s, "
            f"{figures['runs_per_case']} runs a case; open files soft {limits['soft']}, "
            f"hard {limits['hard']}; prober {figures['prober']}",
            *lines,
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds per case (default 3)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    record = Run("tpu_health_round")
    configure(args.verbose)
    figures, out = run_for_figures(lambda: measure(args.runs))
    progress(f"raw results: {record.write(figures)}")
    print(json.dumps(figures, indent=2) if args.json else render(figures), file=out)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
