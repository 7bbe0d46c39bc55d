"""Two, then four `keeper worker` processes on one runner queue and one PostgreSQL store:
one is SIGKILLed while it runs provider deletes, and every deletion still finishes, nothing
is left behind, and each record's lane is written exactly once per step.

KEEPER_SCALE_OUT_RUNNERS=200 runs 200 runners per batch instead of 10 and 12 (the suite leaves
it unset: a heavier variant, minutes on two cores). bench/runner_scaling.py measures the
throughput of 1, 2 and 4 such workers.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from emulators.provider import state as provider_state
from keeper.domain.runners.models import DeletionOutcome, DeletionResult, RunnerRecord
from keeper.domain.runners.status import InstanceStatus
from tests.e2e_support import dev_address
from tests.harness import env_flag
from tests.postgres_server import PostgresServer
from tests.runners.world import FAST_POLICY, TOKEN, RunnerWorld, runner_world
from tests.worker_processes import (
    WorkerFleet,
    WorkerProcess,
    ancestor_among,
    until_polling,
    write_worker_config,
)

pytestmark = pytest.mark.e2e

PROVIDER_ACTIVITY = "runners.provider_delete"
# Long enough that the kill lands inside provider calls, short enough for the suite.
PROVIDER_SECONDS = 1.0
# A lost provider attempt is noticed after one heartbeat timeout; its lease (the call's
# timeout plus the margin) runs out a few seconds later, and another worker retries it.
POLICY = FAST_POLICY.model_copy(
    update={"provider_timeout": timedelta(seconds=6), "provider_heartbeat": timedelta(seconds=2)}
)
LEASE_MARGIN = "200ms"
# No workflow cache, so no sticky queues: every workflow task goes to the shared queue and
# replays its (short) history on whichever worker takes it, and the killed worker's
# deletions do not wait out the SDK's 10 s sticky schedule-to-start timeout first.
NO_STICKY_CACHE = 0
LANE = [
    (None, "running"),
    ("running", "pending_delete"),
    ("pending_delete", "deleting"),
    ("deleting", "deleted"),
]
RUNNERS_OVERRIDE = int(os.environ.get("KEEPER_SCALE_OUT_RUNNERS", "0"))


@pytest.fixture
def pg_url(pg_server: PostgresServer | None) -> str:
    """A fresh PostgreSQL database: the store several worker hosts would share."""
    if pg_server is None:
        message = "PostgreSQL server binaries not found (Debian: apt-get install postgresql)"
        if env_flag("KEEPER_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    return pg_server.create_database()


def runner_settings(world: RunnerWorld, tmp_path: Path) -> dict[str, Any]:
    token_file = tmp_path / "github-token"
    token_file.write_text(TOKEN + "\n")
    return {
        "store_url": world.store.engine.url.render_as_string(hide_password=False),
        "github": {"api_url": world.github.url, "token_file": str(token_file)},
        "provider": {"config_file": str(world.provider_config), "lease_margin": LEASE_MARGIN},
        "reconcile_interval": "1h",
        # What every deletion the fleet runs reads at its start (runners.policy).
        "deletion": POLICY.model_dump(mode="json"),
    }


async def started_activities(
    client: Client, handles: list[WorkflowHandle[Any, DeletionResult]]
) -> dict[str, Counter[str]]:
    """Activity attempts running now, by worker identity and activity type."""
    descs = await asyncio.gather(*(h.describe() for h in handles))
    running: dict[str, Counter[str]] = {}
    for desc in descs:
        for pending in desc.raw_description.pending_activities:
            if pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                by_type = running.setdefault(pending.last_worker_identity, Counter())
                by_type[pending.activity_type.name] += 1
    return running


def provider_parents(world: RunnerWorld, fleet: WorkerFleet) -> Counter[int]:
    """Provider processes running now, by the worker process that started them."""
    pids = {w.pid for w in fleet.live}
    running = [
        c
        for c in provider_state.invocations(world.provider_config, command="DeleteInstance")
        if c.get("ended") is None
    ]
    return Counter(p for c in running if (p := ancestor_among(c["pid"], pids)) is not None)


async def victim_in_provider_calls(
    world: RunnerWorld,
    client: Client,
    fleet: WorkerFleet,
    handles: list[WorkflowHandle[Any, DeletionResult]],
) -> WorkerProcess:
    """A worker running two provider processes and no activity but provider deletes: killed
    then, its lost attempts are retried after a heartbeat timeout, not after a store call's
    30 s start-to-close timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    by_identity = {w.identity: w for w in fleet.live}
    while loop.time() < deadline:
        activities = await started_activities(client, handles)
        processes = await asyncio.to_thread(provider_parents, world, fleet)
        for identity, by_type in activities.items():
            worker = by_identity.get(identity)
            if worker and processes[worker.pid] >= 2 and set(by_type) == {PROVIDER_ACTIVITY}:
                return worker
        # Each look describes every open deletion: often enough to catch a second of
        # provider calls, rarely enough to leave the server's cores to the workers.
        await asyncio.sleep(0.2)
    raise AssertionError(f"no worker was ever in provider calls alone:\n{fleet.logs()}")


def lane_written_once(world: RunnerWorld, name: str) -> list[str]:
    """What is wrong with a deleted runner's audit: each step once, in order, versions
    consecutive, nothing forced, and the row's version the last one audited."""
    entries = world.store.audit(name)
    problems = []
    if [(e.from_status, e.to_status) for e in entries] != LANE:
        problems.append(f"lane {[(e.from_status, e.to_status) for e in entries]}")
    for before, after in itertools.pairwise(entries):
        if after.from_version != before.to_version or after.to_version != before.to_version + 1:
            problems.append(
                f"versions {before.to_version} -> {after.from_version}/{after.to_version}"
            )
    if any(e.forced for e in entries):
        problems.append("a forced write")
    if entries and world.store.require(name).version != entries[-1].to_version:
        problems.append("a write the audit does not show")
    return problems


def registration_deletes(world: RunnerWorld, record: RunnerRecord) -> int:
    """GitHub DELETEs that removed this runner's registration (204)."""
    return sum(
        1
        for r in world.github.requests
        if r["method"] == "DELETE"
        and r["status"] == 204
        and r["path"].rstrip("/").endswith(f"/{record.github_runner_id}")
    )


async def deletions_with_a_kill(
    client: Client, world: RunnerWorld, fleet: WorkerFleet, names: list[str], more: int = 0
) -> tuple[list[DeletionResult], WorkerProcess]:
    """Requests every deletion, SIGKILLs one worker while it runs provider calls, starts
    `more` workers, and returns every result."""
    handles = await asyncio.gather(*(world.request(client, n) for n in names))
    victim = await victim_in_provider_calls(world, client, fleet, handles)
    fleet.kill(victim)
    # Started now, their start-up overlaps the wait for the victim's lost attempts.
    fleet.start(more)
    within = 60 + 2 * len(names)
    try:
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), within)
    except TimeoutError:
        raise AssertionError(f"deletions open after {within} s:\n{fleet.logs()}") from None
    return list(results), victim


def assert_deleted_once_and_nothing_left(
    world: RunnerWorld, records: dict[str, RunnerRecord], results: list[DeletionResult]
) -> None:
    names = list(records)
    assert [r.outcome for r in results] == [DeletionOutcome.DELETED] * len(names)
    assert not any(r.leaked_provider_id or r.recovered for r in results)
    # Nothing left: every record a tombstone; no instance, registration or leak record.
    assert all(world.status(n) is InstanceStatus.DELETED for n in names)
    assert not [n for n in names if world.instance_exists(n)]
    assert not [n for n in names if world.registration_exists(records[n])]
    assert world.store.leaks() == []
    # No instance lease outlives its deletion, the killed worker's included (taken over).
    assert [n for n in names if world.store.lease(f"i-{n}") is not None] == []
    # Written once: each lane step exactly once, each registration removed once.
    assert {n: p for n in names if (p := lane_written_once(world, n))} == {}
    assert {n: c for n in names if (c := registration_deletes(world, records[n])) != 1} == {}
    # The kill mattered: provider calls the victim had started died with it and were run
    # again by a surviving worker; no call on a live worker failed.
    wanted = {f"i-{n}" for n in names}
    calls = [
        c
        for c in provider_state.invocations(world.provider_config, command="DeleteInstance")
        if c["instance_id"] in wanted
    ]
    by_instance = Counter(c["instance_id"] for c in calls)
    assert set(by_instance) == wanted
    assert [i for i, n in by_instance.items() if n > 1], "no provider call died with the worker"
    assert all(c.get("exit_code") == 0 for c in calls if by_instance[c["instance_id"]] == 1)


async def test_two_then_four_workers_on_one_queue_and_store_survive_a_sigkill_each(
    dev_env: WorkflowEnvironment, tmp_path: Path, pg_url: str
) -> None:
    """Two workers serve a batch and one is killed mid-run; three more join (four live),
    serve a second batch, and one of them is killed mid-run too."""
    first, second = (RUNNERS_OVERRIDE, RUNNERS_OVERRIDE) if RUNNERS_OVERRIDE else (10, 12)
    async with runner_world(tmp_path, pg_url) as world:

        def add(batch: str, count: int) -> dict[str, RunnerRecord]:
            names = [f"scale-{batch}-{i:03d}" for i in range(count)]
            return {
                n: world.add_runner(n, mode="slow", mode_seconds=PROVIDER_SECONDS) for n in names
            }

        two, four = add("two", first), add("four", second)
        config = write_worker_config(
            tmp_path / "keeper.yaml",
            address=dev_address(dev_env),
            task_queue=world.task_queue.removesuffix("-runners"),
            families=["runners"],
            max_cached_workflows=NO_STICKY_CACHE,
            runners=runner_settings(world, tmp_path),
        )
        fleet = WorkerFleet(config, "runners")
        client = dev_env.client
        try:
            await until_polling(client, world.task_queue, fleet.start(2))
            two_results, _ = await deletions_with_a_kill(client, world, fleet, list(two), more=3)
            assert len(fleet.live) == 4
            await until_polling(client, world.task_queue, fleet.live)
            four_results, _ = await deletions_with_a_kill(client, world, fleet, list(four))
            assert len(fleet.live) == 3
        finally:
            await fleet.stop()
        assert_deleted_once_and_nothing_left(world, two, two_results)
        assert_deleted_once_and_nothing_left(world, four, four_results)
