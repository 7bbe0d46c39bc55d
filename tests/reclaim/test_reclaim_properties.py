"""Property-based job reclaim: the pure rules driven through a model of the whole loop.

A controller (ids from a counter, submit times from a clock, allocations committed apart
from RUNNING, terminal aging with retention, requeues to another or the same node with a new
run attempt, wrong evictions where the old node keeps running, wipes that restart the ids),
agents that hold jobs and report them under varying spellings of their hostname (heartbeats
may be empty or duplicated; agents restart), and keeper: `observe` and a dict model of its
memory, `decide` on each holding sighted, and one reclaim driver per stale holding that
follows `steps.attempts`, reading the controller afresh and deciding again before every
cancel and every drain, and sending only on `reclaim`. Like the intake, keeper reads only the
jobs a heartbeat lists (and the ones it watches on that node), and the whole job map now and
then, so a wipe can be seen out of order: one node's reissued id first, another's later.
Release evidence is the real tally (domain/reclaim/evidence.py): heartbeats that list other
jobs, empty heartbeats while the controller runs nothing on the node (idle nodes: weak, and
reopened when the job is listed again), and the agent's completion report after a kill
(sometimes lost). No servers.

Whatever the interleaving:

- safety: no cancel is ever sent for a job that, at the moment of sending, is active on that
  node in the controller (after canonicalisation, committed or being committed), no holding
  that was live on its node when the controller was wiped is ever cancelled (a wipe may
  reissue the same id within the clock skew of the original), and no holding is quarantined
  (drained, an operator told to free it) while the controller runs its job on that node;
- liveness: once the controller is quiet (its in-flight commits done, no more operations;
  heartbeats keep coming and list every holding), every stale holding ends released (a
  cancel delivered and the agent dropped it) or quarantined (its driver drained the node).

A wipe usually begins with one full heartbeat from every agent (the tap saw every holding);
an unseen wipe comes a second after a job started on a node whose agent had not listed it
yet, so its first listing comes after the new controller reissued the id. keeper fences such
a holding by time: one first seen within a heartbeat of the new epoch's start, or before a
full read that found the new epoch (a young holding's cancel reads the whole map first).

`make test` runs a modest, derandomized number of examples. To run 10,000 deterministically:
`KEEPER_PROPERTY_EXAMPLES=10000 pytest -s tests/reclaim/test_reclaim_properties.py` (the seed,
KEEPER_PROPERTY_SEED or a fixed default, is printed; the same seed replays the same run).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from keeper.domain.reclaim.decide import decide
from keeper.domain.reclaim.epoch import observe
from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport, ReleaseTally, evidence_of
from keeper.domain.reclaim.identity import canonical_node, canonical_nodes
from keeper.domain.reclaim.jobs import ACTIVE, FINALIZED, TERMINAL, WAITING, JobState
from keeper.domain.reclaim.models import (
    ControllerView,
    Decision,
    EpochState,
    Holding,
    JobView,
    KnownJob,
    Verdict,
)
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.steps import Attempt, attempts

EXAMPLES_ENV = os.environ.get("KEEPER_PROPERTY_EXAMPLES")
EXAMPLES = int(EXAMPLES_ENV or "60")
SEED = int(os.environ.get("KEEPER_PROPERTY_SEED", "20260501"))
POLICY = ReclaimPolicy()
RETENTION = timedelta(minutes=30)
AGENT_BEAT_S = 30  # spurd's heartbeat interval
FULL_READ = timedelta(seconds=60)  # reclaim.full_read_interval
# How many heartbeats in a row a busy job map may empty: what policy.epoch_fence (2m, four of
# spurd's 30 s heartbeats) assumes.
MAX_BUSY_BEATS = 3
T0 = datetime(2026, 5, 1, tzinfo=UTC)
NODES = ("gpu-node-01", "gpu-node-02", "gpu-node-03")
# How each node's name is written: the agent picks one per heartbeat, the controller keeps
# the one it registered with.
SPELLINGS = {n: (n, n.upper(), f"{n}.cluster.local", f"{n.upper()}.Cluster.Local.") for n in NODES}
S = JobState


# ---- the controller and its agents ---------------------------------------------------------


@dataclass
class CJob:
    job_id: int
    submit: datetime
    state: JobState = S.PENDING
    # Committed allocation, as the controller writes the names; `target` is where the run
    # goes before the commit.
    nodes: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    end: datetime | None = None
    attempt: int = 0


@dataclass
class Agent:
    node: str  # canonical, for the model's bookkeeping only
    # job id -> the run attempt this agent holds, tagged with the controller incarnation.
    held: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    boot: int = 1


@dataclass
class World:
    clock: datetime = T0
    incarnation: int = 1
    next_id: int = 1
    jobs: dict[int, CJob] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=lambda: {n: Agent(n) for n in NODES})
    registered_as: dict[str, str] = field(default_factory=lambda: {n: n for n in NODES})
    # (node, incarnation, job id, attempt) live on that node when the controller was wiped.
    pre_wipe_live: set[tuple[str, int, int, int]] = field(default_factory=set)
    cancels: list[str] = field(default_factory=list)
    # When the last wipe was one the tap did not see coming (a job had just started).
    unseen_wipe_at: datetime | None = None
    # Empty heartbeats in a row of an agent that holds jobs (a busy map).
    empty_run: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NODES, 0))
    # When each agent last beat: spurd beats every AGENT_BEAT_S whatever else happens.
    last_beat: dict[str, datetime] = field(default_factory=lambda: dict.fromkeys(NODES, T0))

    def tick(self, seconds: int) -> None:
        self.clock += timedelta(seconds=seconds)

    def active_on(self, job_id: int, node: str) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ACTIVE:
            return False
        return node in canonical_nodes(job.nodes or job.target)

    def view(self) -> ControllerView:
        return ControllerView(
            read_at=self.clock,
            jobs={
                j.job_id: JobView(
                    job_id=j.job_id,
                    state=j.state,
                    submit_time=j.submit,
                    end_time=j.end,
                    nodes=canonical_nodes(j.nodes),
                    nodelist=",".join(j.nodes),
                )
                for j in self.jobs.values()
            },
        )

    def hold(self, job: CJob, nodes: tuple[str, ...]) -> None:
        for node in nodes:
            self.agents[node].held[job.job_id] = (self.incarnation, job.job_id, job.attempt)

    def release(self, job: CJob, leak: bool) -> None:
        # A leak: the agent keeps the reservation the controller is done with (the failure).
        if leak:
            return
        for name in job.nodes:
            held = self.agents[canonical_node(name)].held
            if held.get(job.job_id, (0, 0, 0))[2] == job.attempt:
                del held[job.job_id]

    def cancel(self, node: str, job_id: int, delivered: bool) -> bool:
        """An agent cancel, checked for safety at the moment it is sent; True when the agent
        dropped a job it held."""
        assert not self.active_on(job_id, node), (
            f"cancel of job {job_id} on {node} while the controller runs it there"
        )
        held = self.agents[node].held.get(job_id)
        if held is not None:
            assert (node, *held) not in self.pre_wipe_live, (
                f"cancel of job {job_id} on {node}, a run live there before the wipe"
            )
        self.cancels.append(f"{node}:{job_id}")
        return delivered and self.agents[node].held.pop(job_id, None) is not None


# ---- keeper --------------------------------------------------------------------------------


@dataclass
class Driver:
    """One reclaim workflow: the attempts left, and the release evidence so far."""

    holding: Holding
    plan: list[Attempt]
    step: int = 0
    tally: ReleaseTally = field(default_factory=ReleaseTally)
    drained: bool = False
    # keeper's last verdict on it was quarantine (a completion report then keeps the fence).
    fenced: bool = False
    outcome: str = ""


@dataclass
class Keeper:
    world: World
    epoch: EpochState = field(default_factory=EpochState)
    known: dict[int, KnownJob] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=lambda: set(NODES))
    open: dict[tuple[str, int], Holding] = field(default_factory=dict)
    # Holdings released on evidence that keeps the fence (a completion report, an idle
    # node's empty heartbeats): a later listing reopens them, fence and all.
    weak: dict[tuple[str, int], Holding] = field(default_factory=dict)
    last_sighting: dict[tuple[str, int], int] = field(default_factory=dict)
    drivers: dict[tuple[str, int], Driver] = field(default_factory=dict)
    finished: list[Driver] = field(default_factory=list)
    last_full_read: datetime | None = None

    def read(self, job_ids: set[int] | None) -> ControllerView:
        """A fresh read of the controller (the jobs `job_ids` names, or every job), folded
        into the memory before anything decides."""
        view = self.world.view()
        if job_ids is None:
            self.last_full_read = view.read_at
        if job_ids is not None:
            view = ControllerView(
                read_at=view.read_at, jobs={j: v for j, v in view.jobs.items() if j in job_ids}
            )
        obs = observe(view, self.epoch, self.known, POLICY.clock_skew)
        if obs.new_epoch:
            self.known = {}
        self.epoch = obs.epoch
        self.known.update({k.job_id: k for k in obs.remember})
        return view

    def decide(self, holding: Holding, view: ControllerView) -> Decision:
        known = self.known.get(holding.job_id)
        decision = decide(holding, view, self.epoch, known, self.nodes, POLICY)
        if decision.verdict is Verdict.QUARANTINE:
            # Quarantine drains the node and asks an operator to free the job.
            assert not self.world.active_on(holding.job_id, holding.node), (
                f"quarantine of job {holding.job_id} on {holding.node} while the controller "
                f"runs it there ({decision.reason.value})"
            )
        return decision

    def heartbeat(self, hostname: str, reported: list[int], full: bool = False) -> None:
        node = canonical_node(hostname)
        at = self.world.clock
        # The intake reads every job once per full_read_interval, whatever the batch holds.
        last = self.last_full_read
        full = full or last is None or at - last >= FULL_READ
        if reported:
            watched = {k[1] for k in self.drivers if k[0] == node}
            view = self.read(None if full else set(reported) | watched)
            for job_id in sorted(set(reported)):
                key = (node, job_id)
                if key not in self.open:
                    self.open[key] = self.weak.pop(key, None) or self._sighting(key, at)
                if key in self.drivers:
                    continue
                decision = self.decide(self.open[key], view)
                if decision.stale:
                    driver = Driver(self.open[key], attempts(POLICY))
                    driver.drained = driver.fenced = decision.verdict is Verdict.QUARANTINE
                    self.drivers[key] = driver
        active_here = {
            j.job_id
            for j in self.world.jobs.values()
            if j.state in ACTIVE and node in canonical_nodes(j.nodes)
        }
        whole = active_here <= set(reported)
        for key, driver in list(self.drivers.items()):
            if key[0] != node or at < driver.holding.first_seen:
                continue
            evidence = evidence_of(reported, key[1], node_runs_nothing=not active_here)
            if evidence is BeatEvidence.SILENT or (evidence is BeatEvidence.ABSENT and not whole):
                continue
            self.evidence(key, BeatReport(evidence=evidence, at=at))

    def _sighting(self, key: tuple[str, int], at: datetime) -> Holding:
        sighting = self.last_sighting.get(key, 0) + 1
        self.last_sighting[key] = sighting
        return Holding(node=key[0], job_id=key[1], epoch=self.epoch.epoch, first_seen=at,
                       sighting=sighting)  # fmt: skip

    def evidence(self, key: tuple[str, int], report: BeatReport) -> None:
        driver = self.drivers.get(key)
        if driver is None:
            return
        driver.tally = driver.tally.add(report)
        release = driver.tally.release(POLICY)
        if release is not None:
            self.close(key, "released-fenced" if release.keeps_fence(driver.fenced) else "released")

    def close(self, key: tuple[str, int], outcome: str) -> None:
        driver = self.drivers.pop(key)
        driver.outcome = outcome
        self.finished.append(driver)
        if outcome == "released":
            del self.open[key]
        elif outcome == "released-fenced":
            self.weak[key] = self.open.pop(key)
        # spared: the holding stays open with its fence, only without a driver.

    def drive(self, key: tuple[str, int], delivered: bool, reported: bool) -> None:
        """The driver's timer fired: read afresh, decide again; cancel only on reclaim, and
        drain only on a stale verdict read in the same step."""
        driver = self.drivers[key]
        # A holding no full read has met yet gets one before its cancel (activities/reclaim).
        last = self.last_full_read
        unchecked = last is None or last <= driver.holding.first_seen
        decision = self.decide(driver.holding, self.read(None if unchecked else {key[1]}))
        if decision.verdict is Verdict.SPARE:
            self.close(key, "spared")
            return
        driver.fenced = decision.verdict is Verdict.QUARANTINE
        if decision.verdict is Verdict.QUARANTINE or driver.step >= len(driver.plan):
            driver.drained = True
            return
        dropped = self.world.cancel(key[0], key[1], delivered)
        driver.step += 1
        if dropped and reported:  # the agent reaped it and told its controller
            self.evidence(key, BeatReport(evidence=BeatEvidence.DONE, at=self.world.clock))


# ---- operations ----------------------------------------------------------------------------

PICK = st.integers(0, 10_000)
SUBMIT = st.tuples(st.just("submit"), st.booleans())
DISPATCH = st.tuples(st.just("dispatch"), PICK, PICK, st.integers(1, 2), st.booleans())
COMMIT = st.tuples(st.just("commit"), PICK)
FINISH = st.tuples(st.just("finish"), PICK, st.booleans(), st.sampled_from(sorted(TERMINAL)))
REQUEUE = st.tuples(st.just("requeue"), PICK, st.booleans())
BEAT = st.tuples(st.just("beat"), PICK, PICK, st.booleans(), st.booleans(), st.booleans())
DRIVE = st.tuples(st.just("drive"), PICK, st.booleans(), st.booleans())
# A wipe that reissues a live job's id moments after its submission: the new job gets the
# same id less than the clock skew (but more than a millisecond) later, on another node.
QUICK_WIPE = st.tuples(st.just("quick-wipe"), PICK, PICK)
# A wipe a second after a job started on a node whose agent had not yet listed it: the tap
# never saw the holding before the wipe, and the new controller reissues its id elsewhere.
UNSEEN_WIPE = st.tuples(st.just("unseen-wipe"), PICK, PICK)
RESTART = st.tuples(st.just("restart"), PICK, st.booleans(), PICK)
TICK = st.tuples(st.just("tick"), st.integers(3, 4000))
# Weighted by repetition: the steps that make and find stale holdings come often, wipes,
# restarts and aging now and then.
_BY_KIND = {"submit": SUBMIT, "dispatch": DISPATCH, "commit": COMMIT, "finish": FINISH,
            "requeue": REQUEUE, "beat": BEAT, "drive": DRIVE, "tick": TICK, "restart": RESTART,
            "age": st.just(("age",)), "wipe": st.just(("wipe",)), "quick-wipe": QUICK_WIPE,
            "unseen-wipe": UNSEEN_WIPE, "full-read": st.just(("full-read",))}  # fmt: skip
_WEIGHTS = {"submit": 4, "dispatch": 4, "commit": 2, "finish": 3, "requeue": 2, "beat": 8,
            "drive": 6, "tick": 3, "restart": 1, "age": 1, "wipe": 1, "quick-wipe": 1,
            "unseen-wipe": 1, "full-read": 1}  # fmt: skip
OPS = st.sampled_from([k for k, n in _WEIGHTS.items() for _ in range(n)]).flatmap(
    lambda kind: _BY_KIND[kind]
)


def _pick(items: list, index: int):  # type: ignore[type-arg]
    return items[index % len(items)] if items else None


def _beat(
    world: World, keeper: Keeper, node: str, spelling: int, empty: bool, full: bool = False
) -> None:
    # An empty beat of an agent that holds jobs is spurd's busy map; of one that holds
    # nothing, an idle node's ordinary heartbeat.
    held = sorted(world.agents[node].held)
    if empty and held and world.empty_run[node] >= MAX_BUSY_BEATS:
        empty = False  # a busy map empties a heartbeat now and then, not four in a row
    world.empty_run[node] = world.empty_run[node] + 1 if empty and held else 0
    reported = [] if empty else held
    world.last_beat[node] = world.clock
    keeper.heartbeat(SPELLINGS[node][spelling % 4], reported, full)


def _cadence(world: World, keeper: Keeper) -> None:
    """Every agent whose last heartbeat is AGENT_BEAT_S old beats now, listing what it holds:
    between the steps a test draws, spurd's own rhythm goes on."""
    for node in NODES:
        if world.clock - world.last_beat[node] >= timedelta(seconds=AGENT_BEAT_S):
            _beat(world, keeper, node, 0, empty=False)


def apply(world: World, keeper: Keeper, op: tuple) -> None:  # type: ignore[type-arg]
    kind = op[0]
    world.tick(3)  # every step takes time: ids grow with submit times within an incarnation
    _cadence(world, keeper)
    if kind == "submit":
        if op[1]:
            world.next_id += 1  # an array parent: the id is consumed, never stored
        world.jobs[world.next_id] = CJob(world.next_id, world.clock)
        world.next_id += 1
    elif kind == "dispatch":
        job = _pick([j for j in world.jobs.values() if j.state in WAITING], op[1])
        if job is None:
            return
        first = op[2] % len(NODES)
        nodes = tuple(NODES[(first + i) % len(NODES)] for i in range(op[3]))
        job.state, job.attempt, job.end = S.RUNNING, job.attempt + 1, None
        job.target = tuple(world.registered_as[n] for n in nodes)
        job.nodes = job.target if op[4] else ()
        world.hold(job, nodes)
    elif kind == "commit":
        job = _pick([j for j in world.jobs.values() if j.state in ACTIVE and not j.nodes], op[1])
        if job is not None:
            job.nodes = job.target
    elif kind in ("finish", "requeue"):
        job = _pick([j for j in world.jobs.values() if j.state in ACTIVE and j.nodes], op[1])
        if job is None:
            return
        # A requeue with a leak is a wrong eviction: the old nodes keep running the old run.
        world.release(job, leak=op[2])
        job.state = op[3] if kind == "finish" else S.REQUEUED
        job.end = world.clock
    elif kind == "age":
        for job in list(world.jobs.values()):
            if job.state in FINALIZED and job.end and world.clock - job.end > RETENTION:
                del world.jobs[job.job_id]
    elif kind == "wipe":
        _wipe(world, keeper)
    elif kind in ("quick-wipe", "unseen-wipe"):
        unseen = kind == "unseen-wipe"
        if unseen:
            if world.next_id <= 2:
                return  # nothing was ever issued for a new epoch to show against
            keeper.read(None)  # the intake's last full read before the job starts
        world.jobs[world.next_id] = job = CJob(world.next_id, world.clock)
        world.next_id += 1
        first = NODES[op[1] % len(NODES)]
        job.state, job.attempt = S.RUNNING, 1
        job.nodes = job.target = (world.registered_as[first],)
        world.hold(job, (first,))
        _wipe(world, keeper, seen=not unseen)
        # The new controller issues the same ids again, within the skew of the originals
        # (or, unseen, a second later).
        world.clock += timedelta(seconds=1) if unseen else timedelta(milliseconds=5)
        while world.next_id <= job.job_id:
            world.jobs[world.next_id] = CJob(world.next_id, world.clock)
            world.next_id += 1
        namesake = world.jobs[job.job_id]
        other = NODES[(op[1] + 1 + op[2] % (len(NODES) - 1)) % len(NODES)]
        namesake.state, namesake.attempt = S.RUNNING, 1
        namesake.nodes = namesake.target = (world.registered_as[other],)
        world.hold(namesake, (other,))
    elif kind == "full-read":
        keeper.read(None)
    elif kind == "beat":
        node = _pick(list(NODES), op[1])
        _beat(world, keeper, node, op[2], empty=op[3], full=op[5])
        if op[4]:  # the same heartbeat again
            _beat(world, keeper, node, op[2], empty=op[3])
    elif kind == "drive":
        key = _pick(sorted(keeper.drivers), op[1])
        if key is not None:
            keeper.drive(key, delivered=op[2], reported=op[3])
    elif kind == "restart":
        node = _pick(list(NODES), op[1])
        agent = world.agents[node]
        agent.boot += 1
        # It registers again, perhaps under another spelling of its name; jobs committed
        # before keep the name they were committed with.
        world.registered_as[node] = SPELLINGS[node][op[3] % 4]
        if op[2]:  # the restart took the agent's runs with it
            agent.held.clear()
    elif kind == "tick":
        if op[1] > AGENT_BEAT_S:
            # Agents beat every 30 s whatever else happens: over a long pause each lists
            # what it holds at least once, so keeper reads every job an agent holds while
            # the controller still has it (a job cannot run and age out unseen).
            for node in NODES:
                _beat(world, keeper, node, 0, empty=False)
        world.tick(op[1])


def _wipe(world: World, keeper: Keeper, seen: bool = True) -> None:
    if world.unseen_wipe_at is not None and (
        keeper.last_full_read is None or keeper.last_full_read <= world.unseen_wipe_at
    ):
        # Two wipes within one full read, the first hiding a job that had just started, leave
        # no trace of the first in the job map: keeper's limit (docs/reclaim.md). The model
        # keeps wipes a full read apart.
        keeper.read(None)
    world.unseen_wipe_at = None if seen else world.clock
    for node in NODES if seen else ():  # the tap saw every holding before the wipe
        _beat(world, keeper, node, 0, empty=False)
    for node, agent in world.agents.items():
        world.pre_wipe_live |= {
            (node, *held) for job_id, held in agent.held.items() if world.active_on(job_id, node)
        }
    world.jobs, world.next_id = {}, 1
    world.incarnation += 1


def quiet(world: World, keeper: Keeper) -> None:
    """The controller finishes its in-flight commits and goes quiet; heartbeats keep coming,
    listing every holding, and every driver's timer fires, until nothing changes."""
    for job in world.jobs.values():
        if job.state in ACTIVE and not job.nodes:
            job.nodes = job.target
    rounds = len(attempts(POLICY)) + POLICY.release_beats + 4
    for node in NODES:  # spurd's next beat, within its 30 s of the last step
        _beat(world, keeper, node, 0, empty=False)
    for _ in range(rounds):
        world.tick(int(max(POLICY.end_grace, POLICY.retry_max).total_seconds()) + 1)
        keeper.read(None)  # the intake's periodic full read (reclaim.full_read_interval)
        for node in NODES:
            _beat(world, keeper, node, 0, empty=False)
        for key in sorted(keeper.drivers):
            if key in keeper.drivers:
                keeper.drive(key, delivered=True, reported=True)


def stale(world: World, node: str, job_id: int) -> bool:
    """Ground truth: the controller is done with this node's run of the job. A waiting job may
    be on its way here (decide rule 4 spares it, and the quiet controller never dispatches)."""
    job = world.jobs.get(job_id)
    held = world.agents[node].held[job_id]
    if held[0] != world.incarnation or job is None:
        return True
    if job.state in WAITING:
        return False
    return job.state in TERMINAL or node not in canonical_nodes(job.nodes)


_printed = itertools.count()


def _settings():  # type: ignore[no-untyped-def]
    common = {
        "max_examples": EXAMPLES,
        "deadline": None,
        "database": None,
        "suppress_health_check": [HealthCheck.too_slow],
        "print_blob": True,
    }
    if EXAMPLES_ENV:
        return settings(**common)
    return settings(derandomize=True, **common)


@seed(SEED)
@_settings()
@given(
    ops=st.lists(OPS, min_size=40, max_size=160),
    spelled=st.lists(st.integers(0, 3), min_size=len(NODES), max_size=len(NODES)),
)
def test_reclaim_is_safe_and_live(ops: list[tuple], spelled: list[int]) -> None:  # type: ignore[type-arg]
    if EXAMPLES_ENV and next(_printed) == 0:
        print(f"reclaim properties: {EXAMPLES} examples, KEEPER_PROPERTY_SEED={SEED}")
    world = World()
    world.registered_as = {n: SPELLINGS[n][i] for n, i in zip(NODES, spelled, strict=True)}
    keeper = Keeper(world)
    for op in ops:
        apply(world, keeper, op)  # safety is asserted at every cancel
    quiet(world, keeper)
    for node, agent in world.agents.items():
        for job_id in sorted(agent.held):
            if not stale(world, node, job_id):
                continue
            driver = keeper.drivers.get((node, job_id))
            note(f"left: {node} job {job_id} held {agent.held[job_id]}, driver {driver}")
            assert driver is not None and driver.drained, (
                f"stale holding of job {job_id} on {node} neither released nor quarantined"
            )
