"""A runner deletion's state (domain/runners/deletion_state.py) and what is rendered from it
(deletion_view.py), as tables: each change is a pure function, each shown text one too."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from keeper.domain.runners import deletion_state as ds
from keeper.domain.runners.calls import FinishResult
from keeper.domain.runners.deletion_state import DeletionState, RunnerDeletionInput
from keeper.domain.runners.deletion_view import (
    escalation_alert,
    render_details,
    result_of,
    view_of,
)
from keeper.domain.runners.deregistration import DeregisterMode
from keeper.domain.runners.models import (
    DeletionOutcome,
    DeletionRequest,
    DeletionStep,
    Requester,
    RunnerRecord,
)
from keeper.domain.runners.status import InstanceStatus

S = InstanceStatus
Step = DeletionStep
FRESH = ds.new_state("r-1")
AT = datetime(2026, 12, 1, tzinfo=UTC)


def record(status: InstanceStatus, **fields: object) -> RunnerRecord:
    return RunnerRecord(
        name="r-1", scale_set="set-a", instance_status=status, created_at=AT, **fields
    )


def ask(
    by: Requester = Requester.OPERATOR, force: bool = False, reason: str = ""
) -> DeletionRequest:
    return DeletionRequest(requested_by=by, force=force, reason=reason)


# ---- who asks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "label"),
    [
        (ask(), "operator"),
        (ask(force=True), "operator (force)"),
        (ask(Requester.AGENT, reason="terminated"), "agent: terminated"),
        (ask(Requester.RECONCILER, True, "x"), "reconciler (force): x"),
    ],
)  # fmt: skip
def test_a_request_is_labelled_by_who_asked_whether_it_forces_and_why(request_, label):
    assert ds.request_label(request_) == label
    after = ds.requested(FRESH, request_)
    assert after.requests == (label,) and after.force is request_.force


def test_a_force_stays_once_asked_for():
    forced = ds.requested(FRESH, ask(force=True))
    assert ds.requested(forced, ask()).force


def test_requests_kept_are_bounded_and_the_rest_counted():
    state = FRESH
    for i in range(ds.KEPT_REQUESTS + 5):
        state = ds.requested(state, ask(reason=f"r{i}"))
    assert len(state.requests) == ds.KEPT_REQUESTS and state.earlier_requests == 5
    assert state.requests[-1] == f"operator: r{ds.KEPT_REQUESTS + 4}"
    assert "(+17 earlier)" in render_details(view_of(state))  # 8 listed, 12 + 5 earlier


# (state, request) -> refused (with the words it says), or accepted
REFUSALS = [
    (FRESH, ask(), None),
    (FRESH, ask(force=True), None),
    (FRESH.model_copy(update={"step": Step.ESCALATED}), ask(force=True), None),
    (FRESH.model_copy(update={"tombstoned": True}), ask(), "a request changes nothing"),
    (FRESH.model_copy(update={"tombstoned": True}), ask(force=True), "a force changes nothing"),
    (FRESH.model_copy(update={"step": Step.DONE}), ask(), "has finished"),
    (
        FRESH.model_copy(update={"tombstoned": True, "background": "removing registration 7"}),
        ask(),
        "still running behind it: removing registration 7",
    ),
]


@pytest.mark.parametrize(("state", "request_", "refused"), REFUSALS)
def test_a_request_is_refused_only_once_the_deletion_has_finished(state, request_, refused):
    problem = ds.refusal(state, request_)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem and "r-1" in problem
        assert "new runner has taken the name" in problem


@pytest.mark.parametrize(
    ("state", "joined"),
    [
        (FRESH, False),
        (ds.requested(FRESH, ask()), True),
        (FRESH.model_copy(update={"run": 2}), True),
        (FRESH.model_copy(update={"step": Step.ESCALATED}), True),  # started by hand, no request
    ],
)
def test_a_request_joins_a_deletion_already_asked_for(state, joined):
    assert ds.under_way(state) is joined


# ---- where it is ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "searchable", "shown"),
    [
        (Step.DEREGISTER, False, None),
        (Step.DEREGISTER, True, Step.DEREGISTER),
        (Step.BUSY_WAIT, False, Step.BUSY_WAIT),
        (Step.ESCALATED, False, Step.ESCALATED),
        (Step.DONE, False, Step.DONE),
        (Step.PROVIDER_DELETE, False, None),
    ],
)
def test_keeper_step_follows_only_the_steps_operators_search_for(step, searchable, shown):
    moved = ds.moved(FRESH, step, S.DELETING, searchable=searchable)
    assert (moved.step, moved.shown_step, moved.status) == (step, shown, "deleting")


@pytest.mark.parametrize(
    ("status", "step", "force"),
    [
        (S.PENDING_DELETE, Step.PENDING_DELETE, False),
        (S.PENDING_FORCE_DELETE, Step.PENDING_DELETE, True),  # forced before: stays forced
        (S.DELETING, Step.PENDING_DELETE, False),
        (S.DELETED, Step.DONE, False),
    ],
)
def test_entering_the_lane_shows_the_first_step_once(status, step, force):
    entered = ds.entered(FRESH, record(status))
    assert (entered.step, entered.shown_step, entered.force) == (step, step, force)
    assert entered.scale_set == "set-a" and entered.scale_set_searchable
    # A later run (or a second entry) leaves KeeperStep where it is.
    later = FRESH.model_copy(update={"step": Step.ESCALATED, "shown_step": Step.ESCALATED})
    assert ds.entered(later, record(status)).shown_step is Step.ESCALATED


def test_a_scale_set_that_fails_the_record_check_is_shown_but_never_searchable():
    bad = record(S.PENDING_DELETE, problems=("scale_set: 's'*3000 is not a scale-set name",))
    assert not ds.entered(FRESH, bad).scale_set_searchable


@pytest.mark.parametrize(
    ("state", "status", "mode", "step"),
    [
        (FRESH, S.PENDING_DELETE, DeregisterMode.WAIT, Step.DEREGISTER),
        (FRESH.model_copy(update={"force": True}), S.PENDING_DELETE, DeregisterMode.FORCE,
         Step.DEREGISTER),
        (FRESH, S.DELETING, DeregisterMode.FORCE, Step.DEREGISTER),
        # A rolled-over run resumes in the mode, and the step, it was in.
        (FRESH.model_copy(update={"mode": DeregisterMode.RECHECK, "step": Step.ESCALATED}),
         S.PENDING_DELETE, DeregisterMode.RECHECK, Step.ESCALATED),
        (FRESH.model_copy(update={"mode": DeregisterMode.BUSY, "step": Step.BUSY_WAIT}),
         S.PENDING_DELETE, DeregisterMode.BUSY, Step.BUSY_WAIT),
    ],
)  # fmt: skip
def test_the_registration_step_begins_or_resumes_in_its_mode(state, status, mode, step):
    begun = ds.registration_begins(state, record(status))
    assert (begun.mode, begun.step) == (mode, step)


# ---- escalation alerts ----------------------------------------------------------------------

ESCALATED = ds.moved(
    FRESH.model_copy(update={"decision": "runner still busy after 0:30:00; escalated"}),
    Step.ESCALATED,
)
SHOWN_ESCALATED = FRESH.model_copy(update={"shown_step": Step.ESCALATED})


@pytest.mark.parametrize(
    ("before", "after", "alerts"),
    [
        (FRESH, ESCALATED, True),  # turned to an operator
        (SHOWN_ESCALATED, ESCALATED, False),  # a later run resuming the escalation
        (FRESH, ds.alerted(ESCALATED, "run-1/" + (ESCALATED.decision or "")), False),  # told
        (FRESH, ds.moved(FRESH, Step.BUSY_WAIT), False),
    ],
)
def test_an_escalation_alerts_once_per_episode(before, after, alerts):
    key = ds.escalation_alert_key(before, after, "run-1")
    assert (key is not None) is alerts
    if key is not None:
        assert key == f"run-1/{after.decision}"
        alert = escalation_alert(after, "runner-delete-r-1", key)
        assert alert.summary.startswith("r-1: runner still busy")


def test_alerts_remembered_are_bounded():
    state = FRESH
    for i in range(ds.KEPT_ALERTS + 3):
        state = ds.alerted(state, f"k{i}")
    assert len(state.alerted) == ds.KEPT_ALERTS and state.alerted[-1] == f"k{ds.KEPT_ALERTS + 2}"


# ---- the end, and what is shown --------------------------------------------------------------


def test_a_tombstone_shows_the_runner_deleted_while_the_cleanup_runs_behind_it():
    on_lane = ds.moved(FRESH, Step.DELETED, S.DELETING)
    done = ds.tombstoned(on_lane, FinishResult(record=record(S.DELETED)))
    cleaning = ds.cleanup_started(done, 7, attempts=10)
    view = view_of(cleaning)
    assert (view.step, view.status, view.tombstoned) == (Step.DONE, "deleted", True)
    assert "registration 7" in (view.background or "") and view.waiting
    ended = ds.cleanup_ended(cleaning, answer="204: runner removed", attempts=2)
    assert ended.background is None and ended.waiting is None and ended.github_attempts == 2
    left = ds.cleanup_ended(cleaning, answer=None, cause="503")
    assert "registration still present (503)" in (left.decision or "")


def test_a_recovered_tombstone_says_how():
    finish = FinishResult(record=record(S.DELETED), recovered=True, found_status=S.PENDING_DELETE)
    done = ds.tombstoned(FRESH, finish)
    assert done.recovered and "audited recovery path" in (done.decision or "")


def test_a_refused_token_is_shown_as_what_needs_attention():
    state = FRESH.model_copy(update={"error": "older", "attention": "fix the token"})
    assert view_of(state).error == "fix the token"


def test_the_result_carries_what_the_state_knows():
    state = ds.leak_recorded(ds.requested(FRESH, ask(force=True)), "i-1", ds.leak_reason(FRESH, 2))
    result = result_of(state, DeletionOutcome.DELETED)
    assert result.forced and result.leaked_provider_id == "i-1"
    assert result.requests == ("operator (force)",)
    assert "gave up after 2 attempts" in (result.busy_decision or "")


def test_the_state_is_carried_whole_into_the_next_run():
    state = ds.requested(
        ds.moved(FRESH.model_copy(update={"mode": DeregisterMode.RECHECK}), Step.ESCALATED),
        ask(reason="why"),
    )
    carried = ds.continued(state)
    assert carried.run == 2 and carried.model_copy(update={"run": 1}) == state
    inp = RunnerDeletionInput(runner="r-1", request=None, carry=carried)
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([inp])
    again = pydantic_data_converter.payload_converter.from_payloads(
        [payload], [RunnerDeletionInput]
    )[0]
    assert again == inp and json.loads(payload.data)["carry"]["mode"] == "recheck"


def test_the_state_is_immutable():
    with pytest.raises(Exception, match="frozen"):
        FRESH.step = Step.DONE  # type: ignore[misc]
    assert isinstance(FRESH, DeletionState)
