"""What a job's seeded randomness decides once, at launch: names, hosts, culprits.

Everything random about a job comes from one `random.Random(seed)`, drawn here in a fixed
order, so the same seed always gives the same hashes, worker ids and failing shard.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from emulators.iris.scenarios import Scenario

MAX_ATTEMPTS = 2  # the scenarios retry at most once (killed-retry)


def context_name(job_name: str) -> str:
    """The zephyr context name a job's children carry: its last path part, sanitised."""
    tail = job_name.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^a-z0-9-]+", "-", tail.lower()).strip("-") or "job"


@dataclass(frozen=True)
class Plan:
    ctx: str
    hashes: tuple[str, ...]  # the 8-hex context hash, one per attempt
    root_host: str
    coord_hosts: tuple[str, ...]  # per attempt
    worker_hosts: tuple[str, ...]  # per worker index; a retry lands on the same workers
    culprit_worker: int  # the worker whose shard fails, straggles or runs out of memory
    culprit_shard: int
    boot_offsets: tuple[float, ...]  # per host in `hosts`: seconds it booted before launch

    @property
    def hosts(self) -> tuple[str, ...]:
        return (self.root_host, *self.coord_hosts, *self.worker_hosts)

    def group(self, attempt: int, role: str, pipeline: int = 0) -> str:
        return f"zephyr-{self.ctx}-{self.hashes[attempt]}-p{pipeline}-a{attempt}-{role}"

    def execution_id(self, attempt: int, pipeline: int = 0) -> str:
        return f"{self.ctx}-{self.hashes[attempt]}-p{pipeline}"

    def zephyr_worker_id(self, attempt: int, index: int, pipeline: int = 0) -> str:
        return f"{self.group(attempt, 'workers', pipeline)}-{index}"


def make_plan(job_name: str, scenario: Scenario, seed: int) -> Plan:
    rng = random.Random(seed)
    hashes: list[str] = []
    while len(hashes) < MAX_ATTEMPTS:
        candidate = f"{rng.getrandbits(32):08x}"
        if candidate not in hashes:
            hashes.append(candidate)
    pool = rng.sample(range(100, 1000), scenario.workers + 1 + MAX_ATTEMPTS)
    root_host = f"iris-worker-{pool[0]}"
    coord_hosts = tuple(f"iris-worker-{n}" for n in pool[1 : 1 + MAX_ATTEMPTS])
    worker_hosts = tuple(f"iris-worker-{n}" for n in pool[1 + MAX_ATTEMPTS :])
    culprit_worker = rng.randrange(scenario.workers)
    culprit_shard = rng.randrange(scenario.stages[0].shards)
    hosts = 1 + MAX_ATTEMPTS + scenario.workers
    boots = tuple(3600.0 + rng.uniform(0, 86_400) for _ in range(hosts))
    return Plan(
        ctx=context_name(job_name),
        hashes=tuple(hashes),
        root_host=root_host,
        coord_hosts=coord_hosts,
        worker_hosts=worker_hosts,
        culprit_worker=culprit_worker,
        culprit_shard=culprit_shard,
        boot_offsets=boots,
    )
