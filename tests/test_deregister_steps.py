"""The deregistration step as a table: given the state so far and what happened, the move."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from keeper.domain.runners.deregister_steps import (
    Act,
    Deregistration,
    auth_attention,
    on_answer,
    on_force,
    on_gave_up,
)
from keeper.domain.runners.deregistration import DeregisterMode
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome
from keeper.domain.runners.models import BusyTimeoutAction, DeletionPolicy, DeletionStep

M = DeregisterMode
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


def move(state: Deregistration, outcome: DeregistrationOutcome, policy: DeletionPolicy = POLICY):
    return on_answer(
        state, answer(outcome), attempts=2, policy=policy, now=NOW, runner="r-1",
        token_source="runners.github.token_file (/run/secrets/gh)",
    )  # fmt: skip


WAIT = Deregistration(mode=M.WAIT)
BUSY = Deregistration(mode=M.BUSY, busy_since=NOW - timedelta(minutes=30), waiting_shown=True)
RECHECK = Deregistration(mode=M.RECHECK, escalated=True, decision="escalated", error="do x")
FORCE = Deregistration(mode=M.FORCE, force=True)
DELETING = Deregistration(mode=M.FORCE)  # the record was already deleting, no force

# (state, answer, policy) -> (act, next mode, step shown, RunnerStep follows, audit starts with)
TABLE = [
    (WAIT, Out.REMOVED, POLICY, Act.DONE, M.WAIT, DeletionStep.DEREGISTER, False,
     "registration removed (204"),
    (WAIT, Out.ALREADY_GONE, POLICY, Act.DONE, M.WAIT, DeletionStep.DEREGISTER, False,
     "registration already gone (404"),
    (WAIT, Out.BUSY, POLICY, Act.ASK, M.BUSY, DeletionStep.BUSY_WAIT, False, None),
    (WAIT, Out.CLIENT_ERROR, POLICY, Act.ASK, M.RECHECK, DeletionStep.ESCALATED, False, None),
    (WAIT, Out.AUTH, POLICY, Act.ASK, M.WAIT, None, False, None),
    (BUSY, Out.BUSY, POLICY, Act.ASK, M.RECHECK, DeletionStep.ESCALATED, False, None),
    (BUSY, Out.BUSY, PROCEED, Act.LEAVE, M.BUSY, None, False,
     "registration left: GitHub answered 422 (runner busy) after 30m"),
    (BUSY, Out.REMOVED, POLICY, Act.DONE, M.BUSY, DeletionStep.DEREGISTER, True,
     "registration removed"),
    (BUSY, Out.AUTH, POLICY, Act.ASK, M.BUSY, None, False, None),
    (RECHECK, Out.REMOVED, POLICY, Act.DONE, M.RECHECK, DeletionStep.DEREGISTER, False,
     "registration removed"),
    (RECHECK, Out.AUTH, POLICY, Act.ASK, M.RECHECK, None, False, None),
    (FORCE, Out.BUSY, POLICY, Act.LEAVE, M.FORCE, None, False,
     "registration left: GitHub answered 422 (runner busy); forced past it"),
    (FORCE, Out.CLIENT_ERROR, POLICY, Act.LEAVE, M.FORCE, None, False,
     "registration left: GitHub answered 409: conflict; forced past it"),
    (FORCE, Out.REMOVED, POLICY, Act.DONE, M.FORCE, DeletionStep.DEREGISTER, False,
     "registration removed"),
    (DELETING, Out.BUSY, POLICY, Act.LEAVE, M.FORCE, None, False,
     "registration left: GitHub answered 422 (runner busy); the record was already deleting"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("state", "outcome", "policy", "act", "mode", "step", "searchable", "audit"), TABLE
)
def test_each_answer_has_its_move(state, outcome, policy, act, mode, step, searchable, audit):
    got = move(state, outcome, policy)
    assert (got.act, got.state.mode, got.step, got.searchable) == (act, mode, step, searchable)
    assert got.state.github == CODES[outcome][1]
    assert got.state.github_attempts == state.github_attempts + 2
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
    assert WAIT.report_auth() and not got.state.report_auth()
    after = move(got.state, Out.BUSY)
    assert after.state.attention is None and after.state.report_auth()


def test_a_forced_or_cleanup_call_never_reports_a_token_itself():
    assert not FORCE.report_auth() and not Deregistration(mode=M.CLEANUP).report_auth()


def test_without_a_source_the_attention_names_both_settings():
    text = auth_attention(answer(Out.AUTH), None)
    assert "KEEPER_GITHUB_TOKEN" in text and "runners.github.token_file" in text


def test_a_force_that_lands_before_a_call_asks_with_a_force():
    assert replace(BUSY, force=True).asking().mode is M.FORCE
    assert replace(Deregistration(mode=M.CLEANUP), force=True).asking().mode is M.CLEANUP
    assert BUSY.asking() is BUSY


def test_a_force_mid_call_answers_an_escalation_and_moves_runner_step_off_it():
    got = on_force(RECHECK)
    assert (got.act, got.state.mode, got.step, got.searchable) == (
        Act.ASK, M.FORCE, DeletionStep.DEREGISTER, True,
    )  # fmt: skip
    assert got.state.error is None
    assert got.state.decision == "escalated; answered: force requested"
    quiet = on_force(WAIT)
    assert (quiet.state.mode, quiet.step, quiet.state.decision) == (M.FORCE, None, None)


def test_a_forced_call_that_gives_up_leaves_the_registration_and_says_so():
    got = on_gave_up(FORCE, "503: unavailable")
    assert got is not None and got.act is Act.LEAVE
    assert got.audit == "registration left: GitHub kept failing (503: unavailable); forced past it"
    assert "registration left for after the compute" in (got.state.decision or "")
    assert on_gave_up(WAIT, "503") is None
