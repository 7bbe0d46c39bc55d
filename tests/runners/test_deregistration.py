"""The deregistration tables: what is retried inside the activity, what the workflow decides."""

from __future__ import annotations

from datetime import timedelta

import pytest

from keeper.domain.runners.deregistration import (
    Answered,
    DeregisterMode,
    Next,
    Why,
    kind_of,
    next_step,
    retry_of,
)
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome
from keeper.domain.runners.models import BusyTimeoutAction, DeletionPolicy

Out = DeregistrationOutcome
M = DeregisterMode
POLICY = DeletionPolicy(
    busy_poll=timedelta(seconds=30),
    escalation_recheck=timedelta(minutes=5),
    retry_initial=timedelta(seconds=5),
    retry_max=timedelta(minutes=5),
)
PROCEED = POLICY.model_copy(update={"on_busy_timeout": BusyTimeoutAction.PROCEED})


def answer(
    outcome: DeregistrationOutcome, retry_after_s: float | None = None
) -> DeregistrationAnswer:
    codes = {
        Out.REMOVED: 204,
        Out.ALREADY_GONE: 404,
        Out.BUSY: 422,
        Out.AUTH: 401,
        Out.RATE_LIMITED: 429,
    }
    return DeregistrationAnswer(
        outcome=outcome,
        status_code=codes.get(outcome, 500),
        message=f"{codes.get(outcome, 500)}: {outcome.value}",
        retry_after_s=retry_after_s,
    )


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        (Out.REMOVED, Answered.GONE),
        (Out.ALREADY_GONE, Answered.GONE),
        (Out.BUSY, Answered.BUSY),
        (Out.CLIENT_ERROR, Answered.REFUSED),
        (Out.AUTH, Answered.TRANSIENT),
        (Out.RATE_LIMITED, Answered.TRANSIENT),
        (Out.SERVER_ERROR, Answered.TRANSIENT),
        (Out.TRANSPORT, Answered.TRANSIENT),
    ],
)
def test_every_outcome_has_a_kind(outcome, kind):
    assert kind_of(answer(outcome)) is kind


# (mode, outcome) -> None (answer the workflow) or the delay before asking again.
RETRIES = [
    (M.WAIT, Out.REMOVED, None),
    (M.WAIT, Out.BUSY, None),  # the first busy answer goes back, so KeeperStep shows busy_wait
    (M.WAIT, Out.CLIENT_ERROR, None),
    (M.WAIT, Out.SERVER_ERROR, timedelta(seconds=5)),
    (M.BUSY, Out.BUSY, timedelta(seconds=30)),
    (M.BUSY, Out.ALREADY_GONE, None),
    (M.BUSY, Out.CLIENT_ERROR, None),
    (M.RECHECK, Out.BUSY, timedelta(minutes=5)),
    (M.RECHECK, Out.CLIENT_ERROR, timedelta(minutes=5)),
    (M.RECHECK, Out.TRANSPORT, timedelta(seconds=5)),
    (M.RECHECK, Out.REMOVED, None),
    (M.FORCE, Out.BUSY, None),
    (M.FORCE, Out.CLIENT_ERROR, None),
    (M.FORCE, Out.AUTH, timedelta(seconds=5)),
    (M.CLEANUP, Out.BUSY, timedelta(seconds=5)),
    (M.CLEANUP, Out.CLIENT_ERROR, timedelta(seconds=5)),
    (M.CLEANUP, Out.ALREADY_GONE, None),
]


@pytest.mark.parametrize(("mode", "outcome", "delay"), RETRIES)
def test_each_mode_asks_github_again_at_its_own_pace_and_returns_the_answers_it_acts_on(
    mode, outcome, delay
):
    retry = retry_of(answer(outcome), mode, POLICY, attempt=1, busy_left=timedelta(minutes=10))
    assert (retry.delay if retry else None) == delay


def test_a_busy_wait_ends_at_its_bound_and_never_sleeps_past_it():
    busy = answer(Out.BUSY)
    near = retry_of(busy, M.BUSY, POLICY, attempt=9, busy_left=timedelta(seconds=12))
    assert near is not None and near.delay == timedelta(seconds=12) and near.benign
    assert retry_of(busy, M.BUSY, POLICY, attempt=10, busy_left=timedelta(0)) is None


def test_backoff_doubles_to_its_ceiling_and_honours_retry_after():
    failing = answer(Out.SERVER_ERROR)
    delays = [
        retry_of(failing, M.WAIT, POLICY, attempt=n, busy_left=None).delay  # type: ignore[union-attr]
        for n in (1, 2, 3, 10)
    ]
    assert delays == [
        timedelta(seconds=5),
        timedelta(seconds=10),
        timedelta(seconds=20),
        timedelta(minutes=5),
    ]
    limited = retry_of(answer(Out.RATE_LIMITED, 120.0), M.WAIT, POLICY, attempt=1, busy_left=None)
    assert limited is not None and limited.delay == timedelta(seconds=120) and not limited.benign


def test_a_refused_token_says_where_the_token_comes_from():
    retry = retry_of(answer(Out.AUTH), M.WAIT, POLICY, attempt=1, busy_left=None)
    assert retry is not None
    assert "needs attention" in retry.reason and "runners.github.token_file" in retry.reason


# (mode, outcome, policy) -> what the workflow does with a returned answer.
DECISIONS = [
    (M.WAIT, Out.REMOVED, POLICY, Next.DONE),
    (M.WAIT, Out.BUSY, POLICY, Next.WAIT_BUSY),
    (M.WAIT, Out.CLIENT_ERROR, POLICY, Next.ESCALATE),
    (M.BUSY, Out.BUSY, POLICY, Next.ESCALATE),
    (M.BUSY, Out.BUSY, PROCEED, Next.PROCEED),
    (M.BUSY, Out.CLIENT_ERROR, PROCEED, Next.ESCALATE),
    (M.BUSY, Out.ALREADY_GONE, POLICY, Next.DONE),
    (M.RECHECK, Out.REMOVED, POLICY, Next.DONE),
    (M.FORCE, Out.BUSY, POLICY, Next.PROCEED),
    (M.FORCE, Out.CLIENT_ERROR, POLICY, Next.PROCEED),
    (M.FORCE, Out.ALREADY_GONE, POLICY, Next.DONE),
]


@pytest.mark.parametrize(("mode", "outcome", "policy", "step"), DECISIONS)
def test_a_returned_answer_finishes_waits_escalates_or_proceeds_by_its_mode_and_policy(
    mode, outcome, policy, step
):
    assert next_step(answer(outcome), mode, policy) is step


def test_every_returned_answer_has_a_decision():
    """No (mode, answer) that the activity returns is left without a table row."""
    for mode in DeregisterMode:
        for outcome in DeregistrationOutcome:
            if retry_of(answer(outcome), mode, POLICY, attempt=1, busy_left=None) is None:
                assert isinstance(next_step(answer(outcome), mode, POLICY), Next)


# (mode, outcome, retry-after) -> why the next try is when it is.
WHYS = [
    (M.BUSY, Out.BUSY, None, Why.BUSY_POLL),
    (M.RECHECK, Out.BUSY, None, Why.RECHECK),
    (M.WAIT, Out.SERVER_ERROR, None, Why.BACKOFF),
    (M.WAIT, Out.RATE_LIMITED, 120.0, Why.RETRY_AFTER),
    (M.WAIT, Out.RATE_LIMITED, 1.0, Why.BACKOFF),  # backoff was longer than GitHub asked
]


@pytest.mark.parametrize(("mode", "outcome", "retry_after", "why"), WHYS)
def test_each_retry_says_why_it_waits(mode, outcome, retry_after, why):
    retry = retry_of(
        answer(outcome, retry_after), mode, POLICY, attempt=1, busy_left=timedelta(minutes=10)
    )
    assert retry is not None and retry.why is why


def test_a_refused_token_comes_back_once_when_asked_to_report_it_naming_its_source():
    refused = answer(Out.AUTH)
    assert retry_of(refused, M.WAIT, POLICY, attempt=1, busy_left=None, report_auth=True) is None
    retry = retry_of(
        refused, M.WAIT, POLICY, attempt=1, busy_left=None, token_source="KEEPER_GITHUB_TOKEN (x)"
    )
    assert retry is not None and "cannot progress by itself" in retry.reason
    assert "KEEPER_GITHUB_TOKEN (x)" in retry.reason
