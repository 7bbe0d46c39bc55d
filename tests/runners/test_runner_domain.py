"""Table tests for the runner status vocabulary, the lane decisions and scale-set capacity."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from keeper.domain.runners.deletion_state import RunnerDeletionInput
from keeper.domain.runners.lane import LaneMove, decide, entry_target
from keeper.domain.runners.models import DeletionPolicy, RunnerRecord
from keeper.domain.runners.scale_set import ScalePolicy, live_runner_count, plan_scaling
from keeper.domain.runners.status import (
    DELETION_LANE,
    LIVE,
    TRANSITIONS,
    InstanceStatus,
    InvalidTransition,
    can_transition,
    check_transition,
    lane_rank,
)

S = InstanceStatus

# The whole table, written out so a change to it is a visible change to this test.
EXPECTED = {
    S.PENDING_CREATE: {S.CREATING, S.PENDING_DELETE, S.PENDING_FORCE_DELETE},
    S.CREATING: {S.RUNNING, S.ERROR, S.PENDING_DELETE, S.PENDING_FORCE_DELETE},
    S.RUNNING: {S.STOPPED, S.UNKNOWN, S.PENDING_DELETE, S.PENDING_FORCE_DELETE},
    S.STOPPED: {S.RUNNING, S.UNKNOWN, S.PENDING_DELETE, S.PENDING_FORCE_DELETE},
    S.ERROR: {S.UNKNOWN, S.PENDING_DELETE, S.PENDING_FORCE_DELETE, S.DELETING},
    S.UNKNOWN: {S.RUNNING, S.STOPPED, S.ERROR, S.PENDING_DELETE, S.PENDING_FORCE_DELETE},
    S.PENDING_DELETE: {S.PENDING_FORCE_DELETE, S.DELETING},
    S.PENDING_FORCE_DELETE: {S.DELETING},
    S.DELETING: {S.DELETED},
    S.DELETED: set(),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_only_the_transitions_of_the_table_are_allowed_and_any_other_is_refused_by_name(
    current: S, target: S
) -> None:
    allowed = target in EXPECTED[current]
    assert can_transition(current, target) is allowed
    if allowed:
        check_transition(current, target)
    else:
        with pytest.raises(InvalidTransition, match=f"{current} -> {target}"):
            check_transition(current, target)


def test_table_covers_every_status() -> None:
    assert set(TRANSITIONS) == set(S)


@pytest.mark.parametrize("status", DELETION_LANE)
def test_lane_is_forward_only(status: S) -> None:
    for target in TRANSITIONS[status]:
        assert target in DELETION_LANE, f"{status} may leave the lane to {target}"
        assert lane_rank(target) >= lane_rank(status)


def test_live_and_lane_are_disjoint() -> None:
    assert not LIVE & set(DELETION_LANE)
    assert S.UNKNOWN not in LIVE


@pytest.mark.parametrize(
    ("current", "target", "move"),
    [
        (S.RUNNING, S.PENDING_DELETE, LaneMove.WRITE),
        (S.CREATING, S.PENDING_DELETE, LaneMove.WRITE),
        (S.ERROR, S.PENDING_FORCE_DELETE, LaneMove.WRITE),
        (S.PENDING_DELETE, S.PENDING_DELETE, LaneMove.ALREADY),
        (S.PENDING_FORCE_DELETE, S.PENDING_DELETE, LaneMove.ALREADY),
        (S.PENDING_DELETE, S.PENDING_FORCE_DELETE, LaneMove.WRITE),
        (S.DELETING, S.PENDING_DELETE, LaneMove.ALREADY),
        (S.DELETING, S.PENDING_FORCE_DELETE, LaneMove.ALREADY),
        (S.DELETED, S.PENDING_DELETE, LaneMove.ALREADY),
        (S.PENDING_DELETE, S.DELETING, LaneMove.WRITE),
        (S.PENDING_FORCE_DELETE, S.DELETING, LaneMove.WRITE),
        (S.DELETING, S.DELETING, LaneMove.ALREADY),
        (S.DELETED, S.DELETING, LaneMove.ALREADY),
        (S.DELETING, S.DELETED, LaneMove.WRITE),
        (S.DELETED, S.DELETED, LaneMove.ALREADY),
        (S.RUNNING, S.DELETING, LaneMove.BLOCKED),
        (S.PENDING_DELETE, S.DELETED, LaneMove.BLOCKED),
        (S.RUNNING, S.DELETED, LaneMove.BLOCKED),
    ],
)
def test_a_record_at_or_past_a_lane_target_needs_no_write_and_one_that_skips_a_step_is_blocked(
    current: S, target: S, move: LaneMove
) -> None:
    assert decide(current, target) is move


def test_a_deletion_enters_the_lane_at_pending_delete_or_when_forced_at_pending_force_delete() -> (
    None
):
    assert entry_target(False) is S.PENDING_DELETE
    assert entry_target(True) is S.PENDING_FORCE_DELETE


def rec(name: str, status: S) -> RunnerRecord:
    return RunnerRecord(name=name, scale_set="quiet", instance_status=status)


def test_the_live_count_leaves_out_the_deletion_lane_and_unknown_runners() -> None:
    records = [rec(f"r{i}", s) for i, s in enumerate(S)]
    assert live_runner_count(records) == 5


def legacy_count(records) -> int:
    """#854's runnerCount(): every record, the deletion lane included."""
    return len(records)


def test_wedge_old_counting_blocks_scale_up_new_does_not() -> None:
    stuck = [rec("phantom-1", S.PENDING_DELETE), rec("phantom-2", S.PENDING_DELETE)]
    policy = ScalePolicy(min_idle_runners=0, max_runners=10)
    old = plan_scaling(stuck, policy, queued_jobs=1, count=legacy_count)
    assert old.create == 0 and old.remove == ()  # counted 2 > desired 1: jobs wait forever
    new = plan_scaling(stuck, policy, queued_jobs=1)
    assert new.counted == 0 and new.create == 1


def test_scale_down_never_spends_its_delta_on_the_lane() -> None:
    records = [
        rec("lane-1", S.DELETING),
        rec("lane-2", S.PENDING_DELETE),
        rec("idle-1", S.RUNNING),
        rec("idle-2", S.RUNNING),
        rec("idle-3", S.RUNNING),
    ]
    plan = plan_scaling(records, ScalePolicy(min_idle_runners=1), queued_jobs=0)
    assert plan.counted == 3 and len(plan.remove) == 2
    assert not {"lane-1", "lane-2"} & set(plan.remove)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"runner": ""}, "runner"),
        ({"runner": "bad name"}, "runner"),
        ({"runner": "x" * 65}, "runner"),
        ({"runner": "ok", "request": {"requested_by": "robot"}}, "request.requested_by"),
        # The policy is the worker's (runners.deletion), never a run's input.
        ({"runner": "ok", "policy": {"busy_wait": "30s"}}, "policy"),
        ({"runner": "ok", "carry": {"runner": "ok", "step": "nowhere"}}, "carry.step"),
        ({"runner": "ok", "surprise": 1}, "surprise"),
    ],
)
def test_bad_deletion_input_names_the_field(payload: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        RunnerDeletionInput.model_validate(payload)
    locs = {".".join(str(p) for p in err["loc"]) for err in info.value.errors()}
    assert field in locs


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"busy_wait": "-1s"}, "busy_wait"),
        ({"on_busy_timeout": "explode"}, "on_busy_timeout"),
        ({"force_provider_attempts": 0}, "force_provider_attempts"),
    ],
)
def test_a_bad_deletion_policy_names_the_setting(payload: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        DeletionPolicy.model_validate(payload)
    locs = {".".join(str(p) for p in err["loc"]) for err in info.value.errors()}
    assert field in locs
