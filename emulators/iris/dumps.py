"""Thread dumps in py-spy `dump` format, as ProfileTask(threads) returns them: py-spy 0.4 on a
Python 3.11+ worker, so a method is named by its qualified name (`Condition.wait`,
`ZephyrCoordinator._wait_for_stage`), a thread by its OS thread id in decimal (the main
thread's is the process id), after a `Process N: <cmdline>` and a `Python v3.x` line."""

from __future__ import annotations

from emulators.iris.procs import MAIN_PID
from emulators.iris.timeline import DumpKind

_HEADER = f"Process {MAIN_PID}: {{cmd}}\nPython v3.11.9 (/usr/bin/python3.11)\n\n"
# Thread n of a process: the main thread (1) has the process's id; the others come later.
_THREAD_ID_BASE = 40


def _thread(ident: int, status: str, name: str, frames: list[str]) -> str:
    body = "".join(f"    {frame}\n" for frame in frames)
    tid = MAIN_PID if ident == 1 else MAIN_PID + _THREAD_ID_BASE + ident
    return f'Thread {tid} ({status}): "{name}"\n{body}'


_RUN = ["Thread.run (threading.py:982)", "Thread._bootstrap_inner (threading.py:1045)"]
_MAIN = ["Condition.wait (threading.py:331)", "ActorServer.serve_forever (iris/actor/server.py:88)"]
_LOOP = ["ZephyrCoordinator._coordinator_loop (zephyr/execution.py:233)", *_RUN]
_WAIT_STAGE = [
    "ZephyrCoordinator._wait_for_stage (zephyr/execution.py:412)",
    "ZephyrCoordinator.run_pipeline (zephyr/execution.py:380)",
    "_worker (concurrent/futures/thread.py:83)",
    *_RUN,
]
_IDLE_POOL = ["_worker (concurrent/futures/thread.py:83)", *_RUN]


def coordinator_dump(kind: DumpKind) -> str:
    threads = [_thread(1, "idle", "MainThread", _MAIN)]
    if kind in ("live", "waiting"):
        status = "active+gil" if kind == "live" else "idle"
        threads.append(_thread(2, status, "zephyr-coordinator-loop", _LOOP))
    if kind == "live":
        threads.append(_thread(3, "idle", "actor-method_0", _WAIT_STAGE))
        threads.append(_thread(4, "idle", "actor-method_1", _IDLE_POOL))
    else:
        threads += [_thread(3 + i, "idle", f"actor-method_{i}", _IDLE_POOL) for i in range(3)]
    return _HEADER.format(cmd="python -m zephyr.coordinator") + "".join(threads)


def worker_dump(worker_id: str, busy: bool, in_shard: bool = False) -> str:
    """A zephyr worker: in _execute_shard (on CPU when busy, blocked when not) or polling."""
    shard = ["ZephyrWorker._execute_shard (zephyr/worker.py:212)"] if busy or in_shard else []
    poll = [*shard, "ZephyrWorker._poll_loop (zephyr/worker.py:140)", *_RUN]
    beat = ["ZephyrWorker._heartbeat_loop (zephyr/worker.py:96)", *_RUN]
    threads = [
        _thread(1, "idle", "MainThread", _MAIN),
        _thread(2, "active+gil" if busy else "idle", f"zephyr-poll-{worker_id}", poll),
        _thread(3, "idle", f"zephyr-hb-{worker_id}", beat),
    ]
    return _HEADER.format(cmd="python -m zephyr.worker") + "".join(threads)


def driver_dump() -> str:
    main = [
        "Condition.wait (threading.py:331)",
        "ZephyrContext.execute (zephyr/execution.py:520)",
        "<module> (main.py:40)",
    ]
    return _HEADER.format(cmd="python main.py") + _thread(1, "idle", "MainThread", main)


def dump_for(kind: DumpKind, worker_id: str) -> str:
    if kind in ("live", "waiting", "zombie"):
        return coordinator_dump(kind)
    if kind == "driver":
        return driver_dump()
    return worker_dump(worker_id, busy=kind == "busy", in_shard=kind == "hung")
