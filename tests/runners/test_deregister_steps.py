"""The registration step as a table: given the deletion's state and what happened, the move."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keeper.domain.runners.deletion_state import GITHUB_WAIT, DeletionState
from keeper.domain.runners.deregister_steps import (
    Act,
    asking,
    auth_attention,
    on_answer,
    on_force,
    on_gave_up,
    report_auth,
)
from keeper.domain.runners.deregistration import DeregisterMode
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome
from keeper.domain.runners.models import BusyTimeoutAction, DeletionPolicy, DeletionStep

M = DeregisterMode
Step = DeletionStep
Out = DeregistrationOutcome
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = DeletionPolicy(busy_wait=timedelta(minutes=30))
PROCEED = POLICY.model_copy(update={"on_busy_timeout": BusyTimeoutAction.PROCEED})
CODES = {
    Out.REMOVED: (204, "204: runner removed"),
    Out.ALREADY_GONE: (404, "404: runner already gone"),
    Out.BUSY: (422, "422: Runner is still running a job"),
    Out.AUTH: (401, "401: Bad credentials"),
    Out.CLIENT_ERROR: (409, "409: conflict"),
}


def answer(outcome: DeregistrationOutcome) -> DeregistrationAnswer:
    code, message = CODES[outcome]
    return DeregistrationAnswer(outcome=outcome, status_code=code, message=message)


def move(state: DeletionState, outcome: DeregistrationOutcome, policy: DeletionPolicy = POLICY):
    return on_answer(
        state, answer(outcome), attempts=2, policy=policy, now=NOW,
        token_source="runners.github.token_file (/run/secrets/gh)",
    )  # fmt: skip


def state(mode: DeregisterMode, **fields: object) -> DeletionState:
    """In the registration step, KeeperStep showing pending_delete unless told otherwise."""
    base = {"step": Step.DEREGISTER, "shown_step": Step.PENDING_DELETE}
    return DeletionState.model_validate({"runner": "r-1", "mode": mode, **base, **fields})


WAIT = state(M.WAIT)
BUSY = state(
    M.BUSY, busy_since=NOW - timedelta(minutes=30), step=Step.BUSY_WAIT, shown_step=Step.BUSY_WAIT
)
RECHECK = state(
    M.RECHECK,
    escalated=True,
    decision="escalated",
    error="do x",
    step=Step.ESCALATED,
    shown_step=Step.ESCALATED,
)
FORCE = state(M.FORCE, force=True)
DELETING = state(M.FORCE)  # the record was already deleting, no force

# (state, answer, policy) -> (act, next mode, step, KeeperStep, audit starts with)
TABLE = [
    (WAIT, Out.REMOVED, POLICY, Act.DONE, M.WAIT, Step.DEREGISTER, Step.PENDING_DELETE,
     "registration removed (204"),
    (WAIT, Out.ALREADY_GONE, POLICY, Act.DONE, M.WAIT, Step.DEREGISTER, Step.PENDING_DELETE,
     "registration already gone (404"),
    (WAIT, Out.BUSY, POLICY, Act.ASK, M.BUSY, Step.BUSY_WAIT, Step.BUSY_WAIT, None),
    (WAIT, Out.CLIENT_ERROR, POLICY, Act.ASK, M.RECHECK, Step.ESCALATED, Step.ESCALATED, None),
    (WAIT, Out.AUTH, POLICY, Act.ASK, M.WAIT, Step.DEREGISTER, Step.PENDING_DELETE, None),
    (BUSY, Out.BUSY, POLICY, Act.ASK, M.RECHECK, Step.ESCALATED, Step.ESCALATED, None),
    (BUSY, Out.BUSY, PROCEED, Act.LEAVE, M.BUSY, Step.BUSY_WAIT, Step.BUSY_WAIT,
     "registration left: GitHub answered 422 (runner busy) after 30m"),
    # Off busy_wait: KeeperStep follows to deregister.
    (BUSY, Out.REMOVED, POLICY, Act.DONE, M.BUSY, Step.DEREGISTER, Step.DEREGISTER,
     "registration removed"),
    (BUSY, Out.AUTH, POLICY, Act.ASK, M.BUSY, Step.BUSY_WAIT, Step.BUSY_WAIT, None),
    (RECHECK, Out.REMOVED, POLICY, Act.DONE, M.RECHECK, Step.DEREGISTER, Step.DEREGISTER,
     "registration removed"),
    (RECHECK, Out.AUTH, POLICY, Act.ASK, M.RECHECK, Step.ESCALATED, Step.ESCALATED, None),
    (FORCE, Out.BUSY, POLICY, Act.LEAVE, M.FORCE, Step.DEREGISTER, Step.PENDING_DELETE,
     "registration left: GitHub answered 422 (runner busy); forced past it"),
    (FORCE, Out.CLIENT_ERROR, POLICY, Act.LEAVE, M.FORCE, Step.DEREGISTER, Step.PENDING_DELETE,
     "registration left: GitHub answered 409: conflict; forced past it"),
    (FORCE, Out.REMOVED, POLICY, Act.DONE, M.FORCE, Step.DEREGISTER, Step.PENDING_DELETE,
     "registration removed"),
    (DELETING, Out.BUSY, POLICY, Act.LEAVE, M.FORCE, Step.DEREGISTER, Step.PENDING_DELETE,
     "registration left: GitHub answered 422 (runner busy); the record was already deleting"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "outcome", "policy", "act", "mode", "step", "shown", "audit"), TABLE
)
def test_each_answer_has_its_move(before, outcome, policy, act, mode, step, shown, audit):
    got = move(before, outcome, policy)
    assert (got.act, got.state.mode, got.state.step, got.state.shown_step) == (
        act, mode, step, shown,
    )  # fmt: skip
    assert got.state.github == CODES[outcome][1]
    assert got.state.github_attempts == before.github_attempts + 2
    assert got.state.waiting is None  # answered: nothing is being retried for it now
    if audit is None:
        assert got.audit is None
    else:
        assert got.audit is not None and got.audit.startswith(audit), got.audit


def test_a_busy_answer_starts_the_busy_clock():
    got = move(WAIT, Out.BUSY)
    assert got.state.busy_since == NOW


def test_an_answer_while_escalated_resolves_it_and_clears_what_to_do():
    got = move(RECHECK, Out.REMOVED)
    assert not got.state.escalated and got.state.error is None
    assert got.state.decision == "resolved while escalated: GitHub answered 204: runner removed"
    assert got.state.busy_since is None


def test_an_escalation_says_what_to_run():
    got = move(BUSY, Out.BUSY)
    assert got.state.escalated
    assert got.state.decision == "runner still busy after 0:30:00; escalated to an operator"
    assert "keeper runner delete r-1 --force" in (got.state.error or "")


def test_a_refused_token_needs_attention_names_its_source_and_clears_on_the_next_answer():
    got = move(WAIT, Out.AUTH)
    attention = got.state.attention or ""
    assert "cannot progress by itself" in attention and "/run/secrets/gh" in attention
    assert "401: Bad credentials" in attention
    # Reported once: the next call retries a refused token instead of answering again.
    assert report_auth(WAIT) and not report_auth(got.state)
    after = move(got.state, Out.BUSY)
    assert after.state.attention is None and report_auth(after.state)


def test_a_forced_or_cleanup_call_never_reports_a_token_itself():
    assert not report_auth(FORCE) and not report_auth(state(M.CLEANUP))


def test_without_a_source_the_attention_names_both_settings():
    text = auth_attention(answer(Out.AUTH), None)
    assert "KEEPER_GITHUB_TOKEN" in text and "runners.github.token_file" in text


def test_a_call_shows_what_it_waits_on_and_a_force_that_landed_asks_with_a_force():
    assert asking(BUSY.model_copy(update={"force": True})).mode is M.FORCE
    assert asking(state(M.CLEANUP, force=True)).mode is M.CLEANUP
    assert asking(BUSY).mode is M.BUSY and asking(BUSY).waiting == GITHUB_WAIT


def test_a_force_mid_call_answers_an_escalation_and_moves_keeper_step_off_it():
    got = on_force(RECHECK)
    assert (got.act, got.state.mode, got.state.step, got.state.shown_step) == (
        Act.ASK, M.FORCE, Step.DEREGISTER, Step.DEREGISTER,
    )  # fmt: skip
    assert got.state.force and got.state.error is None
    assert got.state.decision == "escalated; answered: force requested"
    quiet = on_force(WAIT)
    assert (quiet.state.mode, quiet.state.shown_step, quiet.state.decision) == (
        M.FORCE, Step.PENDING_DELETE, None,
    )  # fmt: skip


def test_a_forced_call_that_gives_up_leaves_the_registration_and_says_so():
    got = on_gave_up(FORCE, "503: unavailable")
    assert got is not None and got.act is Act.LEAVE
    assert got.audit == "registration left: GitHub kept failing (503: unavailable); forced past it"
    assert "registration left for after the compute" in (got.state.decision or "")
    assert on_gave_up(WAIT, "503") is None
