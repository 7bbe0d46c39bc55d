"""What a zephyr coordinator's log says: stage progress, failures, errors, and the noise.

The progress line comes in three generations (all searched for, never full-line matched,
because a logging prefix such as `I1201 12:00:05.123 execution.py:233] ` may precede it):

| generation | shape |
|---|---|
| old | `[<stage>] <d>/<t> complete, <n> in-flight, <n> queued, <a>/<r> workers alive, <x> dead` |
| later | `[<exec>] ` + the same + `; items=<n> (<r>/s), bytes_processed=<x> (<y>/s)` |
| newest | `[<exec>] ` + the same + `. <free-form throughput>` |

Other lines become `LogEvent`s (see `EVENT_PATTERNS`). Noise is what a large pool floods
the log with (`NOISE`); a line that reads as progress or as an event is never noise.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from enum import StrEnum

from pydantic import Field, field_validator

from keeper.domain.watch.values import Frozen


class StageProgress(Frozen):
    """One progress line, read."""

    execution_id: str | None = None
    stage: str
    done: int
    total: int
    in_flight: int
    queued: int
    alive: int
    registered: int
    dead: int
    items: int | None = None
    items_rate: float | None = None
    # As zephyr prints them (`12.5MiB`, `0.4MiB`): keeper shows them, never computes with them.
    bytes_processed: str | None = None
    bytes_rate: str | None = None
    # The newest generation's free-form tail, verbatim.
    throughput: str = ""
    # When the line was logged; set by `digest`, None for a bare `parse_progress`.
    at_ms: int | None = None

    @property
    def complete(self) -> bool:
        return self.total > 0 and self.done >= self.total

    @property
    def idle_workers(self) -> int:
        """Alive workers that hold no shard."""
        return max(0, self.alive - self.in_flight)

    def line(self) -> str:
        """The progress as the coordinator logs it (the middle generation, without throughput)."""
        head = f"[{self.execution_id}] " if self.execution_id else ""
        return (
            f"{head}[{self.stage}] {self.done}/{self.total} complete, {self.in_flight} in-flight, "
            f"{self.queued} queued, {self.alive}/{self.registered} workers alive, {self.dead} dead"
        )


_INT = r"\d[\d,]*"
_PROGRESS = re.compile(
    r"(?:\[(?P<exec>[^\[\]]+)\]\s+)?\[(?P<stage>[^\[\]]+)\]\s+"
    rf"(?P<done>{_INT})/(?P<total>{_INT}) complete, (?P<in_flight>{_INT}) in-flight, "
    rf"(?P<queued>{_INT}) queued, (?P<alive>{_INT})/(?P<registered>{_INT}) workers alive, "
    rf"(?P<dead>{_INT}) dead(?P<rest>.*)$"
)
_ITEMS = re.compile(r"items=(?P<n>\d[\d,]*)(?:\s*\((?P<rate>[\d.]+)/s\))?")
_BYTES = re.compile(r"bytes_processed=(?P<x>[^\s(,;]+)(?:\s*\((?P<rate>[^)\s]+)/s\))?")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_progress(text: str) -> StageProgress | None:
    """The progress `text` reports (any generation, any prefix), or None."""
    match = _PROGRESS.search(text)
    if match is None:
        return None
    rest = match["rest"].strip()
    items = _ITEMS.search(rest)
    size = _BYTES.search(rest)
    throughput = rest.lstrip(".;").strip() if rest.startswith(".") else ""
    return StageProgress(
        execution_id=match["exec"].strip() if match["exec"] else None,
        stage=match["stage"].strip(),
        done=_int(match["done"]),
        total=_int(match["total"]),
        in_flight=_int(match["in_flight"]),
        queued=_int(match["queued"]),
        alive=_int(match["alive"]),
        registered=_int(match["registered"]),
        dead=_int(match["dead"]),
        items=_int(items["n"]) if items else None,
        items_rate=float(items["rate"]) if items and items["rate"] else None,
        bytes_processed=size["x"] if size else None,
        bytes_rate=size["rate"] if size else None,
        throughput=throughput,
    )


class EventKind(StrEnum):
    SHARD_FAILED = "shard_failed"
    INFRA_REQUEUE = "infra_requeue"
    PIPELINE_ABORTED = "pipeline_aborted"
    COORDINATOR_ABORTED = "coordinator_aborted"
    ALL_WORKERS_DEAD = "all_workers_dead"
    SHARDS_RETRIED = "shards_retried"


class ShardFailure(Frozen):
    """`Shard <n> failed on worker <w> (task error <k>/<max>)`: the k-th task error of a shard."""

    shard: int
    worker: str
    k: int | None = None
    max: int | None = None


class LogEvent(Frozen):
    kind: EventKind
    text: str
    at_ms: int | None = None
    task_id: str = ""
    execution_id: str | None = None
    # Shard failures and infra requeues (k and max only for task errors).
    failure: ShardFailure | None = None
    # Why, when the line says (an abort's reason, an infra requeue's cause).
    reason: str = ""
    # Shards retried: attempts → how many shards took that many.
    retried: dict[int, int] = Field(default_factory=dict)


_EXEC = r"(?:\[(?P<exec>[^\[\]]+)\]\s+)?"
# (kind, pattern): tried in order; the first that matches names the event.
EVENT_PATTERNS: list[tuple[EventKind, re.Pattern[str]]] = [
    (EventKind.SHARD_FAILED, re.compile(
        r"Shard (?P<shard>\d+) failed on worker (?P<worker>\S+?)"
        r"(?: \(task error (?P<k>\d+)/(?P<max>\d+)\))?,? re-queuing")),
    (EventKind.INFRA_REQUEUE, re.compile(
        r"Shard (?P<shard>\d+) requeued from worker (?P<worker>\S+?) due to infra failure"
        r"(?:\s*\((?P<reason>[^)]*)\))?")),
    (EventKind.COORDINATOR_ABORTED, re.compile(r"Coordinator aborted:\s*(?P<reason>.*)$")),
    # Anchored: an unanchored lazy `.*?` would rescan a long line from every position.
    (EventKind.PIPELINE_ABORTED, re.compile(r"^(?P<reason>.*?)[\s,;:.]*aborting pipeline")),
    (EventKind.ALL_WORKERS_DEAD, re.compile(r"All workers are dead/failed")),
    (EventKind.SHARDS_RETRIED, re.compile(
        _EXEC + r"Shards retried \(attempts: shard count\):\s*(?P<retried>\{[^}]*\})")),
]  # fmt: skip
_PAIR = re.compile(r"(\d+)\s*:\s*(\d+)")


def parse_event(text: str, at_ms: int | None = None, task_id: str = "") -> LogEvent | None:
    """The failure or retry event `text` reports, or None."""
    message = strip_prefix(text)
    for kind, pattern in EVENT_PATTERNS:
        match = pattern.search(message)
        if match is None:
            continue
        groups = match.groupdict()
        failure = None
        if groups.get("shard") is not None:
            failure = ShardFailure(
                shard=int(groups["shard"]),
                worker=groups["worker"],
                k=int(groups["k"]) if groups.get("k") else None,
                max=int(groups["max"]) if groups.get("max") else None,
            )
        retried = {int(a): int(n) for a, n in _PAIR.findall(groups.get("retried") or "")}
        return LogEvent(
            kind=kind,
            text=message,
            at_ms=at_ms,
            task_id=task_id,
            execution_id=groups.get("exec"),
            failure=failure,
            reason=(groups.get("reason") or "").strip(),
            retried=retried,
        )
    return None


# The runbook's flood, case-sensitive as it names them.
NOISE = ("pull_task", "Started operation", "report_result", "registered", "tasks completed")


def is_noise(text: str) -> bool:
    """A flood line to drop: names a noise word and is neither progress nor an event."""
    if not any(word in text for word in NOISE):
        return False
    return parse_progress(text) is None and parse_event(text) is None


# glog (`I1201 12:00:05.123456 execution.py:233] `) and Python logging
# (`2026-12-01 12:00:05,123 INFO zephyr.execution: `, `[2026-12-01 12:00:05] INFO ...`).
_GLOG = re.compile(r"^[DIWEFC]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?\s+(?:\d+\s+)?[\w./-]+:\d+\]\s?")
# iris's own: what its callable runner sets up for the Python a task runs (zephyr's actors),
# a level letter, the date, the time and the logger's name (`I20261204 17:09:01
# zephyr.execution `); rigging's adds the thread id before the name. iris reads the level
# from the letter.
_IRIS_LOG = re.compile(r"^[DIWEC]\d{8} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?\s+(?:\d+\s+)?[\w.<>-]+\s+")
_STAMP = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+"
    r"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+)?"
)
_LOGGER = re.compile(r"^(?P<name>[\w.]+)(?::\s+|\s+-\s+)")
# A traceback's last line: `RuntimeError: ...`, `torch.cuda.OutOfMemoryError: ...`,
# `KeyboardInterrupt`. A bare word with no colon must end like an exception name.
_EXCEPTION_TYPE = (
    r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Fault|Failure|Timeout|Warning)"
)
_EXCEPTION = re.compile(rf"^(?P<type>{_EXCEPTION_TYPE})(?::\s*(?P<message>.*))?$")
_IS_EXCEPTION_TYPE = re.compile(rf"^{_EXCEPTION_TYPE}$")


def strip_prefix(text: str) -> str:
    """`text` without a leading logging prefix and surrounding whitespace."""
    text = text.strip()
    match = _GLOG.match(text) or _IRIS_LOG.match(text)
    if match:
        return text[match.end() :].strip()
    match = _STAMP.match(text)
    if match is None:
        return text
    rest = text[match.end() :]
    logger = _LOGGER.match(rest)
    # `RuntimeError: ...` after the time stamp is the message, not a logger's name.
    if logger and not _IS_EXCEPTION_TYPE.match(logger["name"]):
        rest = rest[logger.end() :]
    return rest.strip()


def exception_line(text: str) -> str | None:
    """`text` as a traceback's last line (`OSError: [Errno 28] ...`), or None."""
    message = strip_prefix(text)
    return message if _EXCEPTION.match(message) else None


_LEVELS = {"1": "DEBUG", "2": "INFO", "3": "WARNING", "4": "ERROR", "5": "CRITICAL",
           "WARN": "WARNING", "FATAL": "CRITICAL"}  # fmt: skip
ERROR_LEVELS = frozenset({"ERROR", "CRITICAL"})


class LogLine(Frozen):
    """One log entry as the activity hands it over (LogEntry, plain values)."""

    at_ms: int = 0
    # DEBUG…CRITICAL; the enum's names (`LOG_LEVEL_ERROR`) and numbers (4) are read too.
    level: str = ""
    source: str = ""
    text: str
    task_id: str = ""

    @field_validator("level", mode="before")
    @classmethod
    def _level(cls, value: object) -> object:
        if not isinstance(value, int | str):
            return value
        name = str(value).strip().upper().removeprefix("LOG_LEVEL_")
        return _LEVELS.get(name, name)


class ErrorLine(Frozen):
    at_ms: int
    task_id: str = ""
    level: str = ""
    text: str
    # normalise_error(text): equal for repeats of the same error.
    signature: str


class LogDigest(Frozen):
    """A batch of log lines, reduced to what the watch reasons about."""

    # The last progress line of each execution ("" for the oldest generation, which has none).
    progress: dict[str, StageProgress] = Field(default_factory=dict)
    # The last progress line of any execution.
    latest: StageProgress | None = None
    events: list[LogEvent] = Field(default_factory=list)
    errors: list[ErrorLine] = Field(default_factory=list)
    # How many events and errors there were before the lists were cut to their bounds.
    event_count: int = 0
    error_count: int = 0
    noise_dropped: int = 0
    lines: int = 0
    last_line_ms: int | None = None

    def error_signatures(self) -> Counter[str]:
        return Counter(error.signature for error in self.errors)


def digest(lines: Sequence[LogLine], max_events: int = 200, max_errors: int = 100) -> LogDigest:
    """Reduces `lines` (oldest first) to a `LogDigest`; the lists keep their newest entries.

    An error is a line at ERROR or CRITICAL, or a traceback's last line at any level. Error
    lines are never dropped as noise.
    """
    progress: dict[str, StageProgress] = {}
    latest: StageProgress | None = None
    events: list[LogEvent] = []
    errors: list[ErrorLine] = []
    noise = 0
    last_ms: int | None = None
    for line in lines:
        is_error = line.level in ERROR_LEVELS
        found = parse_progress(line.text)
        if found is not None:
            latest = found.model_copy(update={"at_ms": line.at_ms})
            progress[found.execution_id or ""] = latest
        elif not is_error and is_noise(line.text):
            noise += 1
            continue
        last_ms = line.at_ms if last_ms is None else max(last_ms, line.at_ms)
        if found is not None:
            continue
        event = parse_event(line.text, line.at_ms, line.task_id)
        if event is not None:
            events.append(event)
        message = strip_prefix(line.text)
        if is_error or _EXCEPTION.match(message):
            errors.append(
                ErrorLine(
                    at_ms=line.at_ms,
                    task_id=line.task_id,
                    level=line.level,
                    text=message,
                    signature=normalise_error(message),
                )
            )
    return LogDigest(
        progress=progress,
        latest=latest,
        events=events[-max_events:],
        errors=errors[-max_errors:],
        event_count=len(events),
        error_count=len(errors),
        noise_dropped=noise,
        lines=len(lines),
        last_line_ms=last_ms,
    )


def _hexish(match: re.Match[str]) -> str:
    # Only words with both a digit and a hex letter are ids: "deadline" and "12345678" are not.
    word = match.group(0)
    has_digit = any(c.isdigit() for c in word)
    has_letter = any(c in "abcdefABCDEF" for c in word)
    return "<id>" if has_digit and has_letter else word


# Variable parts, replaced in this order: hex ids before numbers, so an id is one token.
_VARIABLE: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    (re.compile(r"\b[0-9a-fA-F][0-9a-fA-F-]{6,}[0-9a-fA-F]\b"), _hexish),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]
MAX_SIGNATURE = 300


def normalise_error(text: str) -> str:
    """`text` with its variable parts (numbers, hex and uuid ids, worker indices, the numeric
    parts of paths and sizes) replaced, so repeats of one error compare equal:
    `Shard 17 failed on worker w-3` and `Shard 4 failed on worker w-9` both read
    `Shard <n> failed on worker w-<n>`."""
    out = strip_prefix(text)
    for pattern, replacement in _VARIABLE:
        out = pattern.sub(replacement, out)
    return out.strip()[:MAX_SIGNATURE]


def misleading_termination(error: str) -> bool:
    """iris records "Terminated by user" for internal terminations too: it names no cause."""
    return "terminated by user" in error.lower()


class CauseSource(StrEnum):
    WORKER = "worker"
    COORDINATOR = "coordinator"
    PARENT = "parent"
    NONE = "none"


class Cause(Frozen):
    """The most specific evidence of why a job ended, and where it was found."""

    source: CauseSource
    summary: str
    evidence: tuple[str, ...] = ()
    # The levels whose logs were not read: the cause is provisional until this is empty.
    unread: tuple[str, ...] = ()
    # The only evidence is "Terminated by user", which may not mean a person.
    misleading: bool = False

    @property
    def conclusive(self) -> bool:
        return not self.unread and self.source is not CauseSource.NONE and not self.misleading


# Coordinator events that name a cause, most specific first.
_COORD_CAUSES = (
    EventKind.COORDINATOR_ABORTED,
    EventKind.PIPELINE_ABORTED,
    EventKind.ALL_WORKERS_DEAD,
    EventKind.SHARD_FAILED,
)


def name_cause(
    parent_error: str,
    coord_events: Sequence[LogEvent] | None,
    worker_errors: Sequence[str] | None,
) -> Cause:
    """The cause, most specific evidence first:

    | # | evidence | source |
    |---|---|---|
    | 1 | a worker traceback's error (the most frequent signature, latest on a tie) | worker |
    | 2 | any other worker error line | worker |
    | 3 | coordinator aborted / pipeline aborted / all workers dead / shard failures | coordinator |
    | 4 | the parent's error, unless it is "Terminated by user" | parent |
    | 5 | "Terminated by user" alone | parent, misleading |
    | 6 | nothing | none |

    Pass None for a level whose logs were not read: it is named in `unread`, and a cause is
    conclusive only once parent, coordinator and workers were all read.
    """
    unread = tuple(
        level
        for level, read in (("coordinator", coord_events), ("workers", worker_errors))
        if read is None
    )
    if isinstance(worker_errors, str):
        worker_errors = [worker_errors]
    errors = [strip_prefix(e) for e in worker_errors or () if e.strip()]
    tracebacks = [e for e in errors if _EXCEPTION.match(e)]
    for found in (tracebacks, errors):
        if found:
            counts = Counter(normalise_error(e) for e in found)
            best = max(counts.values())
            chosen = next(e for e in reversed(found) if counts[normalise_error(e)] == best)
            return Cause(
                source=CauseSource.WORKER,
                summary=chosen,
                evidence=(f"{best} of {len(errors)} worker error lines read like this",),
                unread=unread,
            )
    for kind in _COORD_CAUSES:
        matching = [e for e in coord_events or () if e.kind is kind]
        if matching:
            return Cause(
                source=CauseSource.COORDINATOR,
                summary=matching[-1].reason or matching[-1].text,
                evidence=tuple(e.text for e in matching[-3:]),
                unread=unread,
            )
    if parent_error.strip() and not misleading_termination(parent_error):
        return Cause(source=CauseSource.PARENT, summary=parent_error.strip(), unread=unread)
    if parent_error.strip():
        return Cause(
            source=CauseSource.PARENT,
            summary=(
                f"{parent_error.strip()!r}, and no worker or coordinator log names a cause: "
                "iris uses this for internal terminations too, so it need not mean a person"
            ),
            unread=unread,
            misleading=True,
        )
    return Cause(source=CauseSource.NONE, summary="no log names a cause", unread=unread)
