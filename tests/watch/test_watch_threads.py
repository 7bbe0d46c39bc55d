"""Table tests for reading a coordinator's thread dump (domain/watch/threads.py): the three
patterns of the runbook, the cases between them, and garbage."""

from __future__ import annotations

import pytest

from keeper.domain.watch.threads import ThreadState, parse_dump, read_dump

HEAD = "Process 1: python -m zephyr.coordinator\nPython v3.11.9 (/usr/bin/python3.11)\n\n"
MAIN = 'Thread 0x7F00000001 (idle): "MainThread"\n    wait (threading.py:331)\n' \
       "    serve_forever (iris/actor/server.py:88)\n"  # fmt: skip
LOOP = 'Thread 0x7F00000002 (active+gil): "zephyr-coordinator-loop"\n' \
       "    _coordinator_loop (zephyr/execution.py:233)\n    run (threading.py:982)\n"  # fmt: skip
STAGE = 'Thread 0x7F00000003 (idle): "actor-method_0"\n' \
        "    _wait_for_stage (zephyr/execution.py:412)\n" \
        "    run_pipeline (zephyr/execution.py:380)\n" \
        "    _worker (concurrent/futures/thread.py:83)\n"  # fmt: skip


def _pool(n: int, start: int = 1, *, waits: bool = False, tag: str = "idle") -> str:
    """n actor-method threads idle in the pool (optionally inside stdlib waits)."""
    inner = "    wait (threading.py:327)\n    get (queue.py:171)\n" if waits else ""
    return "".join(
        f'Thread 0x7F1{i:07X} ({tag}): "actor-method_{i}"\n{inner}'
        "    _worker (concurrent/futures/thread.py:83)\n    run (threading.py:982)\n"
        for i in range(start, start + n)
    )


BUSY = 'Thread 0x7F20000001 (active): "actor-method_5"\n' \
       "    get_status (zephyr/execution.py:520)\n" \
       "    _worker (concurrent/futures/thread.py:83)\n"  # fmt: skip

# (case, dump, state, words the evidence must name)
DUMPS: list[tuple[str, str, ThreadState, tuple[str, ...]]] = [
    ("live: a stage wait and the dispatch loop", HEAD + MAIN + LOOP + STAGE + _pool(3),
     ThreadState.ACTIVE, ("actor-method_0", "_wait_for_stage", "zephyr-coordinator-loop")),
    ("waiting between stages: the loop only", HEAD + MAIN + LOOP + _pool(31),
     ThreadState.WAITING, ("zephyr-coordinator-loop", "no thread in _wait_for_stage")),
    ("zombie: every actor-method idle in _worker", HEAD + MAIN + _pool(32),
     ThreadState.ZOMBIE, ("all 32 actor-method threads idle in _worker",)),
    ("zombie with stdlib waits inside _worker", HEAD + MAIN + _pool(4, waits=True),
     ThreadState.ZOMBIE, ("all 4",)),
    ("a stage wait with no loop to dispatch it", HEAD + MAIN + STAGE, ThreadState.UNKNOWN,
     ("no _coordinator_loop",)),
    ("no loop, one actor-method busy elsewhere", HEAD + MAIN + _pool(3) + BUSY,
     ThreadState.UNKNOWN, ("actor-method_5", "get_status")),
    ("no loop, an actor-method tagged active in _worker", HEAD + _pool(2, tag="active"),
     ThreadState.UNKNOWN, ("actor-method_1",)),
    ("only the main thread: not the coordinator we know", HEAD + MAIN, ThreadState.UNKNOWN,
     ("no _coordinator_loop, _wait_for_stage or actor-method",)),
    ("empty", "", ThreadState.UNKNOWN, ("no threads",)),
    ("garbage", "\x00\x01 not a dump {\"error\": \"task not running\"}\n\n", ThreadState.UNKNOWN,
     ("no threads",)),
    ("frames without a thread header", "    _coordinator_loop (zephyr/execution.py:233)\n",
     ThreadState.UNKNOWN, ("no threads",)),
    ("a profile error text", "Error: task /a/j/0 is BUILDING, not RUNNING", ThreadState.UNKNOWN,
     ("no threads",)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "dump", "state", "words"), DUMPS, ids=[d[0] for d in DUMPS])
def test_a_dump_reads_active_waiting_zombie_or_unknown_naming_the_threads_that_show_it(
    case: str, dump: str, state: ThreadState, words: tuple[str, ...]
) -> None:
    reading = read_dump(dump)
    assert reading.state is state
    for word in words:
        assert word in reading.evidence
    assert read_dump(dump).state is state


def test_the_contracts_example_reads_live_with_its_sentence() -> None:
    reading = read_dump(HEAD + MAIN + LOOP + STAGE)
    assert reading.evidence == (
        "thread actor-method_0 in _wait_for_stage; zephyr-coordinator-loop present"
    )
    assert reading.threads == 3


def test_parse_dump_reads_threads_tags_and_frames() -> None:
    threads = parse_dump(HEAD + MAIN + LOOP + STAGE)
    assert [t.name for t in threads] == ["MainThread", "zephyr-coordinator-loop", "actor-method_0"]
    assert threads[1].tags == {"active", "gil"} and not threads[1].idle
    assert threads[2].idle
    assert [(f.function, f.file, f.line) for f in threads[2].frames] == [
        ("_wait_for_stage", "zephyr/execution.py", 412),
        ("run_pipeline", "zephyr/execution.py", 380),
        ("_worker", "concurrent/futures/thread.py", 83),
    ]


def test_parse_dump_skips_locals_and_reads_odd_headers() -> None:
    dump = (
        "Thread 4242 (idle)\n"  # no name
        "    _coordinator_loop (zephyr/execution.py:233)\n"
        "        Locals:\n"
        "            self: <Coordinator at 0x7f00>\n"
        "            deadline (float): 12.5\n"
        '\r\nThread 0x7F3 (active+gil): "actor-method_0"\r\n'  # CRLF
        "    _wait_for_stage (zephyr/execution.py:412)\r\n"
        "    <module> (run.py)\n"  # no line number
    )
    threads = parse_dump(dump)
    assert [(t.ident, t.name) for t in threads] == [("4242", ""), ("0x7F3", "actor-method_0")]
    assert [f.function for f in threads[0].frames] == ["_coordinator_loop"]
    assert [(f.function, f.line) for f in threads[1].frames] == [
        ("_wait_for_stage", 412), ("<module>", None)
    ]  # fmt: skip
    assert read_dump(dump).state is ThreadState.ACTIVE
    assert "4242" in read_dump(dump).evidence  # a nameless thread is named by its id
