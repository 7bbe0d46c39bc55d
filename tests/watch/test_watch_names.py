"""Table tests for zephyr child names, iris states and picking the latest attempt
(domain/watch/names.py)."""

from __future__ import annotations

import pytest

from keeper.domain.watch.names import (
    ACTIVE,
    TERMINAL,
    ChildName,
    ChildRef,
    ChildRole,
    JobPhase,
    attempt_target,
    parse_child,
    parse_task_id,
    phase_of,
    pick_latest,
    task_id,
)
from keeper.wire.iris.enums import JOB_TERMINAL, TASK_TERMINAL, JobState, TaskState

P = JobPhase
JOB = "/alice/tokenize-fineweb"

# (job id, parent, ctx, hash, pipeline, attempt, role)
CHILDREN: list[tuple[str, str, str, str, int, int, ChildRole]] = [
    (f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-a0-coord", JOB, "tokenize", "3f2a9b1c", 0, 0,
     ChildRole.COORD),
    (f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-a0-workers", JOB, "tokenize", "3f2a9b1c", 0, 0,
     ChildRole.WORKERS),
    # A ctx name with dashes and an 8-hex-looking word of its own.
    (f"{JOB}/zephyr-dedup-abcdef12-fuzzy-0badf00d-p2-a3-coord", JOB, "dedup-abcdef12-fuzzy",
     "0badf00d", 2, 3, ChildRole.COORD),
    # No ctx name; OPS.md's short form without "zephyr-"; upper-case hex.
    (f"{JOB}/zephyr-3f2a9b1c-p1-a0-workers", JOB, "", "3f2a9b1c", 1, 0, ChildRole.WORKERS),
    (f"{JOB}/3F2A9B1C-p10-a12-coord", JOB, "", "3f2a9b1c", 10, 12, ChildRole.COORD),
    # Nested parents and a trailing slash.
    ("/bob/outer/inner/zephyr-x-00000000-p0-a1-coord/", "/bob/outer/inner", "x", "00000000", 0,
     1, ChildRole.COORD),
]  # fmt: skip


@pytest.mark.parametrize(("job_id", "parent", "ctx", "hash_", "pipeline", "attempt", "role"),
                         CHILDREN)  # fmt: skip
def test_parse_child_reads_every_part(
    job_id: str, parent: str, ctx: str, hash_: str, pipeline: int, attempt: int, role: ChildRole
) -> None:
    name = parse_child(job_id)
    assert name == ChildName(job_id=job_id.rstrip("/"), parent=parent, ctx=ctx, hash=hash_,
                             pipeline=pipeline, attempt=attempt, role=role)  # fmt: skip


@pytest.mark.parametrize(
    "job_id",
    [
        JOB,  # the parent itself
        f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-a0-coord/0",  # a task id
        f"{JOB}/zephyr-tokenize-3f2a9b-p0-a0-coord",  # 6 hex
        f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-coord",  # no attempt
        f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-a0-driver",  # unknown role
        f"{JOB}/preprocess",
        "zephyr-tokenize-3f2a9b1c-p0-a0-coord",  # no parent
        "",
    ],
)
def test_parse_child_rejects_what_is_not_a_zephyr_child(job_id: str) -> None:
    assert parse_child(job_id) is None


def test_group_is_shared_by_an_attempts_coord_and_workers() -> None:
    coord = parse_child(f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-a1-coord")
    workers = parse_child(f"{JOB}/zephyr-tokenize-3f2a9b1c-p0-a1-workers")
    assert coord is not None and workers is not None
    assert coord.group == workers.group == "tokenize-3f2a9b1c-p0-a1"


@pytest.mark.parametrize(
    ("state", "phase"),
    [
        ("JOB_STATE_RUNNING", P.RUNNING),
        ("TASK_STATE_ASSIGNED", P.ASSIGNED),
        ("TASK_STATE_WORKER_FAILED", P.WORKER_FAILED),
        ("TASK_STATE_COSCHED_FAILED", P.COSCHED_FAILED),
        ("JOB_STATE_PENDING", P.PENDING),
        ("running", P.RUNNING),
        ("worker_failed", P.WORKER_FAILED),
        (" Killed ", P.KILLED),
        (3, P.RUNNING),
        ("9", P.ASSIGNED),
        (10, P.PREEMPTED),
        (0, P.UNSPECIFIED),
        ("JOB_STATE_SOMETHING_NEW", P.UNSPECIFIED),
        (99, P.UNSPECIFIED),
        ("", P.UNSPECIFIED),
    ],
)
def test_phase_of_reads_names_numbers_and_cli_names(state: str | int, phase: JobPhase) -> None:
    assert phase_of(state) is phase


# (phase, active, terminal): the reference's table.
PHASES = [
    (P.PENDING, False, False),
    (P.UNSPECIFIED, False, False),
    (P.MISSING, False, False),
    (P.ASSIGNED, True, False),
    (P.BUILDING, True, False),
    (P.RUNNING, True, False),
    (P.SUCCEEDED, False, True),
    (P.FAILED, False, True),
    (P.KILLED, False, True),
    (P.WORKER_FAILED, False, True),
    (P.UNSCHEDULABLE, False, True),
    (P.COSCHED_FAILED, False, True),
    # Terminal: a task preempted with budget left is PENDING again, never PREEMPTED.
    (P.PREEMPTED, False, True),
]


@pytest.mark.parametrize(("phase", "active", "terminal"), PHASES)
def test_assigned_building_and_running_are_active_and_every_ended_phase_is_terminal(
    phase: JobPhase, active: bool, terminal: bool
) -> None:
    assert (phase.is_active, phase.is_terminal) == (active, terminal)


def test_phase_table_covers_every_phase() -> None:
    assert {row[0] for row in PHASES} == set(JobPhase)
    assert {P.ASSIGNED, P.BUILDING, P.RUNNING} == ACTIVE
    assert not ACTIVE & TERMINAL


def _ref(suffix: str, state: str, submitted: int = 0) -> ChildRef:
    return ChildRef(job_id=f"{JOB}/{suffix}", state=state, submitted_at_ms=submitted)


# Two pipelines, retries with new hashes, a stale coordinator, a pending one that is not.
HISTORY = [
    _ref("zephyr-tok-aaaa0000-p0-a0-coord", "JOB_STATE_KILLED", 1000),
    _ref("zephyr-tok-aaaa0000-p0-a0-workers", "JOB_STATE_KILLED", 1001),
    _ref("zephyr-tok-bbbb1111-p0-a1-coord", "JOB_STATE_RUNNING", 2000),
    _ref("zephyr-tok-bbbb1111-p0-a1-workers", "JOB_STATE_KILLED", 2001),
    _ref("zephyr-tok-dddd3333-p0-a2-coord", "JOB_STATE_SUCCEEDED", 3000),
    _ref("zephyr-tok-dddd3333-p0-a2-workers", "JOB_STATE_SUCCEEDED", 3001),
    _ref("zephyr-tok-eeee4444-p1-a0-coord", "JOB_STATE_BUILDING", 4000),
    _ref("zephyr-tok-eeee4444-p1-a0-workers", "JOB_STATE_KILLED", 4001),
    _ref("zephyr-tok-cccc2222-p1-a1-coord", "JOB_STATE_RUNNING", 5000),
    _ref("zephyr-tok-cccc2222-p1-a1-workers", "JOB_STATE_RUNNING", 5001),
    _ref("zephyr-tok-ffff5555-p0-a3-coord", "JOB_STATE_PENDING", 6000),
    _ref("preprocess", "JOB_STATE_SUCCEEDED", 10),
]


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_pick_latest_follows_the_highest_pipeline_and_attempt(order: str) -> None:
    children = HISTORY if order == "as listed" else list(reversed(HISTORY))
    latest = pick_latest(children)
    assert latest is not None
    assert (latest.pipeline, latest.attempt, latest.group) == (1, 1, "tok-cccc2222-p1-a1")
    assert latest.coord == f"{JOB}/zephyr-tok-cccc2222-p1-a1-coord"
    assert latest.workers == f"{JOB}/zephyr-tok-cccc2222-p1-a1-workers"
    assert (latest.coord_state, latest.workers_state) == (P.RUNNING, P.RUNNING)
    # Active coordinators of older attempts, sorted; the pending, killed and succeeded are not.
    assert latest.stale_coordinators == (
        f"{JOB}/zephyr-tok-bbbb1111-p0-a1-coord",
        f"{JOB}/zephyr-tok-eeee4444-p1-a0-coord",
    )


def test_pick_latest_breaks_a_tie_by_submit_time() -> None:
    first = [_ref("zephyr-a-11111111-p0-a1-coord", "running", 100),
             _ref("zephyr-b-22222222-p0-a1-coord", "running", 200)]  # fmt: skip
    for children in (first, list(reversed(first))):
        latest = pick_latest(children)
        assert latest is not None and latest.group == "b-22222222-p0-a1"
        assert latest.stale_coordinators == (f"{JOB}/zephyr-a-11111111-p0-a1-coord",)


def test_pick_latest_of_a_coordinator_without_workers_yet_has_no_workers() -> None:
    latest = pick_latest([_ref("zephyr-t-3f2a9b1c-p0-a0-coord", "JOB_STATE_PENDING")])
    assert latest is not None
    assert latest.workers is None and latest.workers_state is None
    assert latest.coord_state is P.PENDING


def test_pick_latest_of_no_zephyr_children_is_none() -> None:
    assert pick_latest([]) is None
    assert pick_latest([_ref("preprocess", "running")]) is None


def test_pick_latest_keeps_to_the_parent_it_is_given() -> None:
    other = ChildRef(job_id="/bob/other/zephyr-x-99999999-p9-a9-coord", state="running")
    mine = _ref("zephyr-t-3f2a9b1c-p0-a0-coord", "running")
    latest = pick_latest([other, mine], parent=JOB)
    assert latest is not None and latest.parent == JOB and latest.pipeline == 0
    assert pick_latest([other, mine]).parent == "/bob/other"  # type: ignore[union-attr]


def test_a_task_id_is_its_job_and_index_and_reads_back_with_or_without_an_attempt() -> None:
    coord = f"{JOB}/zephyr-t-3f2a9b1c-p0-a0-coord"
    assert task_id(coord) == f"{coord}/0"
    assert task_id(coord + "/", 7) == f"{coord}/7"
    assert attempt_target(task_id(coord), 3) == f"{coord}/0:3"
    assert parse_task_id(f"{coord}/12") == (coord, 12)
    assert parse_task_id(f"{coord}/0:3") == (coord, 0)
    assert parse_task_id(coord) is None
    assert parse_task_id("12") is None


# iris's terminal task states (marin-iris 0.2.227.dev40316220070, TERMINAL_TASK_STATES), by
# wire name: keeper's phases and wire/iris's task table agree with it.
IRIS_TERMINAL_TASK_STATES = {
    "TASK_STATE_SUCCEEDED",
    "TASK_STATE_FAILED",
    "TASK_STATE_KILLED",
    "TASK_STATE_WORKER_FAILED",
    "TASK_STATE_UNSCHEDULABLE",
    "TASK_STATE_PREEMPTED",
    "TASK_STATE_COSCHED_FAILED",
}


@pytest.mark.parametrize("state", list(TaskState), ids=lambda s: s.name)
def test_a_task_state_is_terminal_exactly_as_in_iris(state: TaskState) -> None:
    terminal = state.wire_name in IRIS_TERMINAL_TASK_STATES
    assert phase_of(state.wire_name).is_terminal is terminal
    assert (state in TASK_TERMINAL) is terminal


def test_no_job_state_is_preempted_and_the_job_table_is_irises() -> None:
    assert "PREEMPTED" not in JobState.__members__
    assert {s.name for s in JOB_TERMINAL} == {
        "SUCCEEDED", "FAILED", "KILLED", "WORKER_FAILED", "UNSCHEDULABLE",
    }  # fmt: skip
    assert {phase_of(s.wire_name) for s in JOB_TERMINAL} <= TERMINAL
