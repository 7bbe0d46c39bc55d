"""`keeper worker --family`: each family on its own task queue; a family that is not served
opens none of its clients and creates none of its schedules."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
)
from temporalio.client import (
    Client,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleState,
)
from temporalio.testing import WorkflowEnvironment

from keeper.domain.runners.models import RECONCILER_SCHEDULE_ID
from keeper.domain.tpu.naming import SWEEPER_SCHEDULE_ID
from keeper.runtime.settings import Settings, SettingsError, load_settings
from tests.e2e_support import REPO, own_namespace

pytestmark = pytest.mark.e2e


async def _namespace(env: WorkflowEnvironment) -> Client:
    """A namespace of the test's own: schedule ids are per namespace."""
    return await own_namespace(env, "families", _schedules)


async def _pollers(client: Client, queue: str) -> int:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(response.pollers)


async def _schedules(client: Client) -> set[str]:
    return {s.id async for s in await client.list_schedules()}


def _start(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEPER_"))}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "keeper.cli.main", "--config", str(config), "worker", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _config(tmp_path: Path, client: Client, stem: str) -> tuple[Path, Path]:
    store = tmp_path / "runners.db"
    config = {
        "temporal": {"address": client.service_client.config.target_host,
                     "namespace": client.namespace, "task_queue": stem},
        "tpu": {"endpoint": "emulator", "emulator_address": "127.0.0.1:9"},
        "worker": {"log_dir": str(tmp_path), "graceful_shutdown": "1s", "versioned": False},
        "runners": {"store_url": f"sqlite:///{store}",
                    "provider": {"config_file": str(tmp_path / "provider.json")},
                    "github": {"token_file": None}},
    }  # fmt: skip
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, store


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _until(check, what: str, log: Path, within: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} within {within}s; worker log:\n{_tail(log)}")
        await asyncio.sleep(0.2)


@pytest.mark.parametrize(
    ("served", "idle", "schedule", "absent_schedule", "cached"),
    [
        # The TPU family's runs idle in assign for hours: a smaller cache of its own.
        ("tpu", "runners", SWEEPER_SCHEDULE_ID, RECONCILER_SCHEDULE_ID, 1000),
        ("runners", "tpu", RECONCILER_SCHEDULE_ID, SWEEPER_SCHEDULE_ID, 5000),
    ],
)
async def test_a_worker_serves_only_the_families_it_is_given(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    served: str,
    idle: str,
    schedule: str,
    absent_schedule: str,
    cached: int,
) -> None:
    client = await _namespace(dev_env)
    stem = f"fam-{uuid.uuid4().hex[:6]}"
    config, store = _config(tmp_path, client, stem)
    log = tmp_path / "worker.log"
    worker = _start(config, log, "--family", served)
    try:
        await _until(
            lambda: _pollers(client, f"{stem}-{served}"), f"no poller on {stem}-{served}", log
        )
        await _until(lambda: _has_schedule(client, schedule), f"no schedule {schedule}", log)
        assert await _pollers(client, f"{stem}-{idle}") == 0
        assert await _pollers(client, stem) == 0
        assert absent_schedule not in await _schedules(client)
        # The runner store is the runner family's: a TPU-only worker never opens it.
        assert store.exists() == (served == "runners")
        serving = [line for line in log.read_text().splitlines() if "serving family" in line]
        assert len(serving) == 1, _tail(log)
        assert f"serving family {served} on task queue {stem}-{served} (" in serving[0]
        assert serving[0].endswith(f", {cached} cached workflows)"), serving[0]
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, _tail(log)


async def _has_schedule(client: Client, schedule: str) -> bool:
    return schedule in await _schedules(client)


async def test_a_worker_of_every_family_serves_each_queue_and_none_polls_the_stem(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client = await _namespace(dev_env)
    stem = f"fam-{uuid.uuid4().hex[:6]}"
    config, _ = _config(tmp_path, client, stem)
    log = tmp_path / "worker.log"
    worker = _start(config, log)
    try:
        for queue in (f"{stem}-tpu", f"{stem}-runners", f"{stem}-reclaim", f"{stem}-watch"):
            await _until(lambda q=queue: _pollers(client, q), f"no poller on {queue}", log)
        # 1.0 serves only the families' queues: no run of keeper ever lived on the stem.
        assert await _pollers(client, stem) == 0
        await _until(
            lambda: _has_schedule(client, RECONCILER_SCHEDULE_ID), "no reconciler schedule", log
        )
        sweeper = await client.get_schedule_handle(SWEEPER_SCHEDULE_ID).describe()
        assert sweeper.schedule.action.task_queue == f"{stem}-tpu"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, _tail(log)


async def test_a_worker_applies_its_settings_to_an_existing_schedule(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The worker owns its schedules: `sweeper.interval: 2m` reaches a schedule made every
    10 m, and a hand-made change to its overlap policy is undone (one sweep at a time);
    whether it is paused stays the operator's call."""
    from keeper.workers.families import FAMILIES
    from keeper.workers.main import ensure_schedules

    client = await _namespace(dev_env)
    stem = f"fam-{uuid.uuid4().hex[:6]}"
    settings = Settings.model_validate({"temporal": {"task_queue": stem}})
    # As an older worker made it (on the stem, every 10 m), then changed by hand.
    old = FAMILIES["tpu"].schedules(settings, stem)[0]
    old.schedule.policy = SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL)
    old.schedule.state = ScheduleState(paused=True, note="maintenance")
    await client.create_schedule(old.schedule_id, old.schedule)
    settings.sweeper.interval = timedelta(minutes=2)
    await ensure_schedules(client, settings, FAMILIES["tpu"])
    described = await client.get_schedule_handle(SWEEPER_SCHEDULE_ID).describe()
    assert described.schedule.action.task_queue == f"{stem}-tpu"
    assert [i.every for i in described.schedule.spec.intervals] == [timedelta(minutes=2)]
    assert described.schedule.policy.overlap is ScheduleOverlapPolicy.SKIP
    assert described.schedule.state.paused
    assert described.schedule.state.note == "maintenance"


async def test_a_worker_resets_a_schedule_input_an_older_keeper_made(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A reconciler schedule made before 1.0 carries a `policy` its workflow now refuses:
    the worker's start puts the family's own input back, so the next pass runs."""
    from temporalio.client import ScheduleActionStartWorkflow

    from keeper.workers.families import FAMILIES
    from keeper.workers.main import ensure_schedules

    client = await _namespace(dev_env)
    stem = f"fam-{uuid.uuid4().hex[:6]}"
    settings = Settings.model_validate({"temporal": {"task_queue": stem}})
    old = FAMILIES["runners"].schedules(settings, f"{stem}-runners")[0]
    action = old.schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    wanted = await client.data_converter.encode(action.args)
    action.args = [{"policy": {"busy_wait": "30m"}}]
    await client.create_schedule(old.schedule_id, old.schedule)
    await ensure_schedules(client, settings, FAMILIES["runners"])
    described = await client.get_schedule_handle(old.schedule_id).describe()
    now = described.schedule.action
    assert isinstance(now, ScheduleActionStartWorkflow)
    assert [p.data for p in now.args] == [p.data for p in wanted]
    assert b"policy" not in b"".join(p.data for p in now.args)


def test_worker_check_names_the_interval_it_sets_on_each_schedule(tmp_path: Path) -> None:
    config = tmp_path / "keeper.yaml"
    config.write_text(
        yaml.safe_dump({"sweeper": {"interval": "2m"}, "runners": {"reconcile_interval": "1h"}})
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "KEEPER_"))}

    def check(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "keeper.cli.main", "--config", str(config), "worker",
             "--check", *args],
            cwd=REPO, capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = check()
    assert "schedule tpu-sweeper every 2m (set at start)" in text, text
    assert "schedule runner-reconciler every 1h (set at start)" in text, text
    families = {f["name"]: f for f in json.loads(check("--json"))["families"]}
    assert families["tpu"]["schedules"] == [SWEEPER_SCHEDULE_ID]
    assert families["tpu"]["schedule_intervals"] == {SWEEPER_SCHEDULE_ID: 120.0}
    assert families["watch"]["schedule_intervals"] == {}


@pytest.mark.parametrize(
    ("setting", "value", "bound"),
    [
        ("sweeper.interval", "0s", "greater than or equal to 1 second"),
        ("runners.reconcile_interval", "500ms", "greater than or equal to 1 second"),
        ("bootstrap.poll_interval", "0s", "greater than or equal to 1 second"),
        ("tpu.call_timeout", "0s", "greater than 0"),
        ("health.timeout", "0s", "greater than 0"),
    ],
)
def test_an_interval_or_timeout_the_worker_cannot_run_with_is_refused_by_the_settings(
    tmp_path: Path, setting: str, value: str, bound: str
) -> None:
    # Temporal refuses a schedule interval under a second only when a worker starts and
    # creates or updates the schedule; a zero poll or timeout breaks the first bootstrap:
    # `worker --check` must catch them first.
    empty = tmp_path / "keeper.yaml"
    section, key = setting.split(".")
    empty.write_text(yaml.safe_dump({section: {key: value}}))
    with pytest.raises(SettingsError, match=rf"{setting}: .*{bound}"):
        load_settings(empty, env={})


def test_an_unknown_family_is_refused_by_name(tmp_path: Path) -> None:
    empty = tmp_path / "keeper.yaml"
    empty.write_text("{}\n")
    with pytest.raises(SettingsError, match=r"worker\.families: .*unknown workflow family gpu"):
        load_settings(empty, env={"KEEPER_WORKER_FAMILIES": "tpu,gpu"})
    done = subprocess.run(
        [sys.executable, "-m", "keeper.cli.main", "worker", "--family", "tpu,gpu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--family" in done.stderr and "unknown workflow family gpu" in done.stderr
