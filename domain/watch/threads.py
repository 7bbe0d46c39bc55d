"""What a coordinator's thread dump (py-spy `dump` text from ProfileTask) says about it.

Rules, first match wins (frames are searched in every thread):

| # | the dump | state |
|---|---|---|
| 1 | no thread could be read | unknown |
| 2 | a `_wait_for_stage` frame and a `_coordinator_loop` frame | active |
| 3 | `_coordinator_loop`, no `_wait_for_stage` (quiet between stages or pipelines) | waiting |
| 4 | `_wait_for_stage` without `_coordinator_loop` (nothing dispatches for it) | unknown |
| 5 | neither; actor-method_* threads, every one idle in the pool's `_worker` | zombie |
| 6 | anything else (no actor-method threads, or one busy elsewhere) | unknown |

A pool thread is idle in `_worker` when it is not tagged active and `_worker` is its innermost
frame, or only stdlib waiting (threading.py, queue.py) lies inside it. A frame is named bare
(`_wait_for_stage`) or, as py-spy 0.4 prints methods on Python 3.11+, qualified
(`ZephyrCoordinator._wait_for_stage`).
"""

from __future__ import annotations

import re
from enum import StrEnum

from keeper.domain.watch.values import Frozen


class ThreadState(StrEnum):
    ACTIVE = "active"
    WAITING = "waiting"
    ZOMBIE = "zombie"
    UNKNOWN = "unknown"


class Frame(Frozen):
    function: str
    file: str = ""
    line: int | None = None

    def named(self, function: str) -> bool:
        """`function`, bare or as a method: py-spy 0.4 prints a method on Python 3.11+ by its
        qualified name (`ZephyrCoordinator._wait_for_stage`)."""
        return self.function == function or self.function.endswith("." + function)


class Thread(Frozen):
    ident: str
    name: str = ""
    # py-spy's tags: "idle", "active", "gil" ("active+gil" reads as both).
    tags: frozenset[str] = frozenset()
    # Innermost first, as py-spy prints them.
    frames: tuple[Frame, ...] = ()

    @property
    def idle(self) -> bool:
        return "active" not in self.tags

    def has(self, function: str) -> bool:
        return any(frame.named(function) for frame in self.frames)


class DumpReading(Frozen):
    state: ThreadState
    # One sentence for the operator, naming the threads the verdict rests on.
    evidence: str
    threads: int = 0


_THREAD = re.compile(
    r"^Thread\s+(?P<ident>\S+)(?:\s+\((?P<tags>[^)]*)\))?(?::\s*\"(?P<name>[^\"]*)\"|:\s*(?P<bare>\S.*))?\s*$"
)
_FRAME = re.compile(r"^\s+(?P<function>\S.*?)\s+\((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
LOOP, WAIT, POOL = "_coordinator_loop", "_wait_for_stage", "_worker"
_STDLIB_WAITS = ("threading.py", "queue.py")


def parse_dump(text: str) -> list[Thread]:
    """The threads of a py-spy dump; headers, locals and unreadable lines are skipped."""
    threads: list[Thread] = []
    for raw in text.splitlines():
        header = None if raw[:1].isspace() else _THREAD.match(raw.strip())
        if header is not None:
            tags = header["tags"] or ""
            threads.append(
                Thread(
                    ident=header["ident"],
                    name=header["name"] or (header["bare"] or "").strip().strip('"'),
                    tags=frozenset(t.strip().lower() for t in tags.split("+") if t.strip()),
                )
            )
            continue
        frame = _FRAME.match(raw.rstrip()) if threads else None
        if frame is not None:
            line = int(frame["line"]) if frame["line"] else None
            found = Frame(function=frame["function"], file=frame["file"], line=line)
            threads[-1] = threads[-1].model_copy(update={"frames": (*threads[-1].frames, found)})
    return threads


def _idle_in_pool(thread: Thread) -> bool:
    if not thread.idle:
        return False
    for frame in thread.frames:
        if frame.named(POOL):
            return True
        if not frame.file.endswith(_STDLIB_WAITS):
            return False
    return False


def read_dump(text: str) -> DumpReading:
    """The coordinator's state from its thread dump, with the evidence (table above)."""
    threads = parse_dump(text)
    state, evidence = _judge(threads)
    return DumpReading(state=state, evidence=evidence, threads=len(threads))


def _judge(threads: list[Thread]) -> tuple[ThreadState, str]:
    if not threads:
        return ThreadState.UNKNOWN, "no threads in the dump"
    loop = next((t for t in threads if t.has(LOOP)), None)
    wait = next((t for t in threads if t.has(WAIT)), None)
    if wait is not None and loop is not None:
        return ThreadState.ACTIVE, f"thread {_name(wait)} in {WAIT}; {_name(loop)} present"
    if loop is not None:
        return ThreadState.WAITING, f"{_name(loop)} present; no thread in {WAIT}"
    if wait is not None:
        return (
            ThreadState.UNKNOWN,
            f"thread {_name(wait)} in {WAIT} but no {LOOP} thread dispatches",
        )
    pool = [t for t in threads if t.name.startswith("actor-method")]
    busy = [t for t in pool if not _idle_in_pool(t)]
    if pool and not busy:
        return (
            ThreadState.ZOMBIE,
            f"no {LOOP} or {WAIT}; all {len(pool)} actor-method threads idle in {POOL}",
        )
    if not pool:
        return (
            ThreadState.UNKNOWN,
            f"no {LOOP}, {WAIT} or actor-method threads among {len(threads)}",
        )
    where = busy[0].frames[0].function if busy[0].frames else "no frames"
    return ThreadState.UNKNOWN, f"no {LOOP} or {WAIT}; thread {_name(busy[0])} busy in {where}"


def _name(thread: Thread) -> str:
    return thread.name or thread.ident
