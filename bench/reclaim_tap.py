"""Figures for keeper's heartbeat tap: heartbeats per second it forwards and the latency it adds.

Run from the repository root:

    python bench/reclaim_tap.py                       # 50 agents x 200 beats, 2 rounds
    python bench/reclaim_tap.py --agents 20 --beats 50 --rounds 1

Three processes: a controller (a minimal `slurm.SlurmController` that answers Heartbeat with an
empty response, as spur's does for a known node), the tap (runtime/reclaim/tap.py, forwarding
to that controller, its observer counting events), and this one, which plays the agents. Each
agent has its own connection and sends HeartbeatRequests shaped like spurd's (hostname, load,
free memory, 8 running job ids, a JWT-sized node token, a WireGuard key, k0s status) back to
back. Real agents beat once per 30 s on a fresh channel; back-to-back beats on a kept channel
measure the forwarding itself rather than connection set-up.

Each round runs the same load twice, agents -> controller (direct) and agents -> tap ->
controller (tapped), then one agent alone each way for the unloaded latency. Per-call latency
is measured in the agents' process from send to answer. Timings are printed, never asserted;
the raw figures go to bench/results/reclaim_tap-<UTC time>.json (bench/run_record.py).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import grpc  # noqa: E402
from run_record import Run  # noqa: E402

from keeper.runtime.reclaim.tap import HeartbeatTap, TapEvent  # noqa: E402
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc  # noqa: E402

RUNNING_JOBS = 8
# Each agent gets a connection of its own, as separate nodes would.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def heartbeat(agent: int) -> bytes:
    return slurm_pb2.HeartbeatRequest(
        hostname=f"gpu-node-{agent:04d}",
        cpu_load=1375,
        free_memory_mb=412_331,
        running_jobs=[
            slurm_pb2.RunningJobStatus(job_id=100_000 + agent * RUNNING_JOBS + j)
            for j in range(RUNNING_JOBS)
        ],
        node_token="eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "x" * 160 + "." + "s" * 43,
        wg_pubkey="q" * 43 + "=",
        k0s_status=slurm_pb2.K0sNodeStatus(
            unit_active=True, restart_count=0, install_duration_seconds=41
        ),
    ).SerializeToString()


# --------------------------------------------------------------------------- the servers


class _Controller(slurm_pb2_grpc.SlurmControllerServicer):
    async def Heartbeat(
        self, request: slurm_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> slurm_pb2.HeartbeatResponse:
        return slurm_pb2.HeartbeatResponse()


async def _controller(pipe: Connection) -> None:
    server = grpc.aio.server()
    slurm_pb2_grpc.add_SlurmControllerServicer_to_server(_Controller(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    pipe.send(port)
    await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
    await server.stop(None)
    pipe.send(None)


async def _tap(pipe: Connection, upstream: str) -> None:
    hostnames: set[str] = set()

    async def observe(event: TapEvent) -> None:
        hostnames.add(event.message.hostname)

    tap = HeartbeatTap(upstream, observe, host="127.0.0.1")
    await tap.start()
    pipe.send(tap.port)
    await asyncio.get_running_loop().run_in_executor(None, pipe.recv)
    await tap.drained()
    counters = tap.counters
    await tap.stop(None)
    pipe.send(
        {
            "forwarded": counters.forwarded,
            "observed": counters.observed,
            "dropped": counters.dropped,
            "observer_errors": counters.observer_errors,
            "decode_errors": counters.decode_errors,
            "distinct_hostnames": len(hostnames),
        }
    )


def _serve(kind: str, pipe: Connection, upstream: str) -> None:
    asyncio.run(_controller(pipe) if kind == "controller" else _tap(pipe, upstream))


class _Process:
    def __init__(self, kind: str, upstream: str = "") -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(kind, child, upstream), daemon=True)
        self.process.start()
        self.port: int = self.pipe.recv()

    def stop(self) -> Any:
        self.pipe.send("stop")
        answer = self.pipe.recv() if self.pipe.poll(30) else None
        self.process.join(30)
        return answer


# --------------------------------------------------------------------------- the agents


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _load(target: str, agents: int, beats: int) -> dict[str, Any]:
    channels = [grpc.aio.insecure_channel(target, options=OWN_CONNECTION) for _ in range(agents)]
    try:
        calls = [c.unary_unary("/slurm.SlurmController/Heartbeat") for c in channels]
        # One beat each first, so connection set-up is not timed.
        await asyncio.gather(*(call(heartbeat(i), timeout=10) for i, call in enumerate(calls)))
        latencies: list[float] = []

        async def agent(index: int) -> None:
            call, payload = calls[index], heartbeat(index)
            for _ in range(beats):
                sent = time.perf_counter()
                await call(payload, timeout=10)
                latencies.append(time.perf_counter() - sent)

        started = time.perf_counter()
        await asyncio.gather(*(agent(i) for i in range(agents)))
        elapsed = time.perf_counter() - started
    finally:
        for channel in channels:
            await channel.close()
    return {
        "agents": agents,
        "beats": len(latencies),
        "seconds": round(elapsed, 3),
        "beats_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(_percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(_percentile(latencies, 0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 3),
    }


def _added(direct: dict[str, Any], tapped: dict[str, Any]) -> dict[str, float]:
    return {
        "p50_ms": round(tapped["p50_ms"] - direct["p50_ms"], 3),
        "p99_ms": round(tapped["p99_ms"] - direct["p99_ms"], 3),
        "throughput_ratio": round(tapped["beats_per_s"] / direct["beats_per_s"], 3),
    }


async def _measure(args: argparse.Namespace, controller: str, tap: str) -> list[dict[str, Any]]:
    rounds = []
    for number in range(1, args.rounds + 1):
        loaded_direct = await _load(controller, args.agents, args.beats)
        loaded_tapped = await _load(tap, args.agents, args.beats)
        alone_direct = await _load(controller, 1, args.beats)
        alone_tapped = await _load(tap, 1, args.beats)
        rounds.append(
            {
                "round": number,
                "loaded": {
                    "direct": loaded_direct,
                    "tapped": loaded_tapped,
                    "added": _added(loaded_direct, loaded_tapped),
                },
                "alone": {
                    "direct": alone_direct,
                    "tapped": alone_tapped,
                    "added": _added(alone_direct, alone_tapped),
                },
            }
        )
        print(f"round {number} done", file=sys.stderr, flush=True)
    return rounds


def _print(rounds: list[dict[str, Any]], counters: dict[str, Any]) -> None:
    for r in rounds:
        for load in ("loaded", "alone"):
            d, t, a = r[load]["direct"], r[load]["tapped"], r[load]["added"]
            print(
                f"round {r['round']} {load:6} ({d['agents']} agents, {d['beats']} beats): "
                f"direct {d['beats_per_s']:.0f}/s p50 {d['p50_ms']:.2f} ms p99 {d['p99_ms']:.2f} ms"
                f" | tapped {t['beats_per_s']:.0f}/s p50 {t['p50_ms']:.2f} ms"
                f" p99 {t['p99_ms']:.2f} ms | added p50 {a['p50_ms']:+.2f} ms"
                f" p99 {a['p99_ms']:+.2f} ms, throughput x{a['throughput_ratio']:.2f}"
            )
    print(f"tap counters: {counters}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--beats", type=int, default=200, help="heartbeats per agent per phase")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    run = Run("reclaim_tap")
    controller = _Process("controller")
    upstream = f"127.0.0.1:{controller.port}"
    tap = _Process("tap", upstream)
    try:
        rounds = asyncio.run(_measure(args, upstream, f"127.0.0.1:{tap.port}"))
    finally:
        counters = tap.stop()
        controller.stop()
    _print(rounds, counters)
    path = run.write(
        {
            "agents": args.agents,
            "beats_per_agent": args.beats,
            "running_jobs_per_beat": RUNNING_JOBS,
            "heartbeat_bytes": len(heartbeat(0)),
            "rounds": rounds,
            "tap_counters": counters,
        }
    )
    print(f"raw figures: {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
