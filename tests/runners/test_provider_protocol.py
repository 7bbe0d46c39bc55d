"""keeper's GARM external-provider adapter against real provider processes.

Every call below spawns a real executable: the emulated provider through its wrapper
script, or a few-line shell provider where a test needs to see exactly what a provider
receives or how it dies. Nothing is mocked. A provider dies with its worker, and a lease on
the instance keeps a retry from running beside an earlier attempt.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from emulators.provider import WRAPPER, launcher_env
from emulators.provider.state import (
    add_instance,
    attempts,
    instances,
    invocations,
    set_default_mode,
    set_mode,
    write_config,
)
from emulators.tpu import TpuEmulator
from emulators.tpu.testing import PARENT, client_for
from keeper.activities.runners.deletion import ProviderActivities
from keeper.domain.runners.calls import ProviderDelete
from keeper.domain.runners.provider import (
    MESSAGE_LIMIT,
    NOT_FOUND_EXIT_CODE,
    InstanceStatus,
    ProviderAnswer,
    ProviderInstance,
    ProviderOutcome,
    classify_exit,
    stderr_tail,
    timed_out,
)
from keeper.runtime.runners.garm_provider import ExternalProvider, ProviderError
from keeper.runtime.runners.instance_lease import InstanceLeases
from keeper.store import LeaseResult, open_store
from tests.e2e_support import dev_address, process_gone, start_worker_process
from tests.runners.world import TOKEN as WORLD_TOKEN
from tests.runners.world import RunnerWorld

POOL = "pool-a"
CONTROLLER = "controller-1"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "provider.json")


@pytest.fixture
def provider(config: Path) -> ExternalProvider:
    return ExternalProvider(WRAPPER, config, CONTROLLER, extra_env=launcher_env())


def script(tmp_path: Path, body: str, name: str = "provider.sh") -> Path:
    """A shell provider, for what the emulator cannot show: its environment, its children."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


dead = process_gone


async def wait_dead(*pids: int, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not all(dead(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still alive: {[p for p in pids if not dead(p)]}"
        await asyncio.sleep(0.05)


async def started_pid(config: Path, instance_id: str, within_s: float = 10.0) -> int:
    """The pid of the first DeleteInstance of instance_id, once it has logged its start."""
    deadline = time.monotonic() + within_s
    while True:
        calls = invocations(config, command="DeleteInstance", instance_id=instance_id)
        if calls:
            return calls[0]["pid"]
        assert time.monotonic() < deadline, "the provider never started"
        await asyncio.sleep(0.05)


# --- every delete mode through ExternalProvider -------------------------------------------


async def test_normal_delete_removes_the_instance(config: Path, provider: ExternalProvider):
    add_instance(config, "runner-1", POOL, provider_id="i-1")

    answer = await provider.delete_instance("i-1", POOL, timeout_s=10)

    assert answer.outcome is ProviderOutcome.DELETED
    assert answer.exit_code == 0 and answer.gone
    assert "i-1" not in instances(config)
    [call] = invocations(config)
    assert (call["command"], call["instance_id"], call["pool_id"], call["exit_code"]) == (
        "DeleteInstance",
        "i-1",
        POOL,
        0,
    )


async def test_delete_by_name_when_creation_never_returned_an_id(
    config: Path, provider: ExternalProvider
):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    answer = await provider.delete_instance("runner-1", POOL, timeout_s=10)
    assert answer.outcome is ProviderOutcome.DELETED
    assert instances(config) == {}


async def test_absent_instance_is_not_found_or_a_no_op(tmp_path: Path, provider: ExternalProvider):
    answer = await provider.delete_instance("i-never", POOL, timeout_s=10)
    assert (answer.outcome, answer.exit_code, answer.gone) == (
        ProviderOutcome.NOT_FOUND,
        NOT_FOUND_EXIT_CODE,
        True,
    )
    assert "i-never not found" in answer.message

    quiet = write_config(tmp_path / "quiet" / "provider.json", absent_delete="no-op")
    no_op = ExternalProvider(WRAPPER, quiet, CONTROLLER, extra_env=launcher_env())
    answer = await no_op.delete_instance("i-never", POOL, timeout_s=10)
    assert (answer.outcome, answer.exit_code) == (ProviderOutcome.DELETED, 0)


async def test_slow_within_the_timeout_deletes(config: Path, provider: ExternalProvider):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="slow", mode_seconds=0.6)

    answer = await provider.delete_instance("i-1", POOL, timeout_s=10)

    assert answer.outcome is ProviderOutcome.DELETED
    assert answer.duration_s >= 0.6
    assert instances(config) == {}


async def test_slow_beyond_the_timeout_times_out_and_dies(config: Path, provider: ExternalProvider):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="slow", mode_seconds=60)

    answer = await provider.delete_instance("i-1", POOL, timeout_s=1)

    assert answer.outcome is ProviderOutcome.TIMED_OUT
    assert answer.exit_code is None and not answer.gone
    assert 1 <= answer.duration_s < 5
    assert "no exit within 1s" in answer.message
    [call] = invocations(config)
    assert call["exit_code"] is None  # it never exited: it was killed
    await wait_dead(call["pid"])
    assert "i-1" in instances(config)  # killed mid-sleep, before it deleted anything


async def test_a_timeout_kills_the_whole_process_group(tmp_path: Path):
    # A provider that delegates to a helper (a cloud CLI, say) and waits for it.
    pids = tmp_path / "pids"
    body = f"echo $$ > {pids}\nsleep 300 &\necho $! >> {pids}\nwait\n"
    provider = ExternalProvider(script(tmp_path, body), tmp_path / "unused.json", CONTROLLER)

    answer = await provider.delete_instance("i-1", POOL, timeout_s=1)

    assert answer.outcome is ProviderOutcome.TIMED_OUT
    shell, helper = (int(line) for line in pids.read_text().split())
    await wait_dead(shell, helper)


async def test_failing_fails_and_the_instance_stays(config: Path, provider: ExternalProvider):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="failing")

    first = await provider.delete_instance("i-1", POOL, timeout_s=10)
    second = await provider.delete_instance("i-1", POOL, timeout_s=10)

    for answer in (first, second):
        assert (answer.outcome, answer.exit_code, answer.gone) == (
            ProviderOutcome.FAILED,
            1,
            False,
        )
    assert first.message == (
        "emulated provider: DeleteInstance i-1 failed: emulated failure 1 (mode failing)"
    )
    assert "emulated failure 2" in second.message
    assert "i-1" in instances(config)
    assert attempts(config, "i-1") == 2


async def test_fail_times_then_it_behaves(config: Path, provider: ExternalProvider):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    set_mode(config, "i-1", "failing", fail_times=2)

    outcomes = [
        (await provider.delete_instance("i-1", POOL, timeout_s=10)).outcome for _ in range(3)
    ]

    assert outcomes == [ProviderOutcome.FAILED, ProviderOutcome.FAILED, ProviderOutcome.DELETED]
    assert [c["exit_code"] for c in invocations(config)] == [1, 1, 0]
    assert instances(config) == {}


async def test_hanging_is_killed_at_the_deadline_and_ticks_meanwhile(
    config: Path, provider: ExternalProvider
):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="hanging")
    ticks: list[float] = []

    answer = await provider.delete_instance(
        "i-1", POOL, timeout_s=1.2, on_tick=ticks.append, tick_every_s=0.2
    )

    assert answer.outcome is ProviderOutcome.TIMED_OUT
    assert len(ticks) >= 4
    assert ticks == sorted(ticks) and ticks[0] >= 0.2 and ticks[-1] <= 1.3
    await wait_dead(invocations(config)[0]["pid"])
    assert "i-1" in instances(config)


async def test_not_found_mode_answers_30_whatever_the_state(
    config: Path, provider: ExternalProvider
):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="not-found")

    answer = await provider.delete_instance("i-1", POOL, timeout_s=10)

    assert (answer.outcome, answer.exit_code, answer.gone) == (
        ProviderOutcome.NOT_FOUND,
        30,
        True,
    )
    assert "i-1" in instances(config)  # it lied, as a confused real provider might


async def test_succeeds_after_timeout_then_a_retry_finds_it_gone(
    config: Path, provider: ExternalProvider
):
    add_instance(
        config, "runner-1", POOL, provider_id="i-1", mode="succeeds-after-timeout", mode_seconds=30
    )

    first = await provider.delete_instance("i-1", POOL, timeout_s=1)
    assert first.outcome is ProviderOutcome.TIMED_OUT
    assert "i-1" not in instances(config)  # the delete happened; only the answer was late
    await wait_dead(invocations(config)[0]["pid"])

    retry = await provider.delete_instance("i-1", POOL, timeout_s=10)
    assert retry.outcome is ProviderOutcome.NOT_FOUND and retry.gone
    assert attempts(config, "i-1") == 2


async def test_the_default_mode_applies_to_instances_without_their_own(
    config: Path, provider: ExternalProvider
):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    add_instance(config, "runner-2", POOL, provider_id="i-2", mode="normal")
    set_default_mode(config, "failing", fail_times=1)

    assert (await provider.delete_instance("i-1", POOL, timeout_s=10)).outcome == "failed"
    assert (await provider.delete_instance("i-2", POOL, timeout_s=10)).outcome == "deleted"
    # fail_times of the default counts across instances: the one failure is spent.
    assert (await provider.delete_instance("i-1", POOL, timeout_s=10)).outcome == "deleted"


# --- cancellation and heartbeat errors ---------------------------------------------------


async def test_cancelling_the_caller_kills_the_provider(config: Path, provider: ExternalProvider):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="hanging")
    task = asyncio.create_task(provider.delete_instance("i-1", POOL, timeout_s=60))
    pid = await started_pid(config, "i-1")

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await wait_dead(pid)


async def test_an_on_tick_error_kills_the_provider_and_propagates(
    config: Path, provider: ExternalProvider
):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="hanging")

    def heartbeat(elapsed: float) -> None:
        if invocations(config):
            raise RuntimeError("worker shutting down")

    with pytest.raises(RuntimeError, match="worker shutting down"):
        await provider.delete_instance(
            "i-1", POOL, timeout_s=30, on_tick=heartbeat, tick_every_s=0.1
        )
    await wait_dead(invocations(config)[0]["pid"])


# --- tied to the worker's life ----------------------------------------------------------


def worker_config(tmp_path: Path, env: WorkflowEnvironment, world: RunnerWorld) -> Path:
    token_file = tmp_path / "github-token"
    token_file.write_text(WORLD_TOKEN + "\n")
    config = {
        # The worker serves the runner family's queue, `<task_queue>-runners`: the world's.
        "temporal": {
            "address": dev_address(env),
            "task_queue": world.task_queue.removesuffix("-runners"),
        },
        "worker": {"log_dir": str(tmp_path), "graceful_shutdown": "1s"},
        "sweeper": {"interval": "1h"},
        "runners": {
            "store_url": world.store.engine.url.render_as_string(hide_password=False),
            "github": {"api_url": world.github.url, "token_file": str(token_file)},
            "provider": {"config_file": str(world.provider_config)},
            "deletion": {"provider_timeout": "2m", "provider_heartbeat": "5s"},
            "reconcile_interval": "1h",
        },
    }
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_a_sigkilled_worker_leaves_no_provider_behind(
    dev_env: WorkflowEnvironment,
    world: RunnerWorld,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    world.add_runner("doomed", mode="hanging")
    monkeypatch.setenv("KEEPER_WORKER_VERSIONED", "false")  # the dev server has no deployment
    worker = start_worker_process(worker_config(tmp_path, dev_env, world), tmp_path / "w.log")
    try:
        handle = await world.request(dev_env.client, "doomed")
        pid = await started_pid(world.provider_config, "i-doomed", within_s=60)
        assert not dead(pid)
        os.kill(worker.pid, signal.SIGKILL)  # the worker alone: its group would be no test
        worker.wait(10)
        await wait_dead(pid, within_s=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    await handle.terminate("the test is over")


# --- one provider process per instance (leases) -------------------------------------------


@pytest.fixture
def leases(tmp_path: Path) -> Iterator[InstanceLeases]:
    store = open_store(f"sqlite:///{tmp_path / 'runners.db'}")
    try:
        yield InstanceLeases(store, margin=timedelta(seconds=5))
    finally:
        store.close()


def delete_call(instance_id: str, timeout_s: float = 20.0) -> ProviderDelete:
    return ProviderDelete(runner="r", instance_id=instance_id, pool_id=POOL, timeout_s=timeout_s)


def lease_waits(heartbeats: list[object]) -> list[str]:
    """What an attempt said while it waited for the instance's lease (its heartbeats)."""
    return [str(h) for h in heartbeats if str(h).startswith("waiting for the instance's lease")]


def watched(heartbeats: list[object]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: heartbeats.extend(details)
    return env


async def test_a_second_attempt_while_the_lease_is_held_waits_and_starts_no_process(
    config: Path, provider: ExternalProvider, leases: InstanceLeases
):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="slow", mode_seconds=3)
    activities = ProviderActivities(provider, leases)
    first = asyncio.create_task(
        ActivityEnvironment().run(activities.provider_delete, delete_call("i-1"))
    )
    await started_pid(config, "i-1")
    held = leases.store.lease("i-1")
    assert held is not None

    heartbeats: list[object] = []
    second = asyncio.create_task(
        watched(heartbeats).run(activities.provider_delete, delete_call("i-1"))
    )
    deadline = time.monotonic() + 10
    while not lease_waits(heartbeats):
        assert time.monotonic() < deadline, "the second attempt never waited for the lease"
        await asyncio.sleep(0.05)
    until = held.expires_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"an earlier attempt may still be running until {until}" in lease_waits(heartbeats)[0]
    assert attempts(config, "i-1") == 1 and not first.done()  # no second process meanwhile

    assert (await first).answer.outcome is ProviderOutcome.DELETED
    # Given back once the first process ended: the second goes on, and finds it gone.
    assert (await second).answer.outcome is ProviderOutcome.NOT_FOUND
    assert attempts(config, "i-1") == 2 and leases.store.lease("i-1") is None


async def test_a_lease_held_by_a_lost_attempt_blocks_until_it_expires(
    config: Path, provider: ExternalProvider, leases: InstanceLeases
):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    # What a worker SIGKILLed mid-call leaves behind: its lease, never released.
    leases.store.acquire_lease("i-1", holder="host-b pid 7 (lost)", ttl=timedelta(seconds=3))
    held = leases.store.lease("i-1")
    assert held is not None
    activities = ProviderActivities(provider, leases)
    heartbeats: list[object] = []
    result = await watched(heartbeats).run(activities.provider_delete, delete_call("i-1"))
    assert result.answer.outcome is ProviderOutcome.DELETED
    assert "host-b pid 7 (lost)" in lease_waits(heartbeats)[0]
    # Its one process started only once the lost attempt's lease had run out.
    (call,) = invocations(config, command="DeleteInstance", instance_id="i-1")
    assert call["started"] >= held.expires_at.timestamp()
    assert "i-1" not in instances(config)


async def test_an_expired_lease_is_taken_over(
    config: Path,
    provider: ExternalProvider,
    leases: InstanceLeases,
    caplog: pytest.LogCaptureFixture,
):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    leases.store.acquire_lease("i-1", holder="host-b pid 7 (lost)", ttl=timedelta(0))
    activities = ProviderActivities(provider, leases)
    with caplog.at_level(logging.WARNING, logger="keeper.store"):
        result = await ActivityEnvironment().run(activities.provider_delete, delete_call("i-1"))
    assert result.answer.outcome is ProviderOutcome.DELETED
    assert "took over the lease host-b pid 7 (lost)" in caplog.text
    assert leases.store.lease("i-1") is None and "i-1" not in instances(config)


async def test_the_lease_outlives_the_call_by_its_timeout_and_margin(
    config: Path, provider: ExternalProvider, leases: InstanceLeases
):
    add_instance(config, "runner-1", POOL, provider_id="i-1", mode="hanging")
    seen: list[LeaseResult] = []

    async def body() -> None:
        async with leases.hold("i-1", runs_for=timedelta(seconds=40), what="wf attempt 1") as got:
            seen.append(got)
            raise RuntimeError("the provider call failed")

    before = datetime.now(UTC)
    with pytest.raises(RuntimeError):
        await body()
    [got] = seen
    assert "wf attempt 1" in got.holder and got.holder.startswith(socket.gethostname())
    assert timedelta(seconds=44) < got.expires_at - before < timedelta(seconds=47)
    assert leases.store.lease("i-1") is None  # released on an error too


# --- list, get, create -------------------------------------------------------------------


async def test_the_provider_lists_a_pool_gets_by_id_or_name_and_creates_a_name_once(
    config: Path, provider: ExternalProvider
):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    add_instance(config, "runner-2", POOL, provider_id="i-2", status="stopped")
    add_instance(config, "other", "pool-b", provider_id="i-3")

    listed = await provider.list_instances(POOL, timeout_s=10)
    assert sorted(i.provider_id for i in listed) == ["i-1", "i-2"]
    assert {i.pool_id for i in listed} == {POOL}
    assert await provider.list_instances("pool-empty", timeout_s=10) == []

    got = await provider.get_instance("i-2", POOL, timeout_s=10)
    assert got is not None
    assert (got.name, got.status, got.os_type) == ("runner-2", InstanceStatus.STOPPED, "linux")
    assert got.addresses[0].type == "private"
    by_name = await provider.get_instance("runner-1", POOL, timeout_s=10)
    assert by_name is not None and by_name.provider_id == "i-1"
    assert await provider.get_instance("i-missing", POOL, timeout_s=10) is None

    created = await provider.create_instance(
        {"name": "runner-new", "os_type": "linux", "arch": "arm64", "labels": ["x"]},
        POOL,
        timeout_s=10,
    )
    assert created.name == "runner-new" and created.provider_id.startswith("emu-")
    assert (created.status, created.os_arch, created.pool_id) == ("running", "arm64", POOL)
    assert created.provider_id in instances(config)
    listed = await provider.list_instances(POOL, timeout_s=10)
    assert "runner-new" in {i.name for i in listed}
    assert await provider.get_version(timeout_s=10) == "v0.1.0-keeper-emulated"

    with pytest.raises(ProviderError) as duplicate:
        await provider.create_instance({"name": "runner-new"}, POOL, timeout_s=10)
    assert duplicate.value.exit_code == 31
    assert "already exists" in duplicate.value.message


async def test_failures_of_other_commands_raise_provider_error(tmp_path: Path):
    body = (
        'case "$HOW" in\n'
        "  fail) echo 'connecting to the cloud: 403 forbidden' >&2; exit 3 ;;\n"
        "  garbage) echo 'not json' ;;\n"
        '  nameless) echo \'[{"provider_id": "x"}]\' ;;\n'
        "  null) echo null ;;\n"
        "  slow) sleep 30 ;;\n"
        "esac\n"
    )
    executable = script(tmp_path, body)

    def with_how(how: str) -> ExternalProvider:
        return ExternalProvider(executable, tmp_path / "cfg", CONTROLLER, extra_env={"HOW": how})

    with pytest.raises(ProviderError) as failed:
        await with_how("fail").list_instances(POOL, timeout_s=10)
    assert (failed.value.exit_code, failed.value.message) == (
        3,
        "connecting to the cloud: 403 forbidden",
    )
    assert "ListInstances exited with 3" in str(failed.value)

    with pytest.raises(ProviderError, match="unreadable answer 'not json"):
        await with_how("garbage").get_instance("i-1", POOL, timeout_s=10)
    with pytest.raises(ProviderError, match="unreadable answer"):
        await with_how("nameless").list_instances(POOL, timeout_s=10)
    # A Go provider's nil slice.
    assert await with_how("null").list_instances(POOL, timeout_s=10) == []

    with pytest.raises(ProviderError) as slow:
        await with_how("slow").create_instance({"name": "n"}, POOL, timeout_s=0.5)
    assert slow.value.timed_out and slow.value.exit_code is None


# --- many at once -------------------------------------------------------------------------


async def test_fifty_concurrent_deletes_keep_the_state_consistent(
    config: Path, provider: ExternalProvider
):
    for n in range(50):
        add_instance(config, f"runner-{n}", POOL, provider_id=f"i-{n}")

    # Creates race the deletes for the same lock: none of either may be lost.
    answers, created = await asyncio.gather(
        asyncio.gather(
            *(provider.delete_instance(f"i-{n}", POOL, timeout_s=60) for n in range(50))
        ),
        asyncio.gather(
            *(provider.create_instance({"name": f"new-{n}"}, POOL, timeout_s=60) for n in range(8))
        ),
    )

    failed = [a for a in answers if a.outcome is not ProviderOutcome.DELETED]
    assert failed == []
    left = instances(config)
    assert sorted(r["name"] for r in left.values()) == sorted(f"new-{n}" for n in range(8))
    assert {c.provider_id for c in created} == set(left)
    deletes = invocations(config, command="DeleteInstance")
    assert len(deletes) == 50 and {c["exit_code"] for c in deletes} == {0}
    assert len({c["pid"] for c in deletes}) == 50
    state_file = Path(config).parent / "provider-state.json"
    json.loads(state_file.read_text())  # whole, never half-written
    assert not list(state_file.parent.glob("*.tmp"))


async def test_providers_start_cleanly_while_grpc_is_busy_in_the_worker(
    config: Path, provider: ExternalProvider, shared_emulator: TpuEmulator
):
    """A worker's TPU client keeps gRPC threads busy. A provider spawned with a fork (as a
    preexec_fn forces) ran gRPC's fork handlers in the child, which crashed it before exec
    (SIGSEGV, SIGABRT) for up to one call in five; the launcher spawns without them."""
    client, channel = client_for(shared_emulator)
    stop = asyncio.Event()

    async def keep_grpc_busy() -> None:
        while not stop.is_set():
            await client.list_queued_resources(parent=PARENT, timeout=5)

    callers = [asyncio.create_task(keep_grpc_busy()) for _ in range(4)]
    try:
        answers: list[ProviderAnswer] = []
        for batch in range(3):
            ids = [f"i-{batch}-{n}" for n in range(50)]
            for instance_id in ids:
                add_instance(config, f"runner-{instance_id}", POOL, provider_id=instance_id)
            answers += await asyncio.gather(
                *(provider.delete_instance(i, POOL, timeout_s=60) for i in ids)
            )
    finally:
        stop.set()
        await asyncio.gather(*callers)
        await channel.close()
    assert [a for a in answers if a.outcome is not ProviderOutcome.DELETED] == []
    assert len(answers) == 150 and instances(config) == {}


# --- what the provider process receives ---------------------------------------------------


async def test_the_provider_sees_the_protocol_and_none_of_keepers_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("KEEPER_GITHUB_TOKEN", "ghp_not_for_providers")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-not")
    seen = tmp_path / "env"
    executable = script(tmp_path, f"env > {seen}\n")
    provider = ExternalProvider(
        executable, tmp_path / "cfg.toml", CONTROLLER, extra_env={"CLOUD_REGION": "eu-west"}
    )

    answer = await provider.delete_instance("i-1", POOL, timeout_s=10)

    assert answer.outcome is ProviderOutcome.DELETED
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert "KEEPER_GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "ghp_not_for_providers" not in seen.read_text()
    assert {k: v for k, v in env.items() if k.startswith("GARM_")} == {
        "GARM_COMMAND": "DeleteInstance",
        "GARM_CONTROLLER_ID": CONTROLLER,
        "GARM_PROVIDER_CONFIG_FILE": str(tmp_path / "cfg.toml"),
        "GARM_INTERFACE_VERSION": "v0.1.1",
        "GARM_INSTANCE_ID": "i-1",
        "GARM_POOL_ID": POOL,
        "GARM_POOL_EXTRASPECS": base64.b64encode(b"{}").decode(),
    }
    assert env["CLOUD_REGION"] == "eu-west"
    assert env["PATH"] == os.environ["PATH"]
    # Whatever else there is, the shell set itself.
    assert set(env) - {"PATH", "HOME", "LANG", "CLOUD_REGION", "PWD", "SHLVL", "_"} == {
        k for k in env if k.startswith("GARM_")
    }


async def test_create_sends_bootstrap_params_on_stdin(tmp_path: Path):
    got = tmp_path / "stdin"
    answer = '{"provider_id": "p-1", "name": "n-1", "status": "running", "extra": 1}'
    executable = script(tmp_path, f"cat > {got}\necho '{answer}'\n")
    provider = ExternalProvider(executable, tmp_path / "cfg", CONTROLLER)

    created = await provider.create_instance({"name": "n-1", "flavor": "small"}, POOL, timeout_s=10)

    assert created.provider_id == "p-1"
    assert json.loads(got.read_text()) == {"name": "n-1", "flavor": "small", "pool_id": POOL}


def test_the_executable_is_checked_up_front(tmp_path: Path):
    missing = tmp_path / "no-such-provider"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        ExternalProvider(missing, tmp_path / "cfg", CONTROLLER)
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError, match=f"{plain} is not executable"):
        ExternalProvider(plain, tmp_path / "cfg", CONTROLLER)
    with pytest.raises(ValueError, match="GARM_COMMAND"):
        ExternalProvider(WRAPPER, tmp_path / "cfg", CONTROLLER, extra_env={"GARM_COMMAND": "x"})


@pytest.mark.parametrize(
    ("instance_id", "problem"),
    [
        ("i-\x00-1", "contains a control character (U+0000) at position 3"),
        ("i" * 256, "has 256 characters; at most 255"),
        ("", "is empty"),
    ],
    ids=["nul", "256", "empty"],
)
async def test_an_instance_id_no_provider_can_take_is_a_failed_delete_without_a_process(
    config: Path, provider: ExternalProvider, instance_id: str, problem: str
):
    answer = await provider.delete_instance(instance_id, POOL, timeout_s=10)
    assert answer.outcome is ProviderOutcome.FAILED
    assert problem in answer.message and "fix the runner record" in answer.message
    assert "\x00" not in answer.message and invocations(config) == []


async def test_a_provider_that_cannot_start_is_a_failed_delete(tmp_path: Path):
    broken = tmp_path / "broken"
    broken.write_text("no interpreter line\n")
    broken.chmod(0o755)
    provider = ExternalProvider(broken, tmp_path / "cfg", CONTROLLER)

    answer = await provider.delete_instance("i-1", POOL, timeout_s=10)

    assert answer.outcome is ProviderOutcome.FAILED and answer.exit_code is None
    assert f"could not run {broken}" in answer.message


# --- the emulator on its own: admin CLI, YAML config, protocol checks ---------------------


def run_wrapper(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WRAPPER, *args],
        env={"PATH": os.environ["PATH"], **launcher_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_emulators_admin_commands_change_its_state_and_refuse_an_unknown_instance(
    tmp_path: Path,
):
    config = str(tmp_path / "provider.json")

    def admin(*args: str) -> object:
        done = run_wrapper("--config", config, "admin", *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    admin("init", "--state-file", "state/emulated.json")
    added = admin("add", "--name", "runner-1", "--pool", POOL, "--provider-id", "i-1")
    assert isinstance(added, dict) and added["provider_id"] == "i-1" and added["mode"] is None
    changed = admin("mode", "runner-1", "slow", "--seconds", "2.5")
    assert isinstance(changed, dict)
    assert (changed["mode"], changed["mode_seconds"]) == ("slow", 2.5)
    assert admin("default-mode", "failing", "--fail-times", "3") == {
        "mode": "failing",
        "seconds": 0.0,
        "fail_times": 3,
    }
    snapshot = admin("state")
    assert isinstance(snapshot, dict)
    assert snapshot["state_file"] == str(tmp_path / "state" / "emulated.json")
    assert list(snapshot["instances"]) == ["i-1"] and snapshot["invocations"] == []
    assert admin("mode", "i-1", "default")["mode"] is None  # type: ignore[index]
    assert admin("remove", "i-1") == {"removed": True}
    admin("reset")
    assert admin("state")["instances"] == {}  # type: ignore[index]

    bad = run_wrapper("--config", config, "admin", "mode", "i-404", "slow")
    assert bad.returncode == 1 and "no instance 'i-404'" in bad.stderr


async def test_a_yaml_config_finds_its_state_file_relative_to_itself(tmp_path: Path):
    config = tmp_path / "conf" / "provider.yaml"
    config.parent.mkdir()
    config.write_text("state_file: ../state/provider.json\ndefault_mode: not-found\n")
    (tmp_path / "state").mkdir()
    provider = ExternalProvider(WRAPPER, config, CONTROLLER, extra_env=launcher_env())

    answer = await provider.delete_instance("i-1", POOL, timeout_s=10)

    assert answer.outcome is ProviderOutcome.NOT_FOUND, answer.message
    assert (tmp_path / "state" / "provider.json.log").exists()


def test_the_emulator_checks_the_environment_as_garm_providers_do(config: Path):
    add_instance(config, "runner-1", POOL, provider_id="i-1")
    garm = {
        "GARM_CONTROLLER_ID": CONTROLLER,
        "GARM_PROVIDER_CONFIG_FILE": str(config),
        "GARM_INTERFACE_VERSION": "v0.1.1",
    }

    no_pool = run_wrapper(env={**garm, "GARM_COMMAND": "DeleteInstance", "GARM_INSTANCE_ID": "i-1"})
    assert no_pool.returncode == 1 and "missing GARM_POOL_ID" in no_pool.stderr
    unknown = run_wrapper(env={**garm, "GARM_COMMAND": "Reboot"})
    assert unknown.returncode == 1 and "unknown GARM_COMMAND 'Reboot'" in unknown.stderr
    stop = {**garm, "GARM_INSTANCE_ID": "i-1", "GARM_POOL_ID": POOL}
    assert run_wrapper(env={**stop, "GARM_COMMAND": "StopInstance"}).returncode == 0
    assert instances(config)["i-1"]["status"] == "stopped"
    versions = run_wrapper(env={**garm, "GARM_COMMAND": "GetSupportedInterfaceVersions"})
    assert json.loads(versions.stdout) == ["v0.1.0", "v0.1.1"]
    assert run_wrapper(env={**garm, "GARM_COMMAND": "RemoveAllInstances"}).returncode == 0
    assert instances(config) == {}
    # Python's own `-m` entry point is the same program as the wrapper.
    version = subprocess.run(
        [sys.executable, "-m", "emulators.provider"],
        env={**os.environ, **garm, "GARM_COMMAND": "GetVersion"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert version.stdout.strip() == "v0.1.0-keeper-emulated"


# --- the pure rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code", "stderr", "outcome", "message"),
    [
        (0, "", ProviderOutcome.DELETED, ""),
        (0, "deprecated flag\n", ProviderOutcome.DELETED, "deprecated flag"),
        (30, "instance not found\n", ProviderOutcome.NOT_FOUND, "instance not found"),
        (30, "", ProviderOutcome.NOT_FOUND, ""),
        (1, "  quota exceeded\n", ProviderOutcome.FAILED, "quota exceeded"),
        (1, "", ProviderOutcome.FAILED, "exit code 1 with nothing on stderr"),
        (31, "duplicate", ProviderOutcome.FAILED, "duplicate"),  # 31 means nothing to delete
        (2, "usage", ProviderOutcome.FAILED, "usage"),
        (-9, "", ProviderOutcome.FAILED, "killed by signal 9"),
        (-15, "terminating", ProviderOutcome.FAILED, "terminating"),
    ],
)
def test_exit_0_is_deleted_30_is_not_found_and_any_other_exit_fails_saying_why(
    exit_code: int, stderr: str, outcome: ProviderOutcome, message: str
):
    answer = classify_exit(exit_code, stderr, 1.5)
    assert (answer.outcome, answer.exit_code, answer.message, answer.duration_s) == (
        outcome,
        exit_code,
        message,
        1.5,
    )
    assert answer.gone == (outcome in (ProviderOutcome.DELETED, ProviderOutcome.NOT_FOUND))


def test_messages_keep_the_tail_of_a_long_stderr():
    noise = "".join(f"retrying {n}\n" for n in range(500)) + "fatal: token expired\n"
    answer = classify_exit(1, noise, 0.1)
    assert len(answer.message) <= MESSAGE_LIMIT
    assert answer.message.startswith("…") and answer.message.endswith("fatal: token expired")
    assert stderr_tail("short\n") == "short"

    late = timed_out(300, noise, 300.2)
    assert (late.outcome, late.exit_code, late.gone) == (ProviderOutcome.TIMED_OUT, None, False)
    assert late.message.startswith("no exit within 300s; process group killed: …")
    assert late.message.endswith("token expired") and len(late.message) <= MESSAGE_LIMIT
    assert timed_out(1.5, "", 1.5).message == "no exit within 1.5s; process group killed"


def test_answers_cross_the_workflow_boundary_as_json():
    answer = classify_exit(30, "gone", 0.25)
    assert ProviderAnswer.model_validate_json(answer.model_dump_json()) == answer
    assert json.loads(answer.model_dump_json())["outcome"] == "not-found"


def test_provider_instance_reads_garm_json():
    garm = {
        "provider_id": "88818ff3",
        "name": "garm-ny9HeeQYw2rl",
        "os_type": "linux",
        "os_name": "ubuntu",
        "os_version": "20.04",
        "os_arch": "x86_64",
        "status": "running",
        "pool_id": "41c4a43a",
        "provider_fault": "",
        "addresses": [{"address": "10.0.0.7", "type": "private"}],
        "runner_status": "idle",  # a field keeper does not read
    }
    instance = ProviderInstance.model_validate(garm)
    assert (instance.status, instance.addresses[0].address) == ("running", "10.0.0.7")
    sparse = ProviderInstance.model_validate_json(
        '{"provider_id": "p", "name": "n", "addresses": null, "pool_id": null}'
    )
    assert (sparse.addresses, sparse.pool_id, sparse.status) == ([], None, "unknown")
    for bad in ({"name": "n"}, {"provider_id": "", "name": "n"}, {**garm, "status": "melted"}):
        with pytest.raises(ValidationError):
            ProviderInstance.model_validate(bad)
