"""Thread dumps in py-spy `dump` format, as ProfileTask(threads) returns them."""

from __future__ import annotations

from emulators.iris.timeline import DumpKind

_HEADER = "Process {pid}: {cmd}\nPython v3.11.9 (/usr/bin/python3.11)\n"


def _thread(ident: int, status: str, name: str, frames: list[str]) -> str:
    body = "".join(f"    {frame}\n" for frame in frames)
    return f'Thread 0x7F{ident:08X} ({status}): "{name}"\n{body}'


_MAIN = ["wait (threading.py:331)", "serve_forever (iris/actor/server.py:88)"]
_LOOP = ["_coordinator_loop (zephyr/execution.py:233)", "run (threading.py:982)"]
_WAIT_STAGE = [
    "_wait_for_stage (zephyr/execution.py:412)",
    "run_pipeline (zephyr/execution.py:380)",
    "_worker (concurrent/futures/thread.py:83)",
]
_IDLE_POOL = ["_worker (concurrent/futures/thread.py:83)", "run (threading.py:982)"]


def coordinator_dump(kind: DumpKind, pid: int = 7) -> str:
    threads = [_thread(1, "idle", "MainThread", _MAIN)]
    if kind in ("live", "waiting"):
        status = "active+gil" if kind == "live" else "idle"
        threads.append(_thread(2, status, "zephyr-coordinator-loop", _LOOP))
    if kind == "live":
        threads.append(_thread(3, "idle", "actor-method_0", _WAIT_STAGE))
        threads.append(_thread(4, "idle", "actor-method_1", _IDLE_POOL))
    else:
        threads += [_thread(3 + i, "idle", f"actor-method_{i}", _IDLE_POOL) for i in range(3)]
    return _HEADER.format(pid=pid, cmd="python -m zephyr.coordinator") + "\n" + "\n".join(threads)


def worker_dump(worker_id: str, busy: bool, in_shard: bool = False, pid: int = 7) -> str:
    """A zephyr worker: in _execute_shard (on CPU when busy, blocked when not) or polling."""
    if busy or in_shard:
        poll = _thread(
            2,
            "active+gil" if busy else "idle",
            f"zephyr-poll-{worker_id}",
            [
                "_execute_shard (zephyr/worker.py:212)",
                "_poll_loop (zephyr/worker.py:140)",
                "run (threading.py:982)",
            ],
        )
    else:
        poll = _thread(
            2,
            "idle",
            f"zephyr-poll-{worker_id}",
            ["_poll_loop (zephyr/worker.py:140)", "run (threading.py:982)"],
        )
    beat = _thread(
        3,
        "idle",
        f"zephyr-hb-{worker_id}",
        ["_heartbeat_loop (zephyr/worker.py:96)", "run (threading.py:982)"],
    )
    threads = [_thread(1, "idle", "MainThread", _MAIN), poll, beat]
    return _HEADER.format(pid=pid, cmd="python -m zephyr.worker") + "\n" + "\n".join(threads)


def driver_dump(pid: int = 7) -> str:
    main = _thread(
        1,
        "idle",
        "MainThread",
        ["wait (threading.py:331)", "execute (zephyr/execution.py:520)", "<module> (main.py:40)"],
    )
    return _HEADER.format(pid=pid, cmd="python main.py") + "\n" + main


def dump_for(kind: DumpKind, worker_id: str) -> str:
    if kind in ("live", "waiting", "zombie"):
        return coordinator_dump(kind)
    if kind == "driver":
        return driver_dump()
    return worker_dump(worker_id, busy=kind == "busy", in_shard=kind == "hung")
