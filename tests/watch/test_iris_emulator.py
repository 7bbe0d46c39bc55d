"""The iris emulator over real HTTP (httpx), one scenario at a time: what a watcher sees."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from dev.emulator_iris import iris as iris_group
from emulators.iris import IrisEmulator, IrisEmulatorConfig, ManualWallClock, start_emulator
from emulators.iris.__main__ import parse_args
from emulators.iris.service import literal_prefix
from keeper.domain.watch.names import ChildRef, pick_latest
from keeper.domain.watch.redaction import redaction_marks
from keeper.domain.watch.threads import ThreadState, read_dump
from keeper.runtime.watch.credentials import TOKEN_ENV, IrisToken
from keeper.runtime.watch.iris_client import IrisController, LogRoute, fetch_logs_source
from keeper.runtime.watch.iris_errors import IrisAlreadyExists, IrisUnavailable, JobNotFound
from keeper.runtime.watch.iris_http import AiohttpPost, Answer
from keeper.wire.iris.codec import to_wire
from keeper.wire.iris.connect import (
    FETCH_LOGS,
    FINELOG_FETCH_LOGS,
    GET_TASK_LOGS,
    PROXIED_FETCH_LOGS,
    ConnectErrorBody,
)
from keeper.wire.iris.exec_commands import (
    CLK_TCK,
    COORDINATOR_CPU_COMMAND,
    PROC_STAT_COMMAND,
    SESSION_CPU_COMMAND,
    parse_proc_stat,
    parse_session_cpu,
    proc_stat_answer,
    split_coordinator_cpu,
)
from keeper.wire.iris.messages import FetchLogsRequest, LaunchJobRequest

CTL = "/iris.cluster.ControllerService"
CHILD = re.compile(
    r"^/alice/(?P<job>[^/]+)/zephyr-(?P<ctx>.+)-(?P<hash>[0-9a-f]{8})-p(?P<p>\d+)-a(?P<a>\d+)-(?P<role>coord|workers)$"
)
PROGRESS = re.compile(
    r"\[(?P<stage>[^\]]+)\] (?P<done>\d+)/(?P<total>\d+) complete, (?P<inflight>\d+) in-flight, "
    r"(?P<queued>\d+) queued, (?P<alive>\d+)/(?P<reg>\d+) workers alive, (?P<dead>\d+) dead"
)
NOISE = ("pull_task", "Started operation", "report_result", "registered", "tasks completed")


class Iris:
    def __init__(self, emu: IrisEmulator, wall: ManualWallClock, client: httpx.AsyncClient):
        self.emu, self.wall, self.http = emu, wall, client

    async def rpc(self, method: str, body: dict[str, Any], status: int = 200) -> Any:
        response = await self.http.post(f"{CTL}/{method}", json=body)
        assert response.status_code == status, response.text
        return response.json()

    async def control(self, path: str, body: dict[str, Any] | None = None) -> Any:
        response = await self.http.post(f"/control/{path}", json=body or {})
        assert response.status_code < 300, response.text
        return response.json()

    async def job(self, name: str, scenario: str, **overrides: Any) -> str:
        body = {"name": name, "scenario": scenario, "seed": 7, "overrides": overrides}
        return str((await self.control("jobs", body))["job_id"])

    async def forward(self, seconds: float) -> None:
        await self.control("clock/fast-forward", {"seconds": seconds})

    async def children(self, job_id: str) -> dict[str, dict[str, Any]]:
        query = {"query": {"scope": "JOB_QUERY_SCOPE_CHILDREN", "parentJobId": job_id}}
        return {j["jobId"]: j for j in (await self.rpc("ListJobs", query))["jobs"]}

    async def child(self, job_id: str, role: str, attempt: int = 0, pipeline: int = 0) -> str:
        for child in await self.children(job_id):
            m = CHILD.match(child)
            if m and m["role"] == role and (int(m["p"]), int(m["a"])) == (pipeline, attempt):
                return child
        raise AssertionError(f"no {role} a{attempt} under {job_id}")

    async def tasks(self, job_id: str) -> list[dict[str, Any]]:
        return list((await self.rpc("ListTasks", {"jobId": job_id}))["tasks"])

    async def logs(
        self,
        task_or_job: str,
        lines: int = 400,
        *,
        substring: str = "",
        min_level: str = "",
        include_children: bool = False,
    ) -> list[dict[str, Any]]:
        """The newest `lines` of a task or of a job's tasks, as the controller serves them:
        FetchLogs through its proxy to the log server."""
        source, scope = fetch_logs_source(task_or_job, -1, include_children)
        request = FetchLogsRequest(
            source=source,
            match_scope=scope,
            max_lines=lines,
            tail=True,
            substring=substring,
            min_level=min_level,
        )
        answer = await self.http.post(PROXIED_FETCH_LOGS, json=to_wire(request))
        assert answer.status_code == 200, answer.text
        return list(answer.json().get("entries", []))

    async def progress(self, coord: str) -> list[re.Match[str]]:
        found = [PROGRESS.search(e["data"]) for e in await self.logs(coord)]
        return [m for m in found if m and "workers alive" in m.group(0)]

    async def dump(self, task_id: str) -> dict[str, Any]:
        body = {"target": task_id, "durationSeconds": 1, "profileType": {"threads": {}}}
        return dict(await self.rpc("ProfileTask", body))

    async def exec(self, task_id: str, command: list[str]) -> dict[str, Any]:
        return dict(await self.rpc("ExecInContainer", {"taskId": task_id, "command": command}))

    async def ticks(self, task_id: str) -> dict[int, tuple[int, int]]:
        """pid -> (utime + stime, starttime) of the task's processes (the exec's own shell
        is not one of them)."""
        out = (await self.exec(task_id, PROC_STAT_COMMAND))["stdout"]
        return {s.pid: (s.cpu_ticks, s.starttime) for s in parse_proc_stat(out)}


@pytest.fixture
async def iris() -> AsyncIterator[Iris]:
    wall = ManualWallClock()
    emu = await start_emulator(IrisEmulatorConfig(settle_interval=0), wall)
    try:
        async with httpx.AsyncClient(base_url=emu.url, timeout=5) as client:
            yield Iris(emu, wall, client)
    finally:
        await emu.stop()


async def test_healthy_children_are_named_per_the_contract_and_stages_advance_to_succeeded(
    iris: Iris,
) -> None:
    job = await iris.job("tokenize-fineweb", "healthy")
    await iris.forward(100)
    kids = await iris.children(job)
    matches = [CHILD.match(k) for k in kids]
    assert all(matches) and {m["role"] for m in matches if m} == {"coord", "workers"}
    assert {m["hash"] for m in matches if m} and all(m and m["a"] == "0" for m in matches)
    coord = await iris.child(job, "coord")
    (ctask,) = await iris.tasks(coord)
    assert ctask["state"] == "TASK_STATE_RUNNING" and ctask["workerId"]
    assert ctask["currentAttemptId"] == 0 and ctask["attempts"][0]["attemptId"] == 0
    workers = await iris.tasks(await iris.child(job, "workers"))
    assert len(workers) == 8 and all(t["state"] == "TASK_STATE_RUNNING" for t in workers)
    first = (await iris.progress(coord))[-1]
    await iris.forward(600)
    later = (await iris.progress(coord))[-1]
    assert (later["stage"], later["done"]) != (first["stage"], first["done"])
    assert first["stage"] == "stage0-Map → Shuffle" and later["stage"] == "stage1-Reduce → Scatter"
    await iris.forward(1000)
    status = await iris.rpc("GetJobStatus", {"jobId": job})
    assert status["job"]["state"] == "JOB_STATE_SUCCEEDED"
    assert (await iris.rpc("GetJobState", {"jobIds": [job, coord]}))["states"] == {
        job: "JOB_STATE_SUCCEEDED",
        coord: "JOB_STATE_SUCCEEDED",
    }


async def test_coordinator_log_is_flooded_with_noise_at_the_configured_ratio(iris: Iris) -> None:
    job = await iris.job("noisy", "healthy", noise_ratio=20)
    await iris.forward(200)
    entries = await iris.logs(await iris.child(job, "coord"), lines=2100)
    noise = [e for e in entries if any(w in e["data"] for w in NOISE)]
    progress = [e for e in entries if "workers alive" in e["data"]]
    assert 18 <= len(noise) / len(progress) <= 22
    assert not any(any(w in e["data"] for w in NOISE) for e in progress)


# iris's callable runner's format for the Python a task runs (zephyr's actors), on stderr.
IRIS_PREFIX = r"^I\d{8} \d{2}:\d{2}:\d{2} zephyr\.execution\.coordinator "


@pytest.mark.parametrize(
    ("log_format", "level_style", "shape", "level", "source"),
    [
        ("oldest", "string", r"^\[stage0-Map → Shuffle\] \d+/1000 complete", "INFO", "stdout"),
        (
            "later",
            "enum",
            IRIS_PREFIX + r"\[[^\]]+\] \[stage0.*dead; items=\d+ \([\d.]+/s\), bytes_",
            None,
            "stderr",
        ),
        (
            "newest",
            "enum",
            IRIS_PREFIX + r"\[[^\]]+\] \[stage0.*dead\. [\d.]+ items/s",
            None,
            "stderr",
        ),
    ],
)
async def test_progress_lines_take_the_scenario_format_and_level_style(
    iris: Iris, log_format: str, level_style: str, shape: str, level: str | None, source: str
) -> None:
    job = await iris.job("fmt", "healthy", log_format=log_format, level_style=level_style)
    await iris.forward(100)
    entries = await iris.logs(await iris.child(job, "coord"), substring="workers alive")
    assert entries and all(re.search(shape, e["data"]) for e in entries)
    assert {e["level"] for e in entries} == {level or "LOG_LEVEL_INFO"}
    assert {e["source"] for e in entries} == {source}
    assert {"timestamp", "source", "data", "attemptId"} <= set(entries[0])


async def test_thread_dumps_have_py_spy_0_4s_shape_on_a_python_3_11_worker(iris: Iris) -> None:
    """As py-spy 0.4 prints them: the process and Python version first, threads by decimal
    OS id (the main thread's is the pid), methods by qualified name, no blank line between
    threads; keeper's reader reads them as before."""
    job = await iris.job("shape", "healthy")
    await iris.forward(200)
    coord = await iris.child(job, "coord")
    text = base64.b64decode((await iris.dump(f"{coord}/0"))["profileData"]).decode()
    lines = text.splitlines()
    assert re.fullmatch(r"Process \d+: .+", lines[0]) and lines[1].startswith("Python v3.1")
    headers = [line for line in lines if line.startswith("Thread ")]
    assert all(re.fullmatch(r'Thread \d+ \([a-z+]+\): "[^"]+"', h) for h in headers), headers
    assert headers[0].startswith(f"Thread {lines[0].split()[1].rstrip(':')} ")
    frames = [line.strip() for line in lines if line.startswith("    ")]
    assert "ZephyrCoordinator._wait_for_stage (zephyr/execution.py:412)" in frames
    assert "ZephyrCoordinator._coordinator_loop (zephyr/execution.py:233)" in frames
    assert "Condition.wait (threading.py:331)" in frames and "" not in lines[3:]
    assert read_dump(text).state is ThreadState.ACTIVE
    workers = await iris.child(job, "workers")
    busy = base64.b64decode((await iris.dump(f"{workers}/0"))["profileData"]).decode()
    assert "ZephyrWorker._poll_loop (zephyr/worker.py:140)" in busy


LEVEL_LETTERS = {"D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "C": "CRITICAL"}


@pytest.mark.parametrize("log_format", ["oldest", "newest"])
async def test_a_lines_level_is_irises_reading_of_its_letter_else_its_stream(
    iris: Iris, log_format: str
) -> None:
    """As iris classifies a line: a leading level letter and a digit decide; else stdout is
    INFO and stderr ERROR. zephyr's coordinator, driver and worker logging comes in iris's
    format on stderr, a worker's traceback bare on stderr."""
    job = await iris.job("levels", "repeated-failure", log_format=log_format)
    await iris.forward(330)
    entries = await iris.logs(job, lines=5000, include_children=True)
    for entry in entries:
        letter = re.match(r"([DIWEC])\d", entry["data"])
        want = LEVEL_LETTERS[letter.group(1)] if letter else None
        want = want or {"stdout": "INFO", "stderr": "ERROR"}[entry["source"]]
        assert entry["level"].removeprefix("LOG_LEVEL_") == want, entry
    by_text = {e["data"]: e for e in entries}
    (traceback,) = {e["source"] for t, e in by_text.items() if t.startswith("Traceback")}
    assert traceback == "stderr"
    aborted = [e for t, e in by_text.items() if "Coordinator aborted" in t]
    assert aborted and all(e["level"].endswith("ERROR") for e in aborted)
    if log_format == "newest":
        retried = [e for t, e in by_text.items() if "task error 1/3" in t]
        assert retried and all(e["level"].endswith("WARNING") for e in retried)
        assert all(re.match(r"W\d{8} [\d:]{8} zephyr\.execution\.coordinator Shard", e["data"])
                   for e in retried)  # fmt: skip
        driver = [e for e in entries if e["key"].startswith(f"{job}/0:")]
        assert driver and all(" zephyr.execution " in e["data"] for e in driver)


async def test_zombie_coordinator_dumps_only_idle_workers_and_logs_no_more_progress(
    iris: Iris,
) -> None:
    job = await iris.job("z", "zombie-coordinator")
    await iris.forward(200)
    coord = await iris.child(job, "coord")
    live = (await iris.dump(f"{coord}/0"))["profileData"]
    assert "_wait_for_stage" in base64.b64decode(live).decode()
    await iris.forward(400)
    before = await iris.progress(coord)
    dump = base64.b64decode((await iris.dump(f"{coord}/0"))["profileData"]).decode()
    assert "_coordinator_loop" not in dump and "_wait_for_stage" not in dump
    assert "_worker (concurrent/futures/thread.py:83)" in dump
    first = await iris.ticks(f"{coord}/0")
    iris.wall.advance(5)
    await iris.forward(300)
    assert await iris.ticks(f"{coord}/0") == first
    assert [m.group(0) for m in await iris.progress(coord)] == [m.group(0) for m in before]
    (task,) = await iris.tasks(coord)
    assert task["state"] == "TASK_STATE_RUNNING"


async def test_killed_retry_starts_a_new_attempt_with_a_new_hash_and_leaves_a_stale_coordinator(
    iris: Iris,
) -> None:
    job = await iris.job("kr", "killed-retry")
    await iris.forward(360)
    old_coord, old_workers = await iris.child(job, "coord", 0), await iris.child(job, "workers", 0)
    new_coord = await iris.child(job, "coord", 1)
    assert CHILD.match(old_coord)["hash"] != CHILD.match(new_coord)["hash"]  # type: ignore[index]
    assert {t["state"] for t in await iris.tasks(old_workers)} == {"TASK_STATE_KILLED"}
    assert (await iris.tasks(old_coord))[0]["state"] == "TASK_STATE_RUNNING"
    await iris.forward(300)
    assert (await iris.progress(new_coord))[-1]["stage"].startswith("stage0")
    await iris.forward(1500)
    assert (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]["state"] == "JOB_STATE_SUCCEEDED"


async def test_stuck_stage_keeps_logging_the_same_count_with_flat_worker_cpu(iris: Iris) -> None:
    job = await iris.job("st", "stuck-stage")
    await iris.forward(800)
    coord, workers = await iris.child(job, "coord"), await iris.child(job, "workers")
    first = (await iris.progress(coord))[-1]
    cpu = await iris.ticks(f"{workers}/0")
    iris.wall.advance(5)
    await iris.forward(1800)
    last = (await iris.progress(coord))[-1]
    assert (last["stage"], last["done"]) == (first["stage"], first["done"]) and last[
        "stage"
    ].startswith("stage1")
    assert await iris.ticks(f"{workers}/0") == cpu
    dump = base64.b64decode((await iris.dump(f"{coord}/0"))["profileData"]).decode()
    assert "_coordinator_loop" in dump


async def test_stragglers_hold_one_shard_in_flight_with_nothing_queued_for_hours(
    iris: Iris,
) -> None:
    job = await iris.job("sg", "stragglers")
    await iris.forward(3 * 3600)
    last = (await iris.progress(await iris.child(job, "coord")))[-1]
    assert (last["done"], last["total"], last["inflight"], last["queued"]) == (
        "999",
        "1000",
        "1",
        "0",
    )


async def test_oom_straggler_cycles_the_last_shard_between_in_flight_and_queued(
    iris: Iris,
) -> None:
    job = await iris.job("os", "oom-straggler")
    await iris.forward(1300)  # two turns of the OOM loop past the tail (at ~791 s and ~1091 s)
    coord = await iris.child(job, "coord")
    beats = await iris.logs(coord, lines=2000, substring="workers alive")
    found = [PROGRESS.search(e["data"]) for e in beats]
    tails = {(m["done"], m["inflight"], m["queued"]) for m in found if m and m["done"] == "4999"}
    assert tails == {("4999", "1", "0"), ("4999", "0", "1")}, tails
    workers = await iris.child(job, "workers")
    errors = await iris.logs(workers, lines=2000, include_children=True, min_level="ERROR")
    ooms = [e for e in errors if "CUDA out of memory" in e["data"]]
    assert len(ooms) == 2, [e["data"] for e in errors]
    attempts = {t["taskId"]: int(t.get("currentAttemptId", 0)) for t in await iris.tasks(workers)}
    assert sorted(attempts.values())[-2:] == [0, 2], attempts  # the culprit restarted twice


async def test_repeated_failure_repeats_one_traceback_until_the_job_fails(iris: Iris) -> None:
    job = await iris.job("rf", "repeated-failure")
    await iris.forward(350)
    coord = await iris.child(job, "coord")
    lines = [e["data"] for e in await iris.logs(coord, lines=5000, substring="Shard")]
    errs = [
        re.search(r"Shard (\d+) failed on worker (\S+) \(task error (\d+)/(\d+)\)", d)
        for d in lines
    ]
    errs = [m for m in errs if m]
    assert [m[3] for m in errs] == ["1", "2", "3"] and len({m[1] for m in errs}) == 1
    workers = await iris.child(job, "workers")
    tracebacks = [e["data"] for e in await iris.logs(workers, lines=5000, substring="Error")]
    assert len(set(tracebacks)) == 1 and len(tracebacks) == 3
    assert (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]["state"] == "JOB_STATE_FAILED"


async def test_repeated_failure_restarts_the_worker_process_with_the_same_pid_and_a_new_start(
    iris: Iris,
) -> None:
    job = await iris.job("pid", "repeated-failure", event_at=100, max_task_errors=4)
    await iris.forward(50)
    workers = await iris.child(job, "workers")
    culprit = iris.emu.controller.jobs[job].plan.culprit_worker
    before = await iris.ticks(f"{workers}/{culprit}")
    iris.wall.advance(0.1)  # six scenario seconds
    await iris.forward(60)
    (task,) = [t for t in await iris.tasks(workers) if t["taskId"].endswith(f"/{culprit}")]
    assert task["currentAttemptId"] == 1 and task["attempts"][0]["state"] == "TASK_STATE_FAILED"
    after = await iris.ticks(f"{workers}/{culprit}")
    assert 7 in before and 7 in after and after[7][1] != before[7][1]


async def test_rpc_timeouts_hang_then_answer_unavailable_then_recover(iris: Iris) -> None:
    job = await iris.job("rt", "rpc-timeouts")
    await iris.forward(130)
    with pytest.raises(httpx.ReadTimeout):
        await iris.http.post(f"{CTL}/GetJobStatus", json={"jobId": job}, timeout=0.3)
    await iris.forward(120)
    refused = await iris.http.post(f"{CTL}/GetJobStatus", json={"jobId": job})
    assert refused.status_code == 503 and refused.json()["code"] == "unavailable"
    await iris.forward(200)
    assert (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]["state"] == "JOB_STATE_RUNNING"


async def test_a_control_fault_makes_every_controller_rpc_unavailable_until_cleared(
    iris: Iris,
) -> None:
    await iris.control("faults", {"mode": "unavailable"})
    assert (await iris.http.post(f"{CTL}/ListJobs", json={})).status_code == 503
    await iris.control("faults", {"mode": "off"})
    await iris.rpc("ListJobs", {})


async def test_terminated_by_user_hides_a_worker_oom_behind_the_kill(iris: Iris) -> None:
    job = await iris.job("tu", "terminated-by-user")
    await iris.forward(400)
    status = (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]
    assert status["state"] == "JOB_STATE_KILLED" and status["error"] == "Terminated by user"
    workers = await iris.child(job, "workers")
    assert {t["error"] for t in await iris.tasks(workers)} == {"Terminated by user"}
    found = await iris.logs(workers, lines=5000, substring="CUDA out of memory")
    assert found and found[0]["source"] == "stderr"


async def test_finish_while_down_completes_within_seconds(iris: Iris) -> None:
    job = await iris.job("fw", "finish-while-down")
    await iris.forward(120)
    assert (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]["state"] == "JOB_STATE_SUCCEEDED"


async def test_cpu_bound_quiet_burns_twenty_cores_while_the_session_counter_resets(
    iris: Iris,
) -> None:
    job = await iris.job("cq", "cpu-bound-quiet")
    await iris.forward(600)
    task = f"{await iris.child(job, 'workers')}/0"
    first = await iris.ticks(task)
    iris.wall.advance(3)
    second = await iris.ticks(task)
    burned = sum(v[0] for v in second.values()) - sum(v[0] for v in first.values())
    assert abs(burned - 20 * CLK_TCK * 3) <= 3
    readings = []
    for _ in range(6):
        iris.wall.advance(1)
        readings.append(float((await iris.exec(task, SESSION_CPU_COMMAND))["stdout"]))
    assert any(b < a for a, b in itertools.pairwise(readings))
    iris.wall.advance(100)  # 6,000 scenario seconds at 60x
    progress = await iris.logs(await iris.child(job, "coord"), substring="workers alive")
    gaps = [
        int(b["timestamp"]["epochMs"]) - int(a["timestamp"]["epochMs"])
        for a, b in itertools.pairwise(progress)
    ]
    # Lines 40 scenario minutes apart are 40 wall seconds apart (stamps are wall time).
    assert gaps and max(gaps) >= 30 * 1000


async def test_hung_busy_shows_hours_of_cpu_that_no_longer_advance(iris: Iris) -> None:
    job = await iris.job("hb", "hung-busy")
    task = f"{await iris.child(job, 'workers')}/0"
    first = await iris.ticks(task)
    assert first[7][0] > 3 * 3600 * 19 * CLK_TCK
    iris.wall.advance(5)
    assert await iris.ticks(task) == first
    coord = await iris.child(job, "coord")
    dump = base64.b64decode((await iris.dump(f"{coord}/0"))["profileData"]).decode()
    assert "_coordinator_loop" in dump and "_wait_for_stage" not in dump


async def test_dead_worker_fails_exec_and_profile_and_goes_silent_while_running(
    iris: Iris,
) -> None:
    job = await iris.job("dw", "dead-worker")
    await iris.forward(200)
    coord = await iris.child(job, "coord")
    before = await iris.logs(coord)
    await iris.forward(600)
    assert await iris.logs(coord) == before
    assert (await iris.exec(f"{coord}/0", PROC_STAT_COMMAND))["error"]
    assert (await iris.dump(f"{coord}/0"))["error"]
    assert (await iris.tasks(coord))[0]["state"] == "TASK_STATE_RUNNING"


async def test_a_denied_proc_fails_the_stat_read_while_ps_still_answers(iris: Iris) -> None:
    job = await iris.job("pd", "cpu-bound-quiet", proc_stat="denied")
    await iris.forward(600)
    task = f"{await iris.child(job, 'coord')}/0"
    stat = await iris.exec(task, PROC_STAT_COMMAND)
    # The shell's own line, then nothing from cat: no answer.
    assert (stat.get("exitCode"), stat.get("error", "")) == (1, "")
    assert re.fullmatch(r"keeper-exec-pid \d+\n", stat["stdout"]), stat
    assert proc_stat_answer(stat["stdout"], stat["exitCode"]) is None
    session = await iris.exec(task, SESSION_CPU_COMMAND)
    assert session.get("exitCode", 0) == 0 and float(session["stdout"]) >= 0


async def test_the_coordinators_one_exec_answers_as_its_two_commands_do(iris: Iris) -> None:
    """COORDINATOR_CPU_COMMAND: the stat lines, cat's exit status, the session's number;
    with /proc denied, the stat part is cat's failure alone and the session still answers."""
    for name, proc_stat in (("both", "readable"), ("denied", "denied")):
        job = await iris.job(f"c1-{name}", "cpu-bound-quiet", proc_stat=proc_stat)
        await iris.forward(600)
        task = f"{await iris.child(job, 'coord')}/0"
        answer = await iris.exec(task, COORDINATOR_CPU_COMMAND)
        assert answer.get("exitCode", 0) == 0
        stat, session = split_coordinator_cpu(answer["stdout"])
        assert session is not None and parse_session_cpu(session) is not None
        if proc_stat == "denied":
            assert stat is None
        else:
            assert stat is not None and parse_proc_stat(stat)


async def test_other_commands_exit_127(iris: Iris) -> None:
    job = await iris.job("cmd", "healthy")
    await iris.forward(60)
    answer = await iris.exec(f"{await iris.child(job, 'coord')}/0", ["nvidia-smi"])
    assert answer["exitCode"] == 127


async def test_terminate_cascades_is_recorded_and_the_rebuilt_request_relaunches(
    iris: Iris,
) -> None:
    request = {
        "name": "/alice/pipe",
        "resources": {"cpuMillicores": 4000},
        "environment": {"envVars": {"IRIS_EMULATOR_SCENARIO": "healthy", "X": "1"}},
        "maxRetriesFailure": 2,
    }
    rebuilt = {
        **BARE_REQUEST,
        "name": "/alice/pipe",
        "resources": {"cpuMillicores": 4000, "memoryBytes": "0", "device": {}, "diskBytes": "0"},
        "environment": {"envVars": {"IRIS_EMULATOR_SCENARIO": "healthy", "X": "1"}},
        "maxRetriesFailure": 2,
    }
    assert (await iris.rpc("LaunchJob", request))["jobId"] == "/alice/pipe"
    await iris.rpc("LaunchJob", request, status=409)
    await iris.forward(60)
    assert (await iris.http.get("/control/actions")).json()["actions"][0]["method"] == "LaunchJob"
    await iris.rpc("TerminateJob", {"jobId": "/alice/pipe"})
    for child in await iris.children("/alice/pipe"):
        assert {t["error"] for t in await iris.tasks(child)} == {"Terminated by user"}
    status = await iris.rpc("GetJobStatus", {"jobId": "/alice/pipe"})
    assert status["job"]["state"] == "JOB_STATE_KILLED"
    assert status["request"] == rebuilt
    await iris.rpc("LaunchJob", status["request"])  # what the controller returns, it takes
    actions = (await iris.http.get("/control/actions")).json()["actions"]
    assert [(a["method"], a["outcome"]) for a in actions] == [
        ("LaunchJob", "ok"),
        ("LaunchJob", "already_exists"),
        ("TerminateJob", "ok"),
        ("LaunchJob", "ok"),
    ]
    await iris.rpc("TerminateJob", {"jobId": "/alice/none"}, status=404)


async def test_control_jobs_are_not_actions(iris: Iris) -> None:
    await iris.job("quiet", "healthy")
    assert (await iris.http.get("/control/actions")).json()["actions"] == []


async def test_next_scenario_is_what_launch_job_plays(iris: Iris) -> None:
    await iris.control("next-scenario", {"scenario": "hung-busy"})
    await iris.rpc("LaunchJob", {"name": "/alice/next"})
    assert iris.emu.controller.jobs["/alice/next"].scenario.name == "hung-busy"


async def test_logs_are_served_only_through_the_log_server_proxy_as_the_controller_does(
    iris: Iris,
) -> None:
    job = await iris.job("nl", "healthy")
    await iris.forward(60)
    coord = await iris.child(job, "coord")
    # No GetTaskLogs (the Connect app's 404, no body), no LogService at the controller's own
    # paths (the web server's plain "Not Found").
    gone = await iris.http.post(GET_TASK_LOGS, json={"id": f"{coord}/0"})
    assert (gone.status_code, gone.content) == (404, b"")
    for path in (FETCH_LOGS, FINELOG_FETCH_LOGS):
        direct = await iris.http.post(path, json={"source": f"{coord}/0:0"})
        assert (direct.status_code, direct.text) == (404, "Not Found")
    body = {"source": f"{coord}/0:", "matchScope": "MATCH_SCOPE_PREFIX", "maxLines": 5}
    fetched = await iris.http.post(PROXIED_FETCH_LOGS, json=body)
    assert fetched.status_code == 200 and len(fetched.json()["entries"]) == 5
    cursor = fetched.json()["cursor"]
    more = await iris.http.post(PROXIED_FETCH_LOGS, json={**body, "cursor": cursor})
    assert int(more.json()["entries"][0]["seq"]) > int(cursor)
    # Only finelog's LogService is behind the proxy.
    other = await iris.http.post(f"/proxy/system.log-server{CTL}/ListJobs", json={})
    assert other.status_code == 404
    assert iris.emu.state()["log_routes"] == ["proxy"]


async def test_the_older_log_routes_are_offered_when_asked_for(iris: Iris) -> None:
    job = await iris.job("older", "healthy")
    await iris.forward(60)
    coord = await iris.child(job, "coord")
    answer = await iris.control("log-routes", {"routes": ["get_task_logs", "fetch_logs"]})
    assert answer == {"log_routes": ["get_task_logs", "fetch_logs"]}
    got = await iris.rpc("GetTaskLogs", {"id": f"{coord}/0", "maxTotalLines": 3})
    assert len(got["taskLogs"][0]["logs"]) == 3
    for path in (FETCH_LOGS, FINELOG_FETCH_LOGS):
        fetched = await iris.http.post(path, json={"source": f"{coord}/0:0", "maxLines": 3})
        assert fetched.status_code == 200 and len(fetched.json()["entries"]) == 3
    proxied = await iris.http.post(PROXIED_FETCH_LOGS, json={"source": f"{coord}/0:0"})
    assert proxied.status_code == 404
    refused = await iris.http.post("/control/log-routes", json={"routes": ["grpc"]})
    assert refused.status_code == 400 and "grpc" in refused.json()["error"]


async def test_bearer_token_mode_refuses_strangers_and_roots_jobs_under_the_subject() -> None:
    emu = await start_emulator(
        IrisEmulatorConfig(tokens={"s3cret": "bob"}, settle_interval=0), ManualWallClock()
    )
    bob = {"Authorization": "Bearer s3cret"}
    try:
        async with httpx.AsyncClient(base_url=emu.url) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = await http.post(f"{CTL}/ListJobs", json={}, headers=headers)
                assert answer.status_code == 401 and answer.json()["code"] == "unauthenticated"
            me = await http.post(f"{CTL}/GetCurrentUser", json={}, headers=bob)
            assert me.json() == {"userId": "bob", "role": "user"}
            # A caller who is not an admin launches its root jobs under its own user.
            ok = await http.post(f"{CTL}/LaunchJob", json={"name": "/alice/mine"}, headers=bob)
            assert ok.json() == {"jobId": "/bob/mine"}
            bare = await http.post(f"{CTL}/LaunchJob", json={"name": "mine"}, headers=bob)
            assert bare.status_code == 500 and bare.json()["code"] == "internal"
        token = IrisToken(environ={TOKEN_ENV: "s3cret"})
        async with IrisController(emu.url, token=token, timeout=5) as client:
            assert await client.launch_job(LaunchJobRequest(name="theirs")) == "/bob/theirs"
    finally:
        await emu.stop()


async def test_get_current_user_and_a_bare_launch_name_fail_as_the_controller_does(
    iris: Iris,
) -> None:
    assert await iris.rpc("GetCurrentUser", {}) == {"userId": "anonymous", "role": "admin"}
    message = "RPC LaunchJob: Job name must use canonical '/<user>/<job>[...]' format: tokenize"
    refused = await iris.http.post(f"{CTL}/LaunchJob", json={"name": "tokenize"})
    assert refused.status_code == 500
    body = ConnectErrorBody.model_validate(refused.json())
    assert (body.code, body.message) == ("internal", message)
    details = body.error_details()
    assert details is not None
    assert (details.exception_type, details.message) == ("builtins.ValueError", message)
    empty = await iris.http.post(f"{CTL}/LaunchJob", json={"name": "/alice//x"})
    assert empty.status_code == 500 and "empty or whitespace-only component" in empty.text
    nameless = await iris.http.post(f"{CTL}/LaunchJob", json={"name": ""})
    assert nameless.status_code == 400 and nameless.json()["message"] == "Job name is required"
    assert [(a["method"], a["job_id"], a["outcome"]) for a in iris.emu.actions_json()] == [
        ("LaunchJob", "tokenize", "internal"),
        ("LaunchJob", "/alice//x", "internal"),
    ]
    assert iris.emu.controller.jobs == {}
    # keeper's client asks who it is and sends the canonical name.
    async with IrisController(iris.emu.url, timeout=5) as client:
        assert await client.launch_job(LaunchJobRequest(name="tokenize")) == "/anonymous/tokenize"


async def test_the_same_seed_gives_the_same_names(iris: Iris) -> None:
    a = await iris.job("same", "healthy")
    await iris.forward(30)
    first = sorted(await iris.children(a))
    other = await start_emulator(IrisEmulatorConfig(settle_interval=0), ManualWallClock())
    try:
        job = other.create_job("same", "alice", "healthy", seed=7)
        names = sorted(v.job_id for v in job.jobs(30)[1:])
    finally:
        await other.stop()
    assert names == first


def test_parse_args_takes_port_tokens_and_the_log_routes() -> None:
    config = parse_args(["--port", "10001", "--token", "t=bob", "--log-routes", "proxy,fetch_logs"])
    assert (config.port, dict(config.tokens)) == (10001, {"t": "bob"})
    assert config.log_routes == ("fetch_logs", "proxy")
    assert parse_args([]).log_routes == ("proxy",)
    with pytest.raises(SystemExit):
        parse_args(["--log-routes", "grpc"])


async def test_not_found_is_a_connect_error(iris: Iris) -> None:
    answer = await iris.http.post(f"{CTL}/GetJobStatus", json={"jobId": "/alice/ghost"})
    assert answer.status_code == 404 and answer.json()["code"] == "not_found"
    await asyncio.sleep(0)


async def test_a_hang_ends_in_deadline_exceeded_at_the_clients_connect_timeout(
    iris: Iris,
) -> None:
    await iris.control("faults", {"mode": "hang", "methods": ["ListTasks"]})
    hung = await iris.http.post(f"{CTL}/ListTasks", json={}, headers={"Connect-Timeout-Ms": "200"})
    assert hung.status_code == 504 and hung.json()["code"] == "deadline_exceeded"
    await iris.rpc("ListJobs", {})  # other methods are not hung


# What the real controller answered (marin-iris 0.2.227.dev40316220070, a local cluster).
LAUNCH_FIELDS = (
    "['name', 'entrypoint', 'resources', 'environment', 'bundleId', 'bundleBlob', "
    "'schedulingTimeout', 'ports', 'maxTaskFailures', 'maxRetriesFailure', "
    "'maxRetriesPreemption', 'constraints', 'coscheduling', 'replicas', 'timeout', "
    "'failIfExists', 'preemptionPolicy', 'existingJobPolicy', 'priorityBand', 'taskImage', "
    "'submitArgv', 'clientRevisionDate', 'containerProfile', 'egressPolicy', 'federation']"
)
REFUSED = [
    (
        {"reservation": {}},
        'Message type "iris.cluster.Controller.LaunchJobRequest" has no field named '
        f'"reservation" at "LaunchJobRequest".\n Available Fields(except extensions): '
        f'"{LAUNCH_FIELDS}"',
    ),
    (
        {"someNewerField": {"x": [1, 2]}, "reservation": None},
        'Message type "iris.cluster.Controller.LaunchJobRequest" has no field named '
        f'"someNewerField" at "LaunchJobRequest".\n Available Fields(except extensions): '
        f'"{LAUNCH_FIELDS}"',
    ),
    (
        {"environment": {"envVars": {"A": "1"}, "bogus": True}},
        'Failed to parse environment field: Message type "iris.job.EnvironmentConfig" has no '
        'field named "bogus" at "LaunchJobRequest.environment".\n Available Fields(except '
        "extensions): \"['envVars', 'secrets', 'setupScripts']\".",
    ),
    (
        {"entrypoint": {"runCommand": {"argv": ["x"], "bogus": 1}}},
        "Failed to parse entrypoint field: Failed to parse runCommand field: Message type "
        '"iris.job.CommandEntrypoint" has no field named "bogus" at '
        '"LaunchJobRequest.entrypoint.runCommand".\n Available Fields(except extensions): '
        "\"['argv']\"..",
    ),
    (
        {"resources": {"device": {"gpu": {"bogus": 1}}}},
        "Failed to parse resources field: Failed to parse device field: Message type "
        '"iris.job.GpuDevice" has no field named "bogus" at '
        '"LaunchJobRequest.resources.device.gpu".\n Available Fields(except extensions): '
        "\"['variant', 'count']\"..",
    ),
    (
        {"constraints": [{"key": "a", "bogus": 1}]},
        'Failed to parse constraints field: Message type "iris.job.Constraint" has no field '
        'named "bogus" at "LaunchJobRequest.constraints[0]".\n Available Fields(except '
        "extensions): \"['key', 'op', 'value', 'values', 'mode']\".",
    ),
    (
        {"priorityBand": "PRIORITY_BAND_NOPE"},
        "Failed to parse priorityBand field: Invalid enum value PRIORITY_BAND_NOPE for enum "
        "type iris.job.PriorityBand at LaunchJobRequest.priorityBand.",
    ),
]


@pytest.mark.parametrize(("fields", "message"), REFUSED)
async def test_launch_refuses_a_field_the_controller_does_not_have_as_it_does(
    iris: Iris, fields: dict[str, Any], message: str
) -> None:
    body = {"name": "/alice/odd", "entrypoint": {"runCommand": {"argv": ["true"]}}, **fields}
    refused = await iris.http.post(f"{CTL}/LaunchJob", json=body)
    assert refused.status_code == 500
    assert refused.json() == {"code": "unknown", "message": message}
    assert "/alice/odd" not in iris.emu.controller.jobs
    [action] = iris.emu.actions_json()
    assert (action["method"], action["job_id"], action["outcome"]) == (
        "LaunchJob", "/alice/odd", "unknown",
    )  # fmt: skip


# GetJobStatus's request for a LaunchJob of a name alone, as the controller returns it.
BARE_REQUEST = {
    "name": "/alice/bare",
    "entrypoint": {},
    "resources": {"cpuMillicores": 0, "memoryBytes": "0", "diskBytes": "0"},
    "environment": {},
    "bundleId": "",
    "maxTaskFailures": 0,
    "maxRetriesFailure": 0,
    "maxRetriesPreemption": 0,
    "replicas": 0,
    "failIfExists": False,
    "preemptionPolicy": "JOB_PREEMPTION_POLICY_UNSPECIFIED",
    "existingJobPolicy": "EXISTING_JOB_POLICY_UNSPECIFIED",
    "priorityBand": "PRIORITY_BAND_INTERACTIVE",
    "taskImage": "",
    "containerProfile": "CONTAINER_PROFILE_UNSPECIFIED",
    "egressPolicy": "EGRESS_POLICY_CLUSTER",
}
SK = "sk-abcdefghijklmnopqrstuvwxyz012345"
BLOB = base64.b64encode(b"PK\x05\x06" + b"\0" * 18).decode()
FULL_SENT = {
    "name": "/alice/Full-Case",
    "entrypoint": {
        "setupCommands": ["echo hi"],
        "runCommand": {"argv": ["python", "train.py", "--api-key", SK]},
        "workdirFiles": {"a.py": "cHJpbnQoMSk="},
        "workdirFileRefs": {"big.bin": "abc123"},
    },
    "resources": {
        "cpuMillicores": 200, "memoryBytes": "1000000", "diskBytes": "5000",
        "device": {"cpu": {}},
    },
    "environment": {
        "envVars": {
            "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
            "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
            "TOKENIZERS_PARALLELISM": "false",
            "max_tokens": "4096",
            "OPENAI_BASE": SK,
            "PLAIN": "hello world",
        },
        "secrets": {"DB_PASSWORD": "hunter2-secret"},
        "setupScripts": ["pip install x"],
    },
    "bundleBlob": BLOB,
    "schedulingTimeout": {"milliseconds": "60000"},
    "ports": ["http"],
    "maxTaskFailures": 2,
    "maxRetriesFailure": 3,
    "maxRetriesPreemption": 4,
    "replicas": 2,
    "timeout": {"milliseconds": "3600000"},
    "failIfExists": True,
    "preemptionPolicy": "JOB_PREEMPTION_POLICY_TERMINATE_CHILDREN",
    "existingJobPolicy": 2,
    "priorityBand": "PRIORITY_BAND_BATCH",
    "taskImage": "img:1",
    "submitArgv": ["iris", "job", "run", "-e", "HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123"],
    "clientRevisionDate": "2099-01-01",
    "coscheduling": {"groupBy": "host"},
    "constraints": [
        {"key": "pool", "op": "CONSTRAINT_OP_EQ", "value": {"stringValue": " A b "}},
        {
            "key": "region", "op": "CONSTRAINT_OP_IN", "mode": "CONSTRAINT_MODE_PREFERRED",
            "values": [{"stringValue": "X"}, {"intValue": "3"}],
        },
        {"key": "gpu", "op": 2},
    ],
}  # fmt: skip
FULL_RETURNED = {
    "name": "/alice/full-case",
    "entrypoint": {
        "setupCommands": ["echo hi"],
        "runCommand": {"argv": ["python", "train.py", "--api-key", SK]},
        "workdirFileRefs": {"big.bin": "abc123"},
    },
    "resources": {
        "cpuMillicores": 200, "memoryBytes": "1000000", "device": {"cpu": {}},
        "diskBytes": "5000",
    },
    "environment": {
        "envVars": {
            "HF_TOKEN": "[REDACTED]",
            "WANDB_API_KEY": "[REDACTED]",
            "TOKENIZERS_PARALLELISM": "false",
            "max_tokens": "4096",
            "OPENAI_BASE": "[REDACTED]",
            "PLAIN": "hello world",
        },
        "secrets": {"DB_PASSWORD": "[REDACTED]"},
        "setupScripts": ["pip install x"],
    },
    "bundleId": "8739c76e681f900923b900c9df0ef75cf421d39cabb54650c4b9ad19b6a76d85",
    "schedulingTimeout": {"milliseconds": "60000"},
    "ports": ["http"],
    "maxTaskFailures": 2,
    "maxRetriesFailure": 3,
    "maxRetriesPreemption": 4,
    "constraints": [
        {
            "key": "pool", "op": "CONSTRAINT_OP_EQ", "value": {"stringValue": "a b"},
            "mode": "CONSTRAINT_MODE_REQUIRED",
        },
        {
            "key": "region", "op": "CONSTRAINT_OP_IN",
            "values": [{"stringValue": "x"}, {"intValue": "3"}],
            "mode": "CONSTRAINT_MODE_PREFERRED",
        },
        {"key": "gpu", "op": "CONSTRAINT_OP_EXISTS", "mode": "CONSTRAINT_MODE_REQUIRED"},
    ],
    "coscheduling": {"groupBy": "host"},
    "replicas": 2,
    "timeout": {"milliseconds": "3600000"},
    "failIfExists": True,
    "preemptionPolicy": "JOB_PREEMPTION_POLICY_TERMINATE_CHILDREN",
    "existingJobPolicy": "EXISTING_JOB_POLICY_KEEP",
    "priorityBand": "PRIORITY_BAND_BATCH",
    "taskImage": "img:1",
    # Kept as sent: iris's CLI redacts submit_argv before it sends it, the controller never.
    "submitArgv": ["iris", "job", "run", "-e", "HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123"],
    "containerProfile": "CONTAINER_PROFILE_UNSPECIFIED",
    "egressPolicy": "EGRESS_POLICY_CLUSTER",
}  # fmt: skip


FULL_MARKS = [
    "environment.env_vars.HF_TOKEN",
    "environment.env_vars.OPENAI_BASE",
    "environment.env_vars.WANDB_API_KEY",
    "environment.secrets.DB_PASSWORD",
]


@pytest.mark.parametrize(
    ("sent", "returned", "marks"),
    [({"name": "/alice/bare"}, BARE_REQUEST, []), (FULL_SENT, FULL_RETURNED, FULL_MARKS)],
    ids=["a name alone", "every field"],
)
async def test_get_job_status_returns_the_request_as_the_controller_rebuilds_it(
    iris: Iris, sent: dict[str, Any], returned: dict[str, Any], marks: list[str]
) -> None:
    job = (await iris.rpc("LaunchJob", sent))["jobId"]
    status = await iris.rpc("GetJobStatus", {"jobId": job})
    assert status["request"] == returned
    # What keeper's client reads of it: no workdir files, and the redacted fields marked.
    async with IrisController(iris.emu.url, timeout=5) as client:
        _, request = await client.get_job_status(job)
    assert request is not None and request.entrypoint is not None
    assert request.entrypoint.workdir_files == {}
    assert redaction_marks(request) == marks


async def test_launch_refuses_an_unknown_scenario_in_its_environment(iris: Iris) -> None:
    body = {"name": "/alice/x", "environment": {"envVars": {"IRIS_EMULATOR_SCENARIO": "nope"}}}
    refused = await iris.http.post(f"{CTL}/LaunchJob", json=body)
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_argument"


async def test_fetch_logs_matches_exact_keys_regexes_and_levels(iris: Iris) -> None:
    job = await iris.job("fl", "repeated-failure")
    await iris.forward(330)
    coord = await iris.child(job, "coord")

    async def fetch(**body: Any) -> list[dict[str, Any]]:
        answer = await iris.http.post(PROXIED_FETCH_LOGS, json=body)
        assert answer.status_code == 200, answer.text
        return list(answer.json()["entries"])

    exact = await fetch(source=f"{coord}/0:0", matchScope="MATCH_SCOPE_EXACT", maxLines=50)
    assert exact and {e["key"] for e in exact} == {f"{coord}/0:0"}
    workers = await iris.child(job, "workers")
    pattern = rf"{re.escape(workers)}/\d+:.*"
    errors = await fetch(source=pattern, minLevel="ERROR", maxLines=100)
    assert errors and {e["level"] for e in errors} == {"ERROR"}
    assert all(e["key"].startswith(f"{workers}/") for e in errors)


async def test_fetch_logs_plays_only_the_jobs_an_exact_or_prefix_source_can_name(
    iris: Iris, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One emulator holding many jobs that ran for hours: a read of one task's lines must not
    # cost every job's log.
    mine = await iris.job("ours", "healthy")
    other = await iris.job("other", "stragglers")
    await iris.forward(300)
    coord = await iris.child(mine, "coord")
    played: list[str] = []
    lines = iris.emu.controller.lines

    def spy(root: Any, *args: Any, **kwargs: Any) -> Any:
        played.append(root.job_id)
        return lines(root, *args, **kwargs)

    monkeypatch.setattr(iris.emu.controller, "lines", spy)

    async def fetch(source: str, scope: str) -> set[str]:
        body = {"source": source, "matchScope": scope, "maxLines": 2000}
        answer = await iris.http.post(PROXIED_FETCH_LOGS, json=body)
        assert answer.status_code == 200, answer.text
        return {e["key"] for e in answer.json()["entries"]}

    cases = [
        (f"{coord}/0:0", "MATCH_SCOPE_EXACT", {mine}),
        (f"{mine}/", "MATCH_SCOPE_PREFIX", {mine}),
        # A prefix shorter than the job ids may name both.
        ("/alice/", "MATCH_SCOPE_PREFIX", {mine, other}),
        # A regex is narrowed by its literal start, as keeper's are written (re.escape).
        (rf"{re.escape(coord)}/0:.*", "MATCH_SCOPE_REGEX", {mine}),
        # An alternation may start anywhere: every job is read.
        (rf"{re.escape(coord)}/0:0|nothing", "MATCH_SCOPE_REGEX", {mine, other}),
    ]
    for source, scope, roots in cases:
        played.clear()
        keys = await fetch(source, scope)
        assert set(played) == roots, (source, scope, played)
        assert keys, (source, scope)
        if scope != "MATCH_SCOPE_REGEX":
            assert all(k.startswith(source) for k in keys), keys
    # What a short prefix names is still every job's lines.
    both = {k.split("/")[2] for k in await fetch("/alice/", "MATCH_SCOPE_PREFIX")}
    assert both == {mine.split("/")[2], other.split("/")[2]}


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        (re.escape("/alice/job-1/workers") + r"/\d+:.*", "/alice/job-1/workers/"),
        ("/alice/x:0", "/alice/x:0"),
        # Optional or repeated: the literal before `*`, `?` or `{` may be absent.
        ("/alice/ab*", "/alice/a"),
        ("/alice/ab?", "/alice/a"),
        ("/alice/ab{0,2}", "/alice/a"),
        ("/alice/ab+", "/alice/ab"),
        # Classes, groups, anchors and escapes of letters end the literal start.
        ("/alice/[ab]", "/alice/"),
        ("(?i)/alice/", ""),
        ("^/alice/", ""),
        (r"/alice/\d", "/alice/"),
        # Any alternation may begin elsewhere.
        ("/alice/a|/bob/b", ""),
        ("/alice/(a|b)", ""),
        ("", ""),
    ],
)
def test_a_regexs_literal_start_is_what_every_match_begins_with(pattern: str, prefix: str) -> None:
    assert literal_prefix(pattern) == prefix


async def test_fetch_logs_refuses_a_bad_regex_whatever_the_jobs(iris: Iris) -> None:
    await iris.job("bad", "healthy")
    for source in ("(", "/nobody/["):
        body = {"source": source, "matchScope": "MATCH_SCOPE_REGEX", "maxLines": 10}
        answer = await iris.http.post(PROXIED_FETCH_LOGS, json=body)
        assert answer.status_code == 400 and answer.json()["code"] == "invalid_argument", source


async def test_get_task_logs_with_children_covers_the_tree_and_their_statuses(iris: Iris) -> None:
    await iris.control("log-routes", {"routes": ["get_task_logs"]})
    job = await iris.job("tree", "healthy")
    await iris.forward(60)
    answer = await iris.rpc(
        "GetTaskLogs",
        {"id": job, "includeChildren": True, "attemptId": -1, "tail": True, "maxTotalLines": 500},
    )
    keys = {e["key"].rsplit("/", 1)[0] for e in answer["taskLogs"][0]["logs"]}
    assert await iris.child(job, "coord") in keys
    assert {s["jobId"] for s in answer["childJobStatuses"]} == set(await iris.children(job))


async def test_a_scenario_file_adds_named_variants(tmp_path: Any) -> None:
    path = tmp_path / "iris.yaml"
    path.write_text("default: big-pool\nscenarios:\n  big-pool: {base: healthy, workers: 16}\n")
    emu = IrisEmulator(IrisEmulatorConfig(scenario_file=str(path)), ManualWallClock())
    assert emu.controller.next_scenario.workers == 16
    assert emu.controller.next_scenario.kind == "healthy"


async def test_keeper_emulator_iris_cli_launches_and_shows_state(iris: Iris) -> None:
    def invoke(*args: str) -> str:
        # keeper-dev's context settings: click keeps the help option a command first built.
        result = CliRunner().invoke(
            iris_group, [*args, "--url", iris.emu.url], help_option_names=["-h", "--help"]
        )
        assert result.exit_code == 0, result.output
        return result.output

    assert "/alice/cli playing stragglers" in await asyncio.to_thread(
        invoke, "launch", "cli", "--scenario", "stragglers"
    )
    assert "/alice/cli" in await asyncio.to_thread(invoke, "state")
    listing = await asyncio.to_thread(invoke, "scenario", "--next", "dead-worker")
    assert "* dead-worker" in listing


async def test_launching_a_running_job_again_is_refused_with_what_to_do(iris: Iris) -> None:
    async def keeper_dev(*args: str) -> tuple[int, str, str]:
        # The real command, whose error document under --json is its own code's.
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dev", "emulator", "iris", *args,
            "--url", iris.emu.url, "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60)
        return process.returncode or 0, out.decode(), err.decode()

    first = await keeper_dev("launch", "twice", "--scenario", "healthy")
    assert first[0] == 0, first
    code, out, err = await keeper_dev("launch", "twice", "--scenario", "healthy")
    assert code == 1, err
    error = json.loads(out)["error"]
    assert "/alice/twice already exists and is running" in error["message"], error
    assert "another NAME" in error["hint"] and "keeper-dev emulator iris state" in error["hint"]
    assert error["http_status"] == 409 and error["url"] == iris.emu.url.rstrip("/"), error
    assert error["hint"] in err


def test_the_demo_scenario_file_loads() -> None:
    emu = IrisEmulator(
        IrisEmulatorConfig(scenario_file="emulators/scenarios/iris-demo.yaml"), ManualWallClock()
    )
    assert emu.scenarios["demo-stragglers"].stages[0].shards == 5000
    assert emu.scenarios["demo-newest-logs"].log_format == "newest"


async def test_terminating_a_stale_coordinator_kills_only_it(iris: Iris) -> None:
    job = await iris.job("fence", "killed-retry")
    await iris.forward(400)
    stale = await iris.child(job, "coord", 0)
    await iris.rpc("TerminateJob", {"jobId": stale})
    assert (await iris.tasks(stale))[0]["error"] == "Terminated by user"
    assert (await iris.tasks(await iris.child(job, "coord", 1)))[0]["state"] == "TASK_STATE_RUNNING"
    assert (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]["state"] == "JOB_STATE_RUNNING"


async def test_python_m_emulators_iris_reports_its_address_serves_and_stops_on_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emulators.iris",
        "--port",
        "0",
        "--scenario",
        "stragglers",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stderr is not None
        line = ""
        async with asyncio.timeout(20):
            while "controller and control API on" not in line:
                line = (await proc.stderr.readline()).decode()
                assert line, "the emulator exited before it listened"
        url = line.rsplit(" ", 1)[-1].strip()
        async with httpx.AsyncClient(base_url=url) as http:
            state = (await http.get("/control/state")).json()
        assert state["next_scenario"] == "stragglers"
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await proc.wait() == 0


async def test_two_pipelines_run_one_after_the_other_as_p0_then_p1_with_the_same_hash(
    iris: Iris,
) -> None:
    job = await iris.job("two", "two-pipelines")
    await iris.forward(100)
    p0 = await iris.child(job, "coord")
    assert len(await iris.children(job)) == 2
    await iris.forward(150)
    p1 = await iris.child(job, "coord", pipeline=1)
    assert CHILD.match(p0)["hash"] == CHILD.match(p1)["hash"]  # type: ignore[index]
    assert (await iris.tasks(p0))[0]["state"] == "TASK_STATE_SUCCEEDED"
    assert (await iris.tasks(p1))[0]["state"] == "TASK_STATE_RUNNING"
    assert (await iris.progress(p1))[-1]["stage"].startswith("stage")
    await iris.forward(300)
    assert (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]["state"] == "JOB_STATE_SUCCEEDED"


async def test_get_task_status_and_the_finelog_fetch_logs_path_answer_too(iris: Iris) -> None:
    job = await iris.job("gts", "healthy")
    await iris.forward(60)
    coord = await iris.child(job, "coord")
    task = (await iris.rpc("GetTaskStatus", {"taskId": f"{coord}/0"}))["task"]
    assert task["taskId"] == f"{coord}/0" and task["state"] == "TASK_STATE_RUNNING"
    fetched = await iris.http.post(
        PROXIED_FETCH_LOGS,
        json={"source": f"{coord}/0:0", "matchScope": "MATCH_SCOPE_EXACT", "maxLines": 3},
    )
    assert fetched.status_code == 200 and len(fetched.json()["entries"]) == 3


@pytest.mark.parametrize(
    ("routes", "route"),
    [
        (["proxy"], LogRoute.PROXIED_FETCH_LOGS),
        (["fetch_logs"], LogRoute.FETCH_LOGS),
        (["get_task_logs", "fetch_logs", "proxy"], LogRoute.GET_TASK_LOGS),
    ],
)
async def test_keepers_iris_client_reads_the_emulator_by_the_log_route_it_offers(
    iris: Iris, routes: list[str], route: LogRoute
) -> None:
    await iris.control("log-routes", {"routes": routes})
    job = await iris.job("client", "killed-retry")
    await iris.forward(400)
    async with IrisController(iris.emu.url, timeout=2) as client:
        kids = {k.job_id for k in await client.list_children(job)}
        assert kids == set(await iris.children(job))
        coord = await iris.child(job, "coord", 1)
        page = await client.task_logs(coord, tail=True, max_lines=50)
        assert page.route is route and len(page.entries) == 50
        assert client.log_route is route
        assert "_wait_for_stage" in await client.profile_threads(f"{coord}/0")
        assert (await client.exec_in_container(f"{coord}/0", PROC_STAT_COMMAND)).ok
        with pytest.raises(JobNotFound):
            await client.get_job_status("/alice/ghost")
        await client.launch_job(LaunchJobRequest(name=f"/alice/again-{len(routes)}"))
        with pytest.raises(IrisAlreadyExists):
            await client.launch_job(LaunchJobRequest(name=f"/alice/again-{len(routes)}"))
        await iris.control("faults", {"mode": "unavailable"})
        with pytest.raises(IrisUnavailable):
            await client.list_tasks(coord)


def _ms(stamp: dict[str, Any] | None) -> float:
    assert stamp is not None
    return int(stamp["epochMs"]) / 1000


async def test_times_are_stamped_on_the_wall_clock_as_iris_would_never_the_scenario_clock(
    iris: Iris,
) -> None:
    """iris stamps a log line with the time it was written and a job with the times it was
    submitted and started: real time. The emulator plays scenario time at 60x, so after 5
    wall seconds (5 scenario minutes) every stamp is at most now, and the newest is now."""
    launched = iris.wall.now()
    job = await iris.job("tokenize", "healthy")
    iris.wall.advance(5)
    now = iris.wall.now()
    coord = await iris.child(job, "coord")
    progress = await iris.logs(coord, substring="workers alive")
    stamps = [_ms(e["timestamp"]) for e in progress]
    assert stamps and launched <= min(stamps) and max(stamps) <= now, (launched, stamps, now)
    assert now - max(stamps) < 0.1  # a progress line every 1.5 scenario seconds
    # 1.5 scenario seconds apart is 25 wall milliseconds apart.
    assert all(0 < b - a < 0.05 for a, b in itertools.pairwise(stamps)), stamps
    # The coordinator's own logging prefix (`I20270115 08:00:05`) tells the same clock.
    newest = datetime.fromtimestamp(max(stamps), UTC)
    assert progress[-1]["data"].startswith(f"I{newest:%Y%m%d %H:%M:%S}"), progress[-1]["data"]

    status = (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]
    assert launched <= _ms(status["submittedAt"]) <= _ms(status["startedAt"]) <= now, status
    (task,) = await iris.tasks(coord)
    assert launched <= _ms(task["startedAt"]) <= now, task

    # A fast-forward skips scenario time; what it skipped was written by now, not later.
    await iris.forward(600)
    later = [_ms(e["timestamp"]) for e in await iris.logs(coord)]
    assert max(later) <= iris.wall.now(), (max(later), iris.wall.now())


async def test_a_backdated_job_keeps_the_real_age_of_what_it_wrote_before_it_appeared(
    iris: Iris,
) -> None:
    # hung-busy appears 3 h 10 min old, hung since 3 h: its last line is 10 minutes old.
    launched = iris.wall.now()
    job = await iris.job("hb", "hung-busy")
    entries = await iris.logs(await iris.child(job, "coord"))
    newest = max(_ms(e["timestamp"]) for e in entries)
    assert launched - 11 * 60 < newest <= launched - 9 * 60, launched - newest


# --- ListJobs as the controller pages it ------------------------------------------------------


async def list_jobs(iris: Iris, status: int = 200, **query: Any) -> Any:
    return await iris.rpc("ListJobs", {"query": query}, status=status)


async def test_list_jobs_pages_and_refuses_as_the_controller_does(iris: Iris) -> None:
    job = await iris.job("wide", "healthy", extra_children=600)
    await iris.forward(30)
    children = {"scope": "JOB_QUERY_SCOPE_CHILDREN", "parentJobId": job}
    # No limit, or one past the cap, is a page of 500; the count and has_more tell the rest.
    for limit in (0, 1000, -3):
        page = await list_jobs(iris, **children, limit=limit)
        assert (len(page["jobs"]), page["totalCount"], page["hasMore"]) == (500, 602, True)
    last = await list_jobs(iris, **children, offset=500)
    assert (len(last["jobs"]), last["hasMore"]) == (102, False)
    assert (await list_jobs(iris, **children, offset=-5, limit=2))["jobs"] == page["jobs"][:2]
    # Offset 5000 is the deepest one taken; past it, INVALID_ARGUMENT and the controller's words.
    assert (await list_jobs(iris, **children, offset=5000)) == {
        "totalCount": 602,
        "hasMore": False,
    }
    refused = await list_jobs(iris, 400, **children, offset=5001)
    assert refused == {
        "code": "invalid_argument",
        "message": "query.offset=5001 exceeds MAX_LIST_JOBS_OFFSET=5000; narrow the result set "
        "with state_filter/name_filter/parent_job_id instead of paging deeper.",
    }
    assert await list_jobs(iris, 400, scope="JOB_QUERY_SCOPE_CHILDREN") == {
        "code": "invalid_argument",
        "message": "query.parent_job_id is required for JOB_QUERY_SCOPE_CHILDREN",
    }


async def test_list_jobs_filters_and_sorts_as_the_controller_does(iris: Iris) -> None:
    job = await iris.job("Wide", "healthy", extra_children=20)
    await iris.forward(30)
    children = {"scope": "JOB_QUERY_SCOPE_CHILDREN", "parentJobId": job}

    async def ids(**query: Any) -> list[str]:
        page = await list_jobs(iris, **children, **query)
        return [j["jobId"] for j in page.get("jobs", [])]  # an empty page has no `jobs`

    # state_filter: a lowercase state name, any case; anything else (a wire name) matches none.
    running = await ids(stateFilter="RUNNING")
    assert running and running == await ids(stateFilter="running")
    assert await list_jobs(iris, **children, stateFilter="JOB_STATE_RUNNING") == {
        "totalCount": 0,
        "hasMore": False,
    }
    # name_filter: SQL LIKE over the lowercased full name, `_` and `%` wildcards.
    assert await ids(nameFilter="WIDE/SHARD-0001_") == [
        f"{job}/shard-{i:05d}" for i in range(19, 9, -1)
    ]
    assert await ids(nameFilter="wide%00003") == [f"{job}/shard-00003"]
    # job_id_prefix: literal, whatever the case; parent_job_id: exact.
    assert len(await ids(jobIdPrefix=f"{job.upper()}/SHARD-")) == 20
    assert await ids(jobIdPrefix=f"{job}/shard-0001_") == []
    assert (await list_jobs(iris, scope="JOB_QUERY_SCOPE_CHILDREN", parentJobId=job.lower())) == {
        "totalCount": 0,
        "hasMore": False,
    }
    # Newest first by default; by name, ascending unless asked.
    by_date = await ids()
    assert by_date[0] == f"{job}/shard-00019" and by_date[-2:] == sorted(by_date[-2:])[::-1]
    by_name = await ids(sortField="JOB_SORT_FIELD_NAME")
    assert by_name == sorted(by_name, key=str.lower)
    desc = await ids(sortField="JOB_SORT_FIELD_NAME", sortDirection="SORT_DIRECTION_DESC")
    assert desc == by_name[::-1]


class Recording(AiohttpPost):
    """keeper's client's calls over HTTP, the bodies of its ListJobs kept."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    async def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> Answer:
        if url.endswith("/ListJobs"):
            self.bodies.append(json.loads(body or b"{}"))
        return await super().__call__(url, body, headers, timeout_s)


async def test_keepers_client_lists_six_thousand_children_within_the_caps(iris: Iris) -> None:
    # 6,000 plain children besides the pipeline's two, most RUNNING: more than one ordering
    # of one query reaches (5,500), and more RUNNING than that too.
    job = await iris.job("fanout", "healthy", extra_children=6000)
    await iris.forward(30)
    every = {
        v.job_id for _, v in iris.emu.controller.all_jobs() if v.parent == job
    }  # fmt: skip
    assert len(every) == 6002
    transport = Recording()
    try:
        async with IrisController(iris.emu.url, timeout=10, post=transport) as client:
            children = await client.list_children(job)
    finally:
        await transport.aclose()
    assert {c.job_id for c in children} == every
    assert children.complete and children.describe() == "sees all 6,002 children"
    queries = [body["query"] for body in transport.bodies]
    assert max(q.get("offset", 0) for q in queries) <= 5000
    assert {q["limit"] for q in queries} == {500}
    assert any(q.get("sortDirection") == "SORT_DIRECTION_DESC" for q in queries)
    # The watch follows the pipeline among them.
    refs = [ChildRef(job_id=c.job_id, state=c.state.wire_name) for c in children]
    latest = pick_latest(refs, job)
    assert latest is not None and latest.coord is not None and latest.workers is not None


async def test_job_and_task_shapes_are_the_controllers(iris: Iris) -> None:
    """ListTasks of an unknown job is an empty answer, not not_found; GetJobStatus never fills
    `tasks`; taskStateCounts is keyed by the lowercase state; ListTasks shows a task's
    current attempt and only its latest failed one before it (GetTaskStatus: every attempt);
    a terminated job counts each started attempt it killed as a preemption."""
    assert await iris.rpc("ListTasks", {"jobId": "/alice/ghost"}) == {}
    refused = await iris.http.post(f"{CTL}/ListTasks", json={})
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_argument"
    job = await iris.job("shapes", "repeated-failure")
    await iris.forward(310)  # two shards failed (200 s, 260 s): the culprit is on attempt 2
    status = (await iris.rpc("GetJobStatus", {"jobId": job}))["job"]
    assert "tasks" not in status and status["taskStateCounts"] == {"running": 1}
    workers = await iris.child(job, "workers")
    listed = {t["taskId"]: t for t in await iris.tasks(workers)}
    (culprit,) = [t for t in listed.values() if t["currentAttemptId"] > 0]
    assert [a.get("attemptId", 0) for a in culprit["attempts"]] == [1, 2]
    assert culprit["attempts"][0]["state"] == "TASK_STATE_FAILED"
    full = (await iris.rpc("GetTaskStatus", {"taskId": culprit["taskId"]}))["task"]
    assert [a.get("attemptId", 0) for a in full["attempts"]] == [0, 1, 2]
    other = await iris.job("ended", "healthy")
    await iris.forward(60)
    await iris.rpc("TerminateJob", {"jobId": other})
    status = (await iris.rpc("GetJobStatus", {"jobId": other}))["job"]
    assert status["state"] == "JOB_STATE_KILLED" and status["preemptionCount"] == 1
    assert status["taskStateCounts"] == {"killed": 1}


# --- preemption -------------------------------------------------------------------------------


async def test_a_preempted_task_is_pending_again_while_its_budget_lasts_then_preempted(
    iris: Iris,
) -> None:
    job = await iris.job("pre", "preempted")  # preempted at 200 s and 500 s, budget 1
    await iris.forward(210)
    status = await iris.rpc("GetJobStatus", {"jobId": job})
    (root,) = await iris.tasks(job)
    assert root["state"] == "TASK_STATE_PENDING"  # the budget allows one: back in the queue
    assert [a["state"] for a in root["attempts"]] == ["TASK_STATE_PREEMPTED"]
    assert root["attempts"][0]["error"] == "Preempted by /ops/priority-eval"
    assert status["job"]["state"] == "JOB_STATE_RUNNING"  # it started: not PENDING again
    assert status["job"]["preemptionCount"] == 1
    for child in await iris.children(job):  # killed with the preemption's reason
        assert {t["error"] for t in await iris.tasks(child)} == {"Preempted by /ops/priority-eval"}
    await iris.forward(60)  # the retry runs: a new attempt of the pipeline
    assert (await iris.tasks(job))[0]["state"] == "TASK_STATE_RUNNING"
    a1 = await iris.child(job, "coord", 1)
    assert (await iris.tasks(a1))[0]["state"] == "TASK_STATE_RUNNING"
    await iris.forward(300)  # the second preemption spends the budget
    status = await iris.rpc("GetJobStatus", {"jobId": job})
    (root,) = await iris.tasks(job)
    assert root["state"] == "TASK_STATE_PREEMPTED"
    # ListTasks shows the current attempt (and only failed earlier ones); GetTaskStatus all.
    assert [a["state"] for a in root["attempts"]] == ["TASK_STATE_PREEMPTED"]
    task = (await iris.rpc("GetTaskStatus", {"taskId": root["taskId"]}))["task"]
    assert [a["state"] for a in task["attempts"]] == ["TASK_STATE_PREEMPTED"] * 2
    assert status["job"]["state"] == "JOB_STATE_WORKER_FAILED"
    assert status["job"]["error"] == "Preempted by /ops/priority-eval"
    assert status["job"]["preemptionCount"] == 2 and "finishedAt" in status["job"]
    assert {t["error"] for t in await iris.tasks(a1)} == {"Parent job terminated"}
    # Over for good: it never runs again.
    await iris.forward(3600)
    assert (await iris.tasks(job))[0]["state"] == "TASK_STATE_PREEMPTED"


async def test_with_no_preemption_budget_the_first_preemption_ends_the_job(iris: Iris) -> None:
    job = await iris.job("pre0", "preempted", max_retries_preemption=0)
    await iris.forward(210)
    assert (await iris.tasks(job))[0]["state"] == "TASK_STATE_PREEMPTED"
    status = await iris.rpc("GetJobStatus", {"jobId": job})
    assert status["job"]["state"] == "JOB_STATE_WORKER_FAILED"
