"""Figures for job reclaim's decisions: 10,000 nodes x 8 holdings against a 100,000-job view.

Run from the repository root:

    python bench/reclaim_decide.py                 # 5 repetitions in memory, 3 per database
    python bench/reclaim_decide.py --reps 3 --db-reps 1 --no-postgres

One synthetic cluster, built once from a fixed seed: 10,000 nodes (`gpu-node-00001` ...),
100,000 jobs as spur's wire `JobInfo` messages (pending, running or completing on 1-8
contiguous nodes with a hostlist nodelist, terminal with an end time, a few preempted or
requeued), keeper's memory of an earlier read (the epoch, and a `KnownJob` for every job it
saw, including finalized and live jobs that have since left the controller), and 80,000
holdings (8 per node): mostly jobs running there, a share stale (ended long ago, running
elsewhere, aged out, never seen issued, vanished while live) and some spared for other
reasons (just ended, waiting, above the watermark).

Timed, each several times (median and range):
  (d) `keeper.runtime.reclaim.views.controller_view` over the 100,000 JobInfo messages;
  (a) `keeper.domain.reclaim.epoch.observe` over that view, as a first observation (keeper knows
      no job) and as a steady one (keeper knows every job, nothing changed);
  (b) `keeper.domain.reclaim.decide.decide` over the 80,000 holdings (pure);
  (c) the same through the real memory (`keeper.store.reclaim.ReclaimMemory`, SQLite file, and
      PostgreSQL when a server binary is found): `record_observation` of the first
      100,000-job observation, `known_jobs` of the 100,000 viewed ids and of the holdings'
      ids, and `sight` once per node (first sighting: inserts; repeat: the open holdings).
Timings are printed, never asserted; raw figures go to bench/results/reclaim_decide-<UTC>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import hostlist  # noqa: E402
from google.protobuf.timestamp_pb2 import Timestamp  # noqa: E402
from run_record import Run  # noqa: E402

from keeper.domain.reclaim.decide import decide  # noqa: E402
from keeper.domain.reclaim.epoch import observe  # noqa: E402
from keeper.domain.reclaim.jobs import FINALIZED, JobState  # noqa: E402
from keeper.domain.reclaim.models import ControllerView, EpochState, Holding, KnownJob  # noqa: E402
from keeper.domain.reclaim.policy import ReclaimPolicy  # noqa: E402
from keeper.runtime.reclaim.views import controller_view  # noqa: E402
from keeper.store.reclaim import ReclaimMemory, open_reclaim_memory  # noqa: E402
from keeper.wire.spur import slurm_pb2  # noqa: E402

NODES = 10_000
PER_NODE = 8
JOBS = 100_000
FIRST_ID = 400_001  # the controller has been up a while: ids below it aged out
SEED = 20261201
S = JobState


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def _ts(value: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


class Cluster:
    """The synthetic cluster: wire jobs, keeper's earlier memory, and the holdings."""

    def __init__(self, now: datetime, seed: int = SEED) -> None:
        rng = random.Random(seed)
        self.now = now
        self.nodes = [node_name(i) for i in range(1, NODES + 1)]
        self.infos: list[slurm_pb2.JobInfo] = []
        # job id -> (state, nodes) as built, to place holdings.
        self.running_on: dict[str, list[int]] = {n: [] for n in self.nodes}
        self.ended_on: dict[str, list[int]] = {n: [] for n in self.nodes}
        self.just_ended_on: dict[str, list[int]] = {n: [] for n in self.nodes}
        self.waiting: list[int] = []
        self.active_ids: list[int] = []
        span = timedelta(days=3)
        for k in range(JOBS):
            job_id = FIRST_ID + k
            submit = now - span + span * (k / JOBS)
            roll = rng.random()
            info = slurm_pb2.JobInfo(
                job_id=job_id, name=f"train-{job_id}", user=f"u{job_id % 97}",
                submit_time=_ts(submit),
            )  # fmt: skip
            if roll < 0.15:
                info.state = S.PENDING
                self.waiting.append(job_id)
            elif roll < 0.17:
                info.state = rng.choice([S.PREEMPTED, S.REQUEUED])
                self.waiting.append(job_id)
            else:
                width = rng.randint(1, 8)
                first = rng.randrange(0, NODES - width)
                names = self.nodes[first : first + width]
                info.nodelist = hostlist.collect_hostlist(names)
                info.num_nodes = width
                info.start_time.CopyFrom(_ts(submit + timedelta(minutes=5)))
                if roll < 0.45:
                    info.state = rng.choice([S.RUNNING] * 18 + [S.COMPLETING, S.SUSPENDED])
                    self.active_ids.append(job_id)
                    for n in names:
                        self.running_on[n].append(job_id)
                else:
                    info.state = rng.choice(
                        [S.COMPLETED] * 12 + [S.FAILED, S.CANCELLED, S.TIMEOUT, S.NODE_FAIL,
                                              S.OUT_OF_MEMORY]
                    )  # fmt: skip
                    if roll < 0.46:
                        end = now - timedelta(seconds=rng.uniform(1, 100))  # within the grace
                        target = self.just_ended_on
                    else:
                        end = now - timedelta(minutes=rng.uniform(5, 600))
                        target = self.ended_on
                    info.end_time.CopyFrom(_ts(end))
                    for n in names:
                        target[n].append(job_id)
            self.infos.append(info)
        self.max_id = FIRST_ID + JOBS - 1
        # keeper's memory from before: the epoch, and jobs that aged out of the controller
        # since (most finalized; a few were live when last seen: the controller lost them).
        self.epoch = EpochState(
            epoch=1, high_id=self.max_id - 50, high_submit=now - timedelta(minutes=1),
            started_at=now - timedelta(days=30),
        )  # fmt: skip
        self.aged_out: dict[int, KnownJob] = {}
        for job_id in range(FIRST_ID - 20_000, FIRST_ID):
            live = rng.random() < 0.02
            state = S.RUNNING if live else S.COMPLETED
            self.aged_out[job_id] = KnownJob(
                job_id=job_id, epoch=1, submit_time=now - timedelta(days=4),
                finalized=state in FINALIZED, last_state=state,
                last_seen=now - timedelta(hours=2),
            )  # fmt: skip
        self.holdings = self._holdings(rng)

    def _holdings(self, rng: random.Random) -> list[Holding]:
        out: list[Holding] = []
        long_ago = self.now - timedelta(days=5)
        aged = [j for j, k in self.aged_out.items() if k.finalized]
        lost = [j for j, k in self.aged_out.items() if not k.finalized]
        for node in self.nodes:
            ids: set[int] = set(self.running_on[node][:PER_NODE])
            while len(ids) < PER_NODE:
                roll = rng.random()
                if roll < 0.55 and self.active_ids:
                    pick = rng.choice(self.active_ids)  # running elsewhere unless here
                elif roll < 0.70 and self.ended_on[node]:
                    pick = rng.choice(self.ended_on[node])  # ended long ago: stale
                elif roll < 0.72 and self.just_ended_on[node]:
                    pick = rng.choice(self.just_ended_on[node])
                elif roll < 0.80:
                    pick = rng.choice(self.waiting)
                elif roll < 0.85:
                    pick = rng.choice(aged)
                elif roll < 0.86:
                    pick = rng.choice(lost)
                elif roll < 0.88:
                    pick = self.max_id + rng.randint(1, 20)  # above the watermark
                else:
                    pick = rng.randint(FIRST_ID - 60_000, FIRST_ID - 20_001)  # never seen
                if pick in ids:
                    continue
                ids.add(pick)
            for job_id in sorted(ids):
                first_seen = self.now - timedelta(seconds=rng.uniform(30, 600))
                if job_id < FIRST_ID - 20_000:
                    first_seen = long_ago
                out.append(Holding(node=node, job_id=job_id, epoch=1, first_seen=first_seen))
        return out


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(values), 4),
        "min_s": round(min(values), 4),
        "max_s": round(max(values), 4),
        "runs_s": [round(v, 4) for v in values],
    }


def _timed(fn: Callable[[], Any], reps: int) -> tuple[list[float], Any]:
    times: list[float] = []
    out: Any = None
    for _ in range(reps):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return times, out


def _figure(times: list[float], per: int, unit: str) -> dict[str, Any]:
    fig = _stats(times)
    fig[f"per_{unit}_us"] = round(statistics.median(times) / per * 1e6, 3)
    fig["count"] = per
    return fig


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- pure parts


def pure(cluster: Cluster, reps: int) -> tuple[dict[str, Any], ControllerView, Counter[str]]:
    policy = ReclaimPolicy()
    figures: dict[str, Any] = {}
    times, view = _timed(lambda: controller_view(cluster.infos, cluster.now, {}), reps)
    figures["d_controller_view"] = _figure(times, JOBS, "job")
    _progress(f"(d) controller_view: median {statistics.median(times):.3f} s")

    skew = policy.clock_skew
    times, first = _timed(lambda: observe(view, cluster.epoch, {}, skew), reps)
    figures["a_observe_first"] = _figure(times, JOBS, "job")
    figures["a_observe_first"]["remembered"] = len(first.remember)
    figures["a_observe_first"]["new_epoch"] = first.new_epoch
    known_all = {k.job_id: k for k in first.remember}
    times, steady = _timed(lambda: observe(view, first.epoch, known_all, skew), reps)
    figures["a_observe_steady"] = _figure(times, JOBS, "job")
    figures["a_observe_steady"]["remembered"] = len(steady.remember)
    _progress(f"(a) observe: first {statistics.median(figures['a_observe_first']['runs_s']):.3f}"
              f" s, steady {statistics.median(times):.3f} s")  # fmt: skip

    epoch = first.epoch
    known = {**cluster.aged_out, **known_all}
    nodes = frozenset(cluster.nodes)

    def decide_over(holdings: list[Holding], v: ControllerView) -> list[Any]:
        return [decide(h, v, epoch, known.get(h.job_id), nodes, policy) for h in holdings]

    # As the product runs it, over all 80,000 holdings against the one view.
    times, decisions = _timed(lambda: decide_over(cluster.holdings, view), reps)
    figures["b_decide"] = _figure(times, len(cluster.holdings), "holding")
    verdicts = Counter(d.verdict.value for d in decisions)
    reasons = Counter(f"{d.verdict.value}/{d.reason.value}" for d in decisions)
    figures["b_decide"]["verdicts"] = dict(sorted(verdicts.items()))
    figures["b_decide"]["reasons"] = dict(sorted(reasons.items()))
    _progress(f"(b) decide: median {statistics.median(times):.3f} s, {dict(verdicts)}")
    return figures, view, verdicts


# --------------------------------------------------------------------------- the memory


@contextlib.contextmanager
def _postgres() -> Iterator[tuple[Any, str]]:
    """A throwaway server from the machine's own binaries, or (None, why not)."""
    try:
        from tests.postgres_server import find_pg_bin, postgres_server
    except ImportError as err:
        yield None, f"tests/postgres_server.py not importable: {err}"
        return
    if find_pg_bin() is None:
        yield None, "no PostgreSQL server binaries (initdb) on this machine"
        return
    try:
        with postgres_server() as server:
            yield server, ""
    except Exception as err:  # reported as the reason it was skipped
        yield None, f"PostgreSQL did not start: {err}"


def _through_memory(
    open_memory: Callable[[], ReclaimMemory], cluster: Cluster, view: ControllerView, reps: int
) -> dict[str, Any]:
    policy = ReclaimPolicy()
    by_node: dict[str, list[int]] = {}
    for h in cluster.holdings:
        by_node.setdefault(h.node, []).append(h.job_id)
    holding_ids = [h.job_id for h in cluster.holdings]
    runs: dict[str, list[float]] = {k: [] for k in (
        "record_observation_first", "known_jobs_view", "known_jobs_holdings",
        "sight_first", "sight_repeat", "decide_max_once", "batch_total")}  # fmt: skip
    rows = 0
    sighted = 0
    verdicts: Counter[str] = Counter()
    for rep in range(reps):
        memory = open_memory()
        try:
            started_batch = time.perf_counter()
            epoch0 = memory.epoch()
            t = time.perf_counter()
            known0 = memory.known_jobs(view.jobs)
            obs = observe(view, epoch0, known0, policy.clock_skew)
            memory.record_observation(obs)
            runs["record_observation_first"].append(time.perf_counter() - t)
            rows = len(obs.remember)
            t = time.perf_counter()
            known_view = memory.known_jobs(view.jobs)
            runs["known_jobs_view"].append(time.perf_counter() - t)
            assert len(known_view) == rows, (len(known_view), rows)
            epoch = memory.epoch()
            at = cluster.now
            for node in cluster.nodes:
                memory.register_node(node, node, "10.0.0.1", 6818, "", at)
            t = time.perf_counter()
            sighted_holdings: list[Holding] = []
            for node, ids in by_node.items():
                sighted_holdings.extend(memory.sight(node, ids, at, epoch.epoch))
            runs["sight_first"].append(time.perf_counter() - t)
            sighted = len(sighted_holdings)
            t = time.perf_counter()
            known = memory.known_jobs(holding_ids)
            runs["known_jobs_holdings"].append(time.perf_counter() - t)
            t = time.perf_counter()
            nodes = memory.known_nodes()
            decided = [
                decide(h, view, epoch, known.get(h.job_id), nodes, policy) for h in sighted_holdings
            ]
            runs["decide_max_once"].append(time.perf_counter() - t)
            runs["batch_total"].append(time.perf_counter() - started_batch)
            verdicts = Counter(d.verdict.value for d in decided)
            later = at + timedelta(seconds=30)
            t = time.perf_counter()
            for node, ids in by_node.items():
                memory.sight(node, ids, later, epoch.epoch)
            runs["sight_repeat"].append(time.perf_counter() - t)
        finally:
            memory.close()
        _progress(f"  {memory.backend} rep {rep + 1}: "
                  + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in runs.items()))  # fmt: skip
    per = {
        "record_observation_first": (rows, "job"),
        "known_jobs_view": (JOBS, "job"),
        "known_jobs_holdings": (len(holding_ids), "holding"),
        "sight_first": (NODES, "node"),
        "sight_repeat": (NODES, "node"),
        "decide_max_once": (sighted, "holding"),
        "batch_total": (sighted, "holding"),
    }
    out: dict[str, Any] = {k: _figure(v, *per[k]) for k, v in runs.items()}
    out["jobs_remembered"] = rows
    out["holdings_sighted"] = sighted
    out["verdicts"] = dict(sorted(verdicts.items()))
    # batch_total: what one intake batch of every node at once costs here, less the
    # controller read: epoch, known_jobs+observe+record_observation, sight of every node,
    # known_jobs of the holdings, known_nodes and decide.
    return out


def memory_figures(
    cluster: Cluster, view: ControllerView, reps: int, postgres: bool
) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="keeper-reclaim-bench-") as tmp:
        count = iter(range(1000))

        def sqlite() -> ReclaimMemory:
            return open_reclaim_memory(f"sqlite:///{Path(tmp) / f'reclaim-{next(count)}.db'}")

        _progress("(c) SQLite ...")
        figures["sqlite"] = _through_memory(sqlite, cluster, view, reps)
    if not postgres:
        figures["postgresql"] = {"skipped": "--no-postgres"}
        return figures
    with _postgres() as (server, why):
        if server is None:
            figures["postgresql"] = {"skipped": why}
            _progress(f"(c) PostgreSQL skipped: {why}")
            return figures
        _progress("(c) PostgreSQL ...")
        figures["postgresql"] = _through_memory(
            lambda: open_reclaim_memory(server.create_database()), cluster, view, reps
        )
    return figures


# --------------------------------------------------------------------------- output


def _line(name: str, fig: dict[str, Any]) -> str:
    per = next(k for k in fig if k.startswith("per_"))
    unit = per.removeprefix("per_").removesuffix("_us")
    return (
        f"  {name:28} median {fig['median_s']:8.3f} s  (min {fig['min_s']:.3f}, max "
        f"{fig['max_s']:.3f}, {len(fig['runs_s'])} runs)  {fig[per]:9.2f} us/{unit}"
        f"  [{fig['count']} {unit}s]"
    )


def _print(figures: dict[str, Any]) -> None:
    print(f"cluster: {NODES} nodes x {PER_NODE} holdings, {JOBS} jobs in the view")
    print("pure (domain + views):")
    for key in ("d_controller_view", "a_observe_first", "a_observe_steady", "b_decide"):
        print(_line(key, figures[key]))
    mo = figures["b_decide"]
    print(f"  verdicts: {mo['verdicts']}")
    for reason, n in mo["reasons"].items():
        print(f"    {reason:40} {n}")
    for backend in ("sqlite", "postgresql"):
        fig = figures["memory"][backend]
        if "skipped" in fig:
            print(f"memory ({backend}): skipped: {fig['skipped']}")
            continue
        print(
            f"memory ({backend}), {fig['jobs_remembered']} jobs remembered, "
            f"{fig['holdings_sighted']} holdings sighted, verdicts {fig['verdicts']}:"
        )
        for key, value in fig.items():
            if isinstance(value, dict) and "median_s" in value:
                print(_line(key, value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of the pure parts")
    parser.add_argument("--db-reps", type=int, default=3, help="repetitions per database")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    run = Run("reclaim_decide")
    now = datetime.now(UTC)
    t = time.perf_counter()
    cluster = Cluster(now)
    _progress(f"built the cluster in {time.perf_counter() - t:.1f} s")
    figures, view, _ = pure(cluster, args.reps)
    figures["memory"] = memory_figures(cluster, view, args.db_reps, not args.no_postgres)
    shape = Counter(JobState(i.state).name for i in cluster.infos)
    figures["cluster"] = {
        "nodes": NODES,
        "holdings_per_node": PER_NODE,
        "holdings": len(cluster.holdings),
        "jobs_in_view": JOBS,
        "job_states": dict(sorted(shape.items())),
        "aged_out_known": len(cluster.aged_out),
        "seed": SEED,
        "reps": args.reps,
        "db_reps": args.db_reps,
    }
    _print(figures)
    path = run.write(figures)
    print(f"raw figures: {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
