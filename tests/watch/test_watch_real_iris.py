"""JobWatch end to end on the REAL iris controller: marin-iris's LocalCluster
(tests/watch/real_iris/serve.py), its local workers running a zephyr-shaped job
(tests/watch/real_iris/zephyr_job.py), the JobWatch workflow on the Temporal dev server reading
it through keeper's own iris client.

Where tests/watch/test_watch_e2e.py checks each runbook scenario against keeper's emulator, these
check that what the emulator taught keeper holds against iris itself: the children's names,
states and tasks, the logs (FetchLogs through the controller's log-server proxy), py-spy
thread dumps (ProfileTask), /proc counters (ExecInContainer), a stop and a restart after an
approval, a retried attempt. docs/iris-emulator.md#checked-against-the-real-controller says
what differs. A LocalCluster runs a task as a process of the host, so an exec there reads
every process of the machine: the CPU counters always show life, and a stall confirmed by a
CPU probe cannot be made here (the escalations below do not rest on it).

`make test` builds the controller's venv (Python 3.12+) and requires these tests; a bare
pytest without it skips them (tests/watch/real_iris/world.py).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from keeper.activities.watch.observe import WatchObserver
from keeper.domain.watch.cadence import WatchPhase
from keeper.domain.watch.calls import JobWatchResult, Observation, ObserveCall
from keeper.domain.watch.models import (
    APPROVE_UPDATE,
    Decision,
    Proposal,
    ProposalKind,
    ProposalState,
    WatchOutcome,
    WatchView,
    watch_id,
)
from keeper.domain.watch.names import JobPhase
from keeper.domain.watch.state import ReadingState
from keeper.domain.watch.threads import ThreadState
from keeper.runtime.settings.watch import WatchSettings
from keeper.runtime.watch.iris_client import IrisController, LogRoute
from keeper.wire.iris.exec_commands import PROC_STAT_COMMAND, parse_proc_stat
from tests.e2e_support import dev_address
from tests.reclaim.test_reclaim_cli import keeper
from tests.reclaim.world import until
from tests.watch.real_iris.world import (
    USER,
    RealIris,
    RealIrisWorld,
    iris_python,
    job_name,
    launch_zephyr,
    real_iris,
    real_iris_world,
    zephyr_argv,
)

pytestmark = [pytest.mark.e2e, pytest.mark.real_iris]

# A stage of 400 shards at two shards a beat outlasts any test: it runs until stopped.
ENDLESS = ("--stages", "1", "--shards", "400")


@pytest.fixture(scope="module")
def controller() -> Iterator[RealIris]:
    """One real controller per module and xdist worker: it answers within a second or two."""
    with real_iris(iris_python()) as server:
        yield server


def pending(view: WatchView, kind: ProposalKind) -> Proposal | None:
    return next((p for p in view.pending() if p.kind is kind), None)


def verdicts(view: WatchView) -> list[str]:
    return [entry.verdict for entry in view.timeline]


def digest(value: str) -> str:
    """What zephyr_job.py's --show-env logs of a value."""
    return hashlib.sha256(value.encode()).hexdigest()[:12]


async def log_text(iris: IrisController, task: str) -> str:
    page = await iris.task_logs(task, attempt_id=-1, max_lines=1000)
    return "\n".join(entry.data for entry in page.entries)


# ---- one check, read straight from the controller ----------------------------------------


async def test_one_check_reads_the_children_logs_thread_dump_and_proc_counters(
    controller: RealIris,
) -> None:
    async with IrisController(controller.url, timeout=10) as iris:
        job = await launch_zephyr(iris, "observe", *ENDLESS)
        observer = WatchObserver(iris, call_timeout_s=10, cpu_sample_workers=4, log_lines=5000)
        env = ActivityEnvironment()

        async def check(reading: ReadingState) -> Observation:
            found: Observation = await env.run(
                observer.observe, ObserveCall(job_id=job, reading=reading)
            )
            return found

        async def progressed() -> Observation | None:
            obs = await check(ReadingState())
            log = obs.coordinator_log
            ready = log is not None and log.latest is not None and obs.threads is not None
            return obs if ready and obs.worker_states.get(JobPhase.RUNNING) == 2 else None

        try:
            obs = await until(progressed, within=60, what="a running job with a progress line")
            assert obs.failed == [], obs.failed
            assert obs.job_state is JobPhase.RUNNING and obs.children == 2
            latest = obs.latest
            assert latest is not None and (latest.pipeline, latest.attempt) == (0, 0)
            group = latest.coord.removesuffix("-coord") if latest.coord else ""
            assert re.fullmatch(rf"{re.escape(job)}/zephyr-keeper-[0-9a-f]{{8}}-p0-a0", group)
            assert latest.workers == f"{group}-workers"
            coordinator = obs.coordinator
            assert coordinator is not None
            assert coordinator.task_id == f"{group}-coord/0"
            assert coordinator.state is JobPhase.RUNNING
            assert coordinator.attempt_id == 0 and coordinator.worker_id
            # The coordinator logs on stderr with iris's level letter: read as INFO, no errors,
            # the progress line parsed through its prefix.
            log = obs.coordinator_log
            assert log is not None and log.latest is not None and log.errors == []
            progress = log.latest
            assert progress.execution_id == group.rsplit("/", 1)[1]
            assert progress.stage == "stage0-Map"
            assert (progress.total, progress.alive, progress.registered) == (400, 2, 2)
            assert iris.log_route is LogRoute.PROXIED_FETCH_LOGS
            # py-spy's dump of the coordinator, through ProfileTask.
            assert obs.threads is not None and obs.threads.state is ThreadState.ACTIVE
            assert "_wait_for_stage" in obs.threads.evidence, obs.threads
            # /proc/PID/stat through ExecInContainer: the coordinator's own process among them.
            pid = int(re.findall(r"pid (\d+)\)", await log_text(iris, coordinator.task_id))[0])
            assert obs.cpu is not None
            mine = [c for c in obs.cpu if c.task_id == coordinator.task_id and c.pid == pid]
            assert len(mine) == 1 and mine[0].host == coordinator.worker_id, obs.cpu[:5]
            assert obs.session_cpu is not None and obs.session_cpu > 0
            # A real exec lists its own shell, never its `cat` (started after the glob); the
            # parser drops the shell by the pid it printed first.
            raw = await iris.exec_in_container(coordinator.task_id, PROC_STAT_COMMAND, 10)
            marker, stats = raw.stdout.split("\n", 1)
            shell = int(marker.removeprefix("keeper-exec-pid "))
            listed = parse_proc_stat(stats)
            assert [p.pid for p in listed].count(shell) == 1, marker
            ppids = [ln.rsplit(")", 1)[1].split()[1] for ln in stats.splitlines() if ")" in ln]
            assert str(shell) not in ppids
            assert shell not in [p.pid for p in parse_proc_stat(raw.stdout)]

            # The next check reads only what came after the cursor: newer progress.
            async def advanced() -> Observation | None:
                later = await check(obs.reading)
                log = later.coordinator_log
                moved = log is not None and log.latest is not None
                return later if moved and log.latest.done > progress.done else None  # type: ignore[union-attr]

            later = await until(advanced, within=30, what="newer progress")
            cursor = obs.reading.coordinator_cursor
            assert later.reading.coordinator_cursor > cursor > 0
            # FetchLogs' cursor is the last row id read: what follows it is all newer.
            page = await iris.task_logs(coordinator.task_id, cursor=cursor, max_lines=1000)
            assert page.entries and all(entry.seq > cursor for entry in page.entries)
        finally:
            await iris.terminate_job(job)


# ---- the watch, end to end ---------------------------------------------------------------


async def test_a_healthy_zephyr_job_is_watched_through_smoke_and_steady_to_success(
    dev_env: WorkflowEnvironment, controller: RealIris
) -> None:
    async with real_iris_world(dev_env.client, controller.url) as w:
        job = await w.start_job("healthy", "--stages", "2", "--shards", "24")
        handle = await w.watch(job)
        seen = await w.until_view(
            handle,
            lambda v: v.phase is WatchPhase.STEADY and v.verdict == "running",
            within=60,
            what="steady and running",
        )
        attempt = seen.attempt
        assert attempt is not None and attempt.coordinator.endswith("-p0-a0-coord")
        assert (attempt.workers_running, attempt.workers_total) == (2, 2)
        result = await w.result(handle, within=90)
        assert result.outcome is WatchOutcome.SUCCEEDED, result
        view = await w.view(handle)
        assert view is not None
        phases = [entry.phase for entry in view.timeline]
        assert phases[0] is WatchPhase.SMOKE and WatchPhase.STEADY in phases, view.timeline
        assert "stalled" not in verdicts(view) and view.proposals == []
        assert view.progress is not None and view.progress.stage == "stage1-Reduce"
        assert view.controller_errors == []
        assert await w.state(job) == "JOB_STATE_SUCCEEDED"
        assert await w.keeper_launched() == []


async def test_a_repeated_worker_error_proposes_a_stop_and_the_approved_stop_kills_the_job(
    dev_env: WorkflowEnvironment, controller: RealIris
) -> None:
    async with real_iris_world(dev_env.client, controller.url) as w:
        job = await w.start_job("errors", *ENDLESS, "--worker-error-every", "1")
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: pending(v, ProposalKind.STOP) is not None,
            within=60,
            what="a stop proposal",
        )
        stop = pending(view, ProposalKind.STOP)
        assert stop is not None and "the same error was seen" in stop.reason, stop
        # The error is the message, without iris's log prefix (level letter, time, logger).
        assert "zephyr.execution" not in stop.reason, stop.reason
        # Proposed, not done: the job runs on until an operator approves.
        assert await w.state(job) == "JOB_STATE_RUNNING"
        done = await handle.execute_update(
            APPROVE_UPDATE, Decision(proposal=stop.id, by="oncall"), result_type=Proposal
        )
        assert done.state is ProposalState.DONE, done
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.STOPPED, result
        assert await w.state(job) == "JOB_STATE_KILLED"
        for child in await w.children(job):
            assert await w.state(child) == "JOB_STATE_KILLED", child
        assert await w.keeper_launched() == []


async def test_a_zombie_coordinator_of_a_job_keeper_did_not_launch_is_never_relaunched_redacted(
    dev_env: WorkflowEnvironment, controller: RealIris
) -> None:
    """iris returns a job's request with its credentials `[REDACTED]`: keeper, which did not
    launch this job, holds no request of its own, so an approved restart launches nothing."""
    secret = f"hf_{uuid.uuid4().hex}"
    async with real_iris_world(dev_env.client, controller.url) as w:
        job = await w.start_job(
            "zombie",
            *ENDLESS,
            "--zombie-at",
            "4",
            "--show-env",
            "HF_TOKEN",
            env={"HF_TOKEN": secret, "DATASET": "fineweb"},
        )
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: pending(v, ProposalKind.RESTART) is not None,
            within=60,
            what="a restart proposal",
        )
        # The zombie is read from py-spy's dump: no loop, no stage wait, the pool idle.
        assert any("is a zombie" in e for e in view.escalations), view.escalations
        shown = (await w.status(job))["request"]["environment"]["envVars"]
        assert shown == {"HF_TOKEN": "[REDACTED]", "DATASET": "fineweb"}
        restart = pending(view, ProposalKind.RESTART)
        assert restart is not None
        try:
            answer = await handle.execute_update(
                APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
            )
        except WorkflowUpdateFailedError as refused:
            # Refused as asked: nothing was done, the job runs on.
            assert "REDACTED" in str(refused.cause), refused.cause
            assert await w.state(job) == "JOB_STATE_RUNNING"
        else:
            assert answer.state is not ProposalState.DONE, answer
        assert await w.keeper_launched() == []
        if (await handle.describe()).status is WorkflowExecutionStatus.RUNNING:
            await handle.cancel()
        await w.client_iris.terminate_job(job)


async def test_a_retried_attempt_is_followed_to_its_success(
    dev_env: WorkflowEnvironment, controller: RealIris
) -> None:
    """Attempt a0's coordinator aborts, the driver starts a1 (a new hash); a1's coordinator
    fails its first iris task attempt and iris retries it (max_retries_failure 1)."""
    async with real_iris_world(dev_env.client, controller.url) as w:
        job = await w.start_job(
            "retry", "--fail-attempts", "1", "--fail-first-task", "--stages", "1", "--shards", "24"
        )
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: v.attempt is not None and v.attempt.attempt == 1,
            within=60,
            what="the watch on attempt a1",
        )
        assert view.attempt is not None and view.attempt.coordinator.endswith("-p0-a1-coord")
        result = await w.result(handle, within=90)
        assert result.outcome is WatchOutcome.SUCCEEDED, result
        final = await w.view(handle)
        assert final is not None
        assert WatchPhase.FAILURE in [entry.phase for entry in final.timeline], final.timeline
        assert [e.attempt for e in final.timeline if e.attempt][-1].startswith("p0-a1 ")
        coord = await w.status(view.attempt.coordinator)
        tasks = (await w.client_iris.list_tasks(view.attempt.coordinator))[0]
        assert coord["job"]["state"] == "JOB_STATE_SUCCEEDED"
        assert tasks.current_attempt_id == 1, tasks
        assert await w.keeper_launched() == []


# ---- a restart of a job `keeper job run` launched ----------------------------------------


def cli_config(tmp_path: Path, env: WorkflowEnvironment, w: RealIrisWorld) -> Path:
    """Settings that point `keeper` at the world: its dev server, queue and controller, and
    the launch store its worker reads."""
    watch: dict[str, Any] = {"controller_url": w.url, "call_timeout": "10s"}
    if "store_url" in WatchSettings.model_fields:
        watch["store_url"] = w.settings.watch.store_url  # type: ignore[attr-defined]
    tree = {
        "temporal": {
            "address": dev_address(env),
            "namespace": "default",
            "task_queue": w.settings.temporal.task_queue,
        },
        "watch": watch,
    }
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def launch_store(tmp_path: Path) -> dict[str, str]:
    """The worker's launch store (watch.store_url), where keeper has one."""
    if "store_url" not in WatchSettings.model_fields:
        return {}
    return {"store_url": f"sqlite:///{tmp_path / 'watch.db'}"}


async def test_an_approved_restart_relaunches_the_request_keeper_job_run_sent(
    dev_env: WorkflowEnvironment, controller: RealIris, tmp_path: Path
) -> None:
    secret = f"hf_{uuid.uuid4().hex}"
    async with real_iris_world(dev_env.client, controller.url, **launch_store(tmp_path)) as w:
        config = cli_config(tmp_path, dev_env, w)
        name = job_name("run")
        argv = zephyr_argv(*ENDLESS, "--stuck-at", "4", "--show-env", "HF_TOKEN")
        done = await keeper(
            config, "job", "run", "--name", name, "--memory", "256MB",
            "--env", f"HF_TOKEN={secret}", "--env", "DATASET=fineweb",
            "--json", "--", *argv,
            env={"USER": "oncall"},
        )  # fmt: skip
        assert done.code == 0, done
        job = done.json()["job_id"]
        assert job == f"/{USER}/{name}", done.json()
        w.adopt(job)
        handle = dev_env.client.get_workflow_handle(watch_id(job), result_type=JobWatchResult)
        view = await w.until_view(
            handle,
            lambda v: pending(v, ProposalKind.RESTART) or v.phase is WatchPhase.FINISHED,
            within=60,
            what="a restart proposal",
        )
        # iris accepts a LaunchJob it then fails (replicas 0, say): the job must have run.
        assert view.phase is not WatchPhase.FINISHED, f"{job} ended {view.job_state}: {view.cause}"
        assert any("has stood at 4/400" in e for e in view.escalations), view.escalations
        assert await w.state(job) == "JOB_STATE_RUNNING" and await w.keeper_launched() == []
        restart = pending(view, ProposalKind.RESTART)
        assert restart is not None
        answer = await handle.execute_update(
            APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
        )
        assert answer.state is ProposalState.DONE, answer
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.RESTARTED, result
        new_job = f"/{USER}/{name}-r1"
        assert result.new_job_id == new_job
        assert await w.keeper_launched() == [new_job]
        assert await w.state(job) == "JOB_STATE_KILLED"
        try:
            relaunched = (await w.status(new_job))["request"]
            assert relaunched["entrypoint"]["runCommand"]["argv"] == argv
            env = relaunched["environment"]["envVars"]
            assert env == {"HF_TOKEN": "[REDACTED]", "DATASET": "fineweb"}, env
            # What iris shows redacted, the relaunched job was given whole: its driver's own
            # digest of the credential.
            shown = f"env HF_TOKEN: sha256 {digest(secret)}"
            await until(
                lambda: _logged(w, f"{new_job}/0", shown),
                within=30,
                what="the relaunched driver's digest of HF_TOKEN",
            )
            # The new job is watched by a watch of its own.
            assert result.new_watch_id is not None
            child = dev_env.client.get_workflow_handle(result.new_watch_id)
            child_view = await w.until_view(child, lambda v: v.checks >= 1, what="the new watch")
            assert child_view.restart_of == job and child_view.restarts == 1
            await child.cancel()
        finally:
            await w.client_iris.terminate_job(new_job)


async def _logged(w: RealIrisWorld, task: str, text: str) -> bool:
    return text in await log_text(w.client_iris, task)
