"""What the real iris controller (marin-iris 0.2.227.dev40316220070) answers, as keeper reads it,
without starting one: a py-spy dump, log lines and refusals as that controller produced them
(tests/watch/test_watch_real_iris.py reads them live; docs/iris-emulator.md#checked-against-the-
real-controller says how they differ from the emulator's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import pytest

from keeper.activities.watch.observe import MAX_PROCESSES_PER_TASK, started_last
from keeper.domain.watch.progress import LogLine, digest, normalise_error, parse_event, strip_prefix
from keeper.domain.watch.threads import ThreadState, read_dump
from keeper.runtime.watch.iris_client import GET_CURRENT_USER, IrisController
from keeper.runtime.watch.iris_errors import IrisAlreadyExists, IrisInvalidArgument
from keeper.runtime.watch.iris_http import Answer
from keeper.wire.iris import connect
from keeper.wire.iris.exec_commands import parse_proc_stat
from keeper.wire.iris.messages import LaunchJobRequest

# py-spy 0.4.3 on Python 3.12, through ProfileTask(threads): methods by qualified name, the
# OS thread id in decimal.
LIVE_DUMP = """\
Process 27359: /work/.venv/iris/bin/python zephyr_job.py coord --stages 1 --shards 400
Python v3.12.1 (/root/.pyenv/versions/3.12.1/bin/python3.12)

Thread 27359 (idle): "MainThread"
    Condition.wait (threading.py:359)
    Queue.get (queue.py:180)
    Coordinator._wait_for_stage (tests/watch/real_iris/zephyr_job.py:226)
    Coordinator.run (tests/watch/real_iris/zephyr_job.py:253)
    main (tests/watch/real_iris/zephyr_job.py:334)
    <module> (tests/watch/real_iris/zephyr_job.py:339)
Thread 27398 (idle): "actor-method_0"
    Condition.wait (threading.py:359)
    Queue.get (queue.py:180)
    Coordinator._worker (tests/watch/real_iris/zephyr_job.py:234)
    Thread.run (threading.py:1010)
    Thread._bootstrap_inner (threading.py:1073)
    Thread._bootstrap (threading.py:1030)
Thread 27401 (idle): "zephyr-coordinator-loop"
    Condition.wait (threading.py:359)
    Event.wait (threading.py:655)
    Coordinator._coordinator_loop (tests/watch/real_iris/zephyr_job.py:221)
    Thread.run (threading.py:1010)
    Thread._bootstrap_inner (threading.py:1073)
    Thread._bootstrap (threading.py:1030)
"""


def test_a_real_py_spy_dump_with_qualified_method_names_reads_active() -> None:
    reading = read_dump(LIVE_DUMP)
    assert reading.state is ThreadState.ACTIVE, reading
    assert reading.threads == 3


def test_a_real_py_spy_dump_of_a_pipeline_that_exited_reads_zombie() -> None:
    # The same actor once its pipeline returned: the pool idles on, nothing else runs.
    main = 'Thread 27359 (idle): "MainThread"\n    Coordinator._serve (zephyr_job.py:270)\n'
    pool = LIVE_DUMP[LIVE_DUMP.index("Thread 27398") : LIVE_DUMP.index("Thread 27401")]
    reading = read_dump(main + pool)
    assert reading.state is ThreadState.ZOMBIE, reading


# Lines of a zephyr actor under iris: its callable runner's format, on stderr.
PROGRESS = (
    "I20261204 17:09:01 zephyr.execution [zephyr-keeper-304aaa05-p0-a0] [stage0-Map] "
    "2/6 complete, 2 in-flight, 2 queued, 2/2 workers alive, 0 dead"
)
ABORTED = (
    "E20261204 17:15:00 zephyr.execution [x-p0-a0] shard 2 failed on every worker, "
    "aborting pipeline."
)


def test_iris_s_log_prefix_is_not_part_of_an_event_or_an_error() -> None:
    assert strip_prefix(PROGRESS).startswith("[zephyr-keeper-304aaa05-p0-a0] [stage0-Map]")
    # rigging's variant carries the thread id before the logger's name.
    assert strip_prefix("W20261204 17:09:01 140234 zephyr.execution Shards retried") == (
        "Shards retried"
    )
    event = parse_event(ABORTED)
    assert event is not None and event.reason == "[x-p0-a0] shard 2 failed on every worker"
    line = "E20261204 17:09:02 root ValueError: bad record in shard 7"
    seen = digest([LogLine(at_ms=1, level="LOG_LEVEL_ERROR", text=line)])
    assert [e.text for e in seen.errors] == ["ValueError: bad record in shard 7"]
    assert normalise_error(line) == "ValueError: bad record in shard <n>"
    assert seen.latest is None and digest([LogLine(text=PROGRESS)]).latest is not None


def controller(answers: dict[str, tuple[int, Any]]) -> tuple[IrisController, list[tuple[str, Any]]]:
    """A client of a stand-in controller answering `path -> (status, body)`; 404 otherwise.
    The calls it saw, in order."""
    seen: list[tuple[str, Any]] = []

    async def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> Answer:
        path = urlsplit(url).path
        seen.append((path, json.loads(body or b"{}")))
        status, answer = answers.get(path, (404, None))
        if answer is None:
            return Answer(status, "text/plain", b"")
        return Answer(status, "application/json", json.dumps(answer).encode())

    iris = IrisController("http://iris.test", post=post)
    return iris, seen


BARE = LaunchJobRequest.model_validate(
    {"name": "tokenize", "entrypoint": {"runCommand": {"argv": ["true"]}}, "replicas": 1}
)


async def test_a_bare_launch_name_is_sent_under_the_user_the_controller_names() -> None:
    iris, seen = controller(
        {
            GET_CURRENT_USER: (200, {"userId": "anonymous", "role": "admin"}),
            connect.LAUNCH_JOB: (200, {"jobId": "/anonymous/tokenize"}),
        }
    )
    async with iris:
        assert await iris.launch_job(BARE) == "/anonymous/tokenize"
        assert await iris.launch_job(BARE.model_copy(update={"name": "again"}))
    # GetCurrentUser once; each LaunchJob with the canonical name iris requires.
    assert [path for path, _ in seen].count(GET_CURRENT_USER) == 1
    assert [body["name"] for path, body in seen if path == connect.LAUNCH_JOB] == [
        "/anonymous/tokenize",
        "/anonymous/again",
    ]


async def test_a_bare_launch_name_goes_as_is_to_a_controller_without_get_current_user() -> None:
    iris, seen = controller({connect.LAUNCH_JOB: (200, {"jobId": "/alice/tokenize"})})
    async with iris:
        assert await iris.launch_job(BARE) == "/alice/tokenize"
    assert [body["name"] for path, body in seen if path == connect.LAUNCH_JOB] == ["tokenize"]


async def test_a_field_the_controller_does_not_know_is_a_refusal_not_a_retryable_error() -> None:
    refusal = {
        "code": "unknown",
        "message": 'Message type "iris.cluster.Controller.LaunchJobRequest" has no field named '
        '"reservation" at "LaunchJobRequest".',
    }
    iris, _ = controller({connect.LAUNCH_JOB: (500, refusal)})
    async with iris:
        with pytest.raises(IrisInvalidArgument) as refused:
            await iris.launch_job(BARE.model_copy(update={"name": "/alice/x"}))
    assert not refused.value.retryable and "has no field named" in str(refused.value)


async def test_a_live_job_of_the_same_name_is_already_exists() -> None:
    exists = {
        "code": "already_exists",
        "message": "Job /alice/x already exists and is still running",
    }
    iris, _ = controller({connect.LAUNCH_JOB: (409, exists)})
    async with iris:
        with pytest.raises(IrisAlreadyExists):
            await iris.launch_job(BARE.model_copy(update={"name": "/alice/x"}))


def test_a_host_wide_process_listing_is_cut_to_the_processes_started_last() -> None:
    """On iris's process runtime an exec lists every process of the machine (83 on a
    LocalCluster here): a check keeps the task's, which started after the host's daemons, and
    its history event stays bounded whatever the machine runs."""
    daemons = [f"{pid} (daemon{pid}) S 1 1 1 0 -1 0 0 0 0 0 50 20 0 0 20 0 1 0 {pid}" for pid in
               range(2, 300)]  # fmt: skip
    task = [
        "90001 (python) R 1 1 1 0 -1 0 0 0 0 0 9000 100 0 0 20 0 9 0 5000000",
        "90007 (sh) R 90001 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000100",
    ]
    procs = parse_proc_stat("\n".join([*daemons[:150], *task, *daemons[150:]]))
    kept = started_last(procs, MAX_PROCESSES_PER_TASK)
    assert len(procs) == 300 and len(kept) == MAX_PROCESSES_PER_TASK
    assert {90001, 90007} <= {p.pid for p in kept}
    assert [p.pid for p in kept] == sorted((p.pid for p in kept), key=[q.pid for q in procs].index)
    # A container's few processes are all kept.
    assert started_last(procs[:5], MAX_PROCESSES_PER_TASK) == procs[:5]
