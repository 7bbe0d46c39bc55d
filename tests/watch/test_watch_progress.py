"""Table tests for reading coordinator and worker logs (domain/watch/progress.py): the three
progress generations, noise floods, failure events, error signatures and naming a cause."""

from __future__ import annotations

from typing import Any

import pytest

from keeper.domain.watch.progress import (
    CauseSource,
    EventKind,
    LogEvent,
    LogLine,
    ShardFailure,
    StageProgress,
    digest,
    exception_line,
    is_noise,
    misleading_termination,
    name_cause,
    normalise_error,
    parse_event,
    parse_progress,
    strip_prefix,
)

GLOG = "I1201 12:00:05.123 execution.py:233] "
ARROW = "stage1-Reduce → Scatter"
OLD = "[stage0-Map] 3/5 complete, 2 in-flight, 0 queued, 4/4 workers alive, 0 dead"
LATER = (
    f"[exec-7f3a] [{ARROW}] 4999/5000 complete, 1 in-flight, 0 queued, 3000/3000 workers alive, "
    "0 dead; items=123456 (41.5/s), bytes_processed=12.5MiB (0.4MiB/s)"
)
NEWEST = (
    "[exec-2] [stage2-Write parquet → gs] 10/64 complete, 8 in-flight, 46 queued, "
    "8/10 workers alive, 2 dead. 1.2M items in 5m (4.1k/s)"
)
BASE = {"items": None, "items_rate": None, "bytes_processed": None, "bytes_rate": None,
        "throughput": ""}  # fmt: skip

# (case, line, expected fields)
PROGRESS: list[tuple[str, str, dict[str, Any]]] = [
    ("oldest", OLD, {"execution_id": None, "stage": "stage0-Map", "done": 3, "total": 5,
     "in_flight": 2, "queued": 0, "alive": 4, "registered": 4, "dead": 0}),
    ("oldest behind a glog prefix", GLOG + OLD, {"execution_id": None, "stage": "stage0-Map",
     "done": 3}),
    ("later, stage with an arrow", LATER, {"execution_id": "exec-7f3a", "stage": ARROW,
     "done": 4999, "total": 5000, "in_flight": 1, "queued": 0, "alive": 3000,
     "registered": 3000, "items": 123456, "items_rate": 41.5, "bytes_processed": "12.5MiB",
     "bytes_rate": "0.4MiB"}),
    ("later behind a python logging prefix",
     "2026-12-01 12:00:05,123 INFO zephyr.execution: " + LATER,
     {"execution_id": "exec-7f3a", "stage": ARROW, "done": 4999}),
    ("newest, free-form throughput", GLOG + NEWEST, {"execution_id": "exec-2",
     "stage": "stage2-Write parquet → gs", "done": 10, "total": 64, "in_flight": 8,
     "queued": 46, "alive": 8, "registered": 10, "dead": 2,
     "throughput": "1.2M items in 5m (4.1k/s)"}),
    ("newest with items= in the tail",
     "[e] [s] 1/2 complete, 1 in-flight, 0 queued, 1/1 workers alive, 0 dead. items=5 (0.5/s)",
     {"items": 5, "items_rate": 0.5, "throughput": "items=5 (0.5/s)"}),
    ("thousands separators",
     "[big] 1,234/10,000 complete, 100 in-flight, 8,666 queued, 3,000/3,000 workers alive, 0 dead",
     {"done": 1234, "total": 10000, "queued": 8666, "alive": 3000}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "line", "fields"), PROGRESS, ids=[r[0] for r in PROGRESS])
def test_parse_progress_reads_every_generation(case: str, line: str, fields: dict) -> None:
    progress = parse_progress(line)
    assert progress is not None
    got = progress.model_dump()
    expected = {**BASE, **fields} if case == "oldest" else fields
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Started operation pull_task on worker w-3",
        "[stage0-Map] 3/5 complete",  # cut short
        "[stage0-Map] three/5 complete, 2 in-flight, 0 queued, 4/4 workers alive, 0 dead",
        "Shard 3 failed on worker w-1 (task error 1/3), re-queuing.",
        "3/5 complete, 2 in-flight, 0 queued, 4/4 workers alive, 0 dead",  # no stage
    ],
)
def test_parse_progress_of_other_lines_is_none(line: str) -> None:
    assert parse_progress(line) is None


def test_progress_line_round_trips() -> None:
    progress = parse_progress(LATER)
    assert progress is not None
    assert parse_progress(progress.line()) == progress.model_copy(
        update={"items": None, "items_rate": None, "bytes_processed": None, "bytes_rate": None}
    )
    assert progress.idle_workers == 2999 and not progress.complete


@pytest.mark.parametrize(
    ("line", "noise"),
    [
        ("pull_task from w-17: no task", True),
        (GLOG + "Started operation report_result", True),
        ("report_result shard=3 worker=w-9", True),
        ("Worker zephyr-t-3f2a9b1c-p0-workers-12 registered", True),
        ("1200 tasks completed", True),
        # Case-sensitive, as the runbook names them.
        ("Registered 12 workers", False),
        # Progress and events are never noise, whatever words they carry.
        (OLD, False),
        (
            "[registered-stage] 3/5 complete, 2 in-flight, 0 queued, 4/4 workers alive, 0 dead",
            False,
        ),
        ("Coordinator aborted: no workers registered within 600s", False),
        ("Shard 3 failed on worker w-1 (task error 1/3), re-queuing.", False),
        ("Loading dataset", False),
    ],
)
def test_only_the_runbooks_noise_words_make_a_line_noise_and_progress_or_events_never_are(
    line: str, noise: bool
) -> None:
    assert is_noise(line) is noise


# (line, kind, failure, reason, extra)
EVENTS: list[tuple[str, EventKind, ShardFailure | None, str, dict[str, Any]]] = [
    ("Shard 17 failed on worker zephyr-t-3f2a9b1c-p0-workers-3 (task error 2/3), re-queuing.",
     EventKind.SHARD_FAILED, ShardFailure(shard=17, worker="zephyr-t-3f2a9b1c-p0-workers-3",
     k=2, max=3), "", {}),
    (GLOG + "Shard 4 requeued from worker w-9 due to infra failure (preemption/heartbeat)",
     EventKind.INFRA_REQUEUE, ShardFailure(shard=4, worker="w-9"), "preemption/heartbeat", {}),
    ("E1201 12:00:05.123 execution.py:301] Shard 17 failed 3 times, aborting pipeline.",
     EventKind.PIPELINE_ABORTED, None, "Shard 17 failed 3 times", {}),
    ("Coordinator aborted: worker pool lost", EventKind.COORDINATOR_ABORTED, None,
     "worker pool lost", {}),
    ("All workers are dead/failed. Waiting for workers to recover...",
     EventKind.ALL_WORKERS_DEAD, None, "", {}),
    ("W1201 12:00:05.123 execution.py:250] [exec-7f3a] Shards retried (attempts: shard "
     "count): {2: 5, 3: 1}", EventKind.SHARDS_RETRIED, None, "",
     {"execution_id": "exec-7f3a", "retried": {2: 5, 3: 1}}),
]  # fmt: skip


@pytest.mark.parametrize(("line", "kind", "failure", "reason", "extra"), EVENTS)
def test_parse_event_reads_each_kind(
    line: str, kind: EventKind, failure: ShardFailure | None, reason: str, extra: dict
) -> None:
    event = parse_event(line, at_ms=5, task_id="/a/j/c/0")
    assert event is not None
    assert (event.kind, event.failure, event.reason) == (kind, failure, reason)
    assert (event.at_ms, event.task_id) == (5, "/a/j/c/0")
    assert not event.text.startswith(("I1201", "W1201", "E1201"))
    for name, value in extra.items():
        assert getattr(event, name) == value


def test_every_event_kind_has_a_row() -> None:
    assert {row[1] for row in EVENTS} == set(EventKind)


@pytest.mark.parametrize("line", [OLD, "pull_task", "Shard 17 is large", ""])
def test_parse_event_of_other_lines_is_none(line: str) -> None:
    assert parse_event(line) is None


def _lines(*texts: str, level: str = "INFO", start: int = 0) -> list[LogLine]:
    return [LogLine(at_ms=start + i, level=level, text=t) for i, t in enumerate(texts)]


def test_digest_finds_the_one_progress_line_in_a_flood() -> None:
    flood = [f"pull_task from zephyr-t-3f2a9b1c-p0-workers-{i}: nothing" for i in range(3000)]
    flood += [f"Started operation report_result {i}" for i in range(3000)]
    texts = [*flood[:4000], GLOG + LATER, *flood[4000:]]
    result = digest(_lines(*texts))
    assert result.latest is not None and result.latest.done == 4999
    assert result.latest.at_ms == 4000
    assert result.progress == {"exec-7f3a": result.latest}
    assert result.noise_dropped == 6000 and result.lines == 6001
    # The last line that was not noise is the progress line, not the flood after it.
    assert result.last_line_ms == 4000
    assert result.events == [] and result.errors == []


def test_digest_keeps_the_latest_progress_of_each_execution() -> None:
    a1 = "[ex-a] [s1] 1/10 complete, 1 in-flight, 8 queued, 2/2 workers alive, 0 dead"
    b1 = "[ex-b] [s9 → s10] 5/6 complete, 1 in-flight, 0 queued, 2/2 workers alive, 0 dead"
    a2 = "[ex-a] [s1] 4/10 complete, 1 in-flight, 5 queued, 2/2 workers alive, 0 dead"
    result = digest(_lines(a1, b1, a2, OLD))
    assert {k: v.done for k, v in result.progress.items()} == {"ex-a": 4, "ex-b": 5, "": 3}
    assert result.latest is not None and result.latest.stage == "stage0-Map"


def test_digest_collects_events_and_errors() -> None:
    lines = [
        *_lines("Shard 3 failed on worker w-1 (task error 1/3), re-queuing.", OLD),
        LogLine(at_ms=10, level="ERROR", text=GLOG + "Shard 3 failed 3 times, aborting pipeline."),
        # A traceback on a worker's stderr: only its last line is the error.
        LogLine(at_ms=11, source="stderr", text="Traceback (most recent call last):"),
        LogLine(at_ms=12, source="stderr", text='  File "train.py", line 3, in <module>'),
        LogLine(at_ms=13, source="stderr", text="RuntimeError: CUDA out of memory"),
        # An error-level line is kept even when it carries a noise word.
        LogLine(at_ms=14, level="LOG_LEVEL_ERROR", text="report_result failed: timeout"),
        LogLine(at_ms=15, level="WARNING", text="report_result slow"),
    ]
    result = digest(lines)
    assert [e.kind for e in result.events] == [EventKind.SHARD_FAILED, EventKind.PIPELINE_ABORTED]
    assert [e.text for e in result.errors] == [
        "Shard 3 failed 3 times, aborting pipeline.",
        "RuntimeError: CUDA out of memory",
        "report_result failed: timeout",
    ]
    assert result.errors[2].level == "ERROR"
    assert result.noise_dropped == 1 and result.last_line_ms == 14
    assert result.error_signatures()["RuntimeError: CUDA out of memory"] == 1


def test_digest_bounds_its_lists_but_counts_everything() -> None:
    texts = [f"Shard {i} failed on worker w-{i} (task error 1/3), re-queuing." for i in range(500)]
    result = digest(_lines(*texts, level="ERROR"), max_events=10, max_errors=5)
    assert (len(result.events), result.event_count) == (10, 500)
    assert (len(result.errors), result.error_count) == (5, 500)
    assert result.events[-1].failure == ShardFailure(shard=499, worker="w-499", k=1, max=3)


@pytest.mark.parametrize(
    ("level", "expected"),
    [("error", "ERROR"), ("LOG_LEVEL_CRITICAL", "CRITICAL"), (4, "ERROR"), ("3", "WARNING"),
     ("WARN", "WARNING"), ("", "")],
)  # fmt: skip
def test_a_log_level_given_as_a_name_a_number_or_an_iris_enum_reads_as_one_name(
    level: str | int, expected: str
) -> None:
    assert LogLine(text="x", level=level).level == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Shard 17 failed on worker w-3 (task error 1/3), re-queuing.",
         "Shard 4 failed on worker w-9 (task error 2/3), re-queuing."),
        ("Shard 17 failed on worker zephyr-tok-3f2a9b1c-p0-workers-17: boom",
         "Shard 2 failed on worker zephyr-tok-0badf00d-p0-workers-940: boom"),
        ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)",
         "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 3; 79.15 GiB total)"),
        ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
         "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ("OSError: [Errno 28] No space left on device: '/tmp/job-1234/shard-00017.parquet'",
         "OSError: [Errno 28] No space left on device: '/tmp/job-98/shard-04999.parquet'"),
        ("KeyError: 'doc-6f1e2a7b9c'", "KeyError: 'doc-0a1b2c3d4e'"),
        ("object at 0x7f3a2b1c9d80 is gone", "object at 0x7f00ffee0001 is gone"),
        (GLOG + "ValueError: bad row 17", "E1202 01:02:03.000 reader.py:9] ValueError: bad row 2"),
    ],
)  # fmt: skip
def test_normalise_error_matches_repeats(a: str, b: str) -> None:
    assert normalise_error(a) == normalise_error(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("RuntimeError: CUDA out of memory", "OSError: [Errno 28] No space left on device"),
        ("Shard 1 failed on worker w-1: boom", "Shard 1 failed on worker w-1: bang"),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory. Tried 2.00 MiB"),
    ],
)
def test_normalise_error_keeps_different_errors_apart(a: str, b: str) -> None:
    assert normalise_error(a) != normalise_error(b)


def test_normalise_error_keeps_words_that_look_like_hex() -> None:
    assert normalise_error("deadline exceeded after 30s") == "deadline exceeded after <n>s"


# (line, the error it reads as; None = not a traceback's last line)
EXCEPTIONS: list[tuple[str, str | None]] = [
    ("RuntimeError: CUDA out of memory", "RuntimeError: CUDA out of memory"),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory.", "same"),
    ("OSError: [Errno 28] No space left on device", "same"),
    ("KeyboardInterrupt", "same"),
    ("  jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED",
     "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED"),
    ("Traceback (most recent call last):", None),
    ("Error while loading", None),
    ("the Error: was here", None),
]  # fmt: skip


@pytest.mark.parametrize(("line", "error"), EXCEPTIONS)
def test_only_a_tracebacks_last_line_reads_as_an_error(line: str, error: str | None) -> None:
    assert exception_line(line) == (line if error == "same" else error)


def test_a_lines_stamp_level_and_logger_are_stripped_but_an_exception_name_is_kept() -> None:
    assert strip_prefix(GLOG + "x y") == "x y"
    assert strip_prefix("2026-12-01T12:00:05.123Z WARNING zephyr.execution: x") == "x"
    assert strip_prefix("[2026-12-01 12:00:05] ERROR x") == "x"
    assert strip_prefix("  plain  ") == "plain"
    # An exception after the stamp is the message, not a logger's name.
    stamp = "2026-12-01 12:00:05,123 ERROR "
    assert strip_prefix(stamp + "RuntimeError: CUDA out of memory") == (
        "RuntimeError: CUDA out of memory"
    )
    assert strip_prefix(stamp + "torch.cuda.OutOfMemoryError: x") == (
        "torch.cuda.OutOfMemoryError: x"
    )
    assert exception_line(stamp + "OSError: [Errno 28] No space left on device") is not None


@pytest.mark.parametrize(
    ("error", "misleading"),
    [("Terminated by user", True), ("Job failed: terminated by user", True),
     ("Exit code 137: OOM killed", False), ("", False)],
)  # fmt: skip
def test_only_terminated_by_user_is_a_misleading_termination(error: str, misleading: bool) -> None:
    assert misleading_termination(error) is misleading


ABORT = LogEvent(kind=EventKind.COORDINATOR_ABORTED, text="Coordinator aborted: lost",
                 reason="lost")  # fmt: skip
FAILED = LogEvent(kind=EventKind.SHARD_FAILED, text="Shard 1 failed on worker w-1, re-queuing.")
OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"

# (case, parent error, coordinator events, worker errors, source, summary part, misleading,
#  unread)
CAUSES: list[tuple[str, str, Any, Any, CauseSource, str, bool, tuple[str, ...]]] = [
    ("a worker traceback beats 'Terminated by user'", "Terminated by user", [ABORT],
     ["warning: slow", OOM, OOM.replace("2.00", "4.00"), "OSError: [Errno 28] No space"],
     CauseSource.WORKER, "Tried to allocate 4.00 GiB", False, ()),
    ("any worker error line when there is no traceback", "Terminated by user", [],
     ["fetch failed for shard 3"], CauseSource.WORKER, "fetch failed", False, ()),
    ("the coordinator's abort beats its shard failures", "Terminated by user",
     [FAILED, ABORT, FAILED], [], CauseSource.COORDINATOR, "lost", False, ()),
    ("shard failures when nothing else", "", [FAILED], [], CauseSource.COORDINATOR,
     "Shard 1 failed", False, ()),
    ("the parent's own error", "Exit code 137", [], [], CauseSource.PARENT, "Exit code 137",
     False, ()),
    ("'Terminated by user' alone is misleading", "Terminated by user", [], [],
     CauseSource.PARENT, "internal terminations", True, ()),
    ("nothing at all", "", [], [], CauseSource.NONE, "no log", False, ()),
    ("unread levels are named", "Terminated by user", None, None, CauseSource.PARENT,
     "Terminated by user", True, ("coordinator", "workers")),
    ("a worker cause with the coordinator unread is provisional", "", None, [OOM],
     CauseSource.WORKER, "CUDA", False, ("coordinator",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "parent", "coord", "workers", "source", "summary", "misleading", "unread"),
    CAUSES, ids=[row[0] for row in CAUSES],
)  # fmt: skip
def test_a_cause_prefers_a_worker_error_then_the_coordinator_then_the_parent_saying_if_unsure(
    case: str, parent: str, coord: Any, workers: Any, source: CauseSource,
    summary: str, misleading: bool, unread: tuple[str, ...],
) -> None:  # fmt: skip
    cause = name_cause(parent, coord, workers)
    assert cause.source is source
    assert summary in cause.summary
    assert (cause.misleading, cause.unread) == (misleading, unread)
    assert cause.conclusive is (source is not CauseSource.NONE and not misleading and not unread)


def test_name_cause_reads_a_single_worker_error_string_whole() -> None:
    cause = name_cause("", [], OOM)  # type: ignore[arg-type]
    assert cause.summary == OOM


def test_stage_progress_is_a_frozen_value() -> None:
    progress = parse_progress(OLD)
    assert isinstance(progress, StageProgress)
    with pytest.raises(ValueError):
        progress.done = 4  # type: ignore[misc]
