"""Table tests for a reclaim run's one state (domain/reclaim/state.py) and the pure functions
that change it (domain/reclaim/transitions.py) and render it (domain/reclaim/view.py): the
next move after a fresh read, what each answer of an activity does to the state, which
release an operator's Update may give, and the state carried whole across continue-as-new."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from keeper.domain.reclaim.calls import (
    Assessment,
    CancelResult,
    DrainResult,
    NodeView,
    OperatorRelease,
    UndrainResult,
)
from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport, Release
from keeper.domain.reclaim.models import Decision, Holding, Reason, Verdict
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.state import (
    KEPT_ACTIONS,
    Drain,
    JobReclaimInput,
    ReclaimState,
)
from keeper.domain.reclaim.steps import Attempt, Mode, Outcome, Step
from keeper.domain.reclaim.transitions import (
    Move,
    at_step,
    begin,
    cancel_answered,
    cannot_drain,
    close_call,
    closed,
    drain_answered,
    drain_asked,
    drain_reason,
    ending,
    heard,
    lifted,
    next_attempt,
    next_move,
    observed,
    operator_released,
    release_refusal,
    released,
    remembered,
    result_of,
    settle_release,
    spared,
)
from keeper.domain.reclaim.view import render_details, render_view

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
POLICY = ReclaimPolicy(graceful_tries=2, forced_tries=1, release_beats=2)
HOLDING = Holding(node="n1", job_id=7, epoch=1, first_seen=NOW - timedelta(minutes=10))
V, R = Verdict, Reason
DONE = Release(by=BeatEvidence.DONE, why="the agent reported the job finished")
ALICE = OperatorRelease(by="alice", reason="freed by hand")


def _decision(verdict: Verdict = V.RECLAIM, reason: Reason = R.TERMINAL) -> Decision:
    return Decision(verdict=verdict, reason=reason, detail=f"{verdict.value} by {reason.value}")


def _read(
    verdict: Verdict = V.RECLAIM,
    reason: Reason = R.TERMINAL,
    mode: Mode = Mode.ACT,
    released: Release | None = None,
) -> Assessment:
    return Assessment(
        decision=_decision(verdict, reason),
        mode=mode,
        node=NodeView(name="n1", state="idle"),
        read_at=NOW,
        released=released,
    )


def _state(**update: Any) -> ReclaimState:
    return ReclaimState(holding=HOLDING, actions=("started: reclaim (terminal)",), **update)


def _beat(evidence: BeatEvidence, seconds: int = 0) -> BeatReport:
    return BeatReport(evidence=evidence, at=NOW + timedelta(seconds=seconds))


def _cancel(**kw: Any) -> CancelResult:
    return CancelResult(**{"delivered": False, "decision": _decision(), "cancels_sent": 1,
                           "skipped": False, **kw})  # fmt: skip


# ---- the run's start ----------------------------------------------------------------------


def test_a_new_run_starts_with_the_intakes_verdict_and_the_evidence_heard_first() -> None:
    inp = JobReclaimInput(holding=HOLDING, first=_decision(V.QUARANTINE, R.NEVER_SEEN))
    state = begin(inp, [_beat(BeatEvidence.HELD), _beat(BeatEvidence.ABSENT, 30)])
    assert state.actions == ("started: quarantine (never-seen-issued)",)
    assert (state.step, state.drain, state.tally.absent_in_a_row) == (Step.ASSESS, Drain.NONE, 1)


def test_a_continued_run_takes_the_carried_state_whole() -> None:
    carried = _state(step=Step.DRAINED, drain=Drain.MADE, attempts=3, operator=None,
                     attention="free it", cancels_sent=3, last=_read())  # fmt: skip
    inp = JobReclaimInput(holding=HOLDING, first=_decision(), carry=carried)
    # Through the wire, as continue-as-new hands it over: nothing lost, nothing added.
    again = JobReclaimInput.model_validate_json(inp.model_dump_json())
    assert begin(again) == carried
    assert begin(again, [_beat(BeatEvidence.ABSENT)]).tally.absent_in_a_row == 1


# ---- the next move after a fresh read ------------------------------------------------------

MOVES: list[tuple[str, ReclaimState, Assessment, Move]] = [
    ("keeper's memory shows the agent let go", _state(),
     _read(V.QUARANTINE, R.NEVER_SEEN, released=DONE), Move.RELEASE),
    ("spare", _state(attempts=2), _read(V.SPARE, R.ACTIVE_HERE), Move.SPARE),
    ("spare, in observe mode", _state(), _read(V.SPARE, R.WAITING, Mode.OBSERVE), Move.SPARE),
    ("reclaim, in observe mode", _state(), _read(mode=Mode.OBSERVE), Move.OBSERVE),
    ("quarantine, in observe mode", _state(), _read(V.QUARANTINE, R.NEVER_SEEN, Mode.OBSERVE),
     Move.OBSERVE),
    ("a node the controller does not list", _state(),
     _read(V.QUARANTINE, R.UNKNOWN_NODE), Move.ATTENTION),
    ("quarantine", _state(), _read(V.QUARANTINE, R.OTHER_EPOCH), Move.DRAIN),
    ("reclaim, every try spent", _state(attempts=3), _read(), Move.DRAIN),
    ("reclaim, the last try left", _state(attempts=2), _read(), Move.CANCEL),
    ("reclaim, the first try", _state(), _read(), Move.CANCEL),
]  # fmt: skip


@pytest.mark.parametrize(("case", "state", "read", "move"), MOVES, ids=[m[0] for m in MOVES])
def test_the_next_move_follows_the_verdict_the_mode_and_the_tries_left(
    case: str, state: ReclaimState, read: Assessment, move: Move
) -> None:
    assert next_move(state, read, POLICY) is move


@pytest.mark.parametrize(
    ("spent", "attempt"),
    [(0, Attempt(Step.GRACEFUL, 0, 1, 1)), (1, Attempt(Step.GRACEFUL, 0, 2, 2)),
     (2, Attempt(Step.FORCED, 9, 1, 3)), (3, None)],
)  # fmt: skip
def test_the_next_attempt_follows_the_escalation(spent: int, attempt: Attempt | None) -> None:
    assert next_attempt(_state(attempts=spent), POLICY) == attempt


def test_observe_mode_says_what_keeper_would_do_once() -> None:
    state = observed(_state(), _read(mode=Mode.OBSERVE), POLICY)
    assert state.step is Step.OBSERVING
    assert state.actions[-1] == "observe mode: would send signal 0 (graceful-cancel); terminal"
    assert observed(state, _read(mode=Mode.OBSERVE), POLICY).actions == state.actions
    spent = observed(_state(attempts=3), _read(mode=Mode.OBSERVE), POLICY)
    assert spent.actions[-1] == "observe mode: would drain n1; terminal"


def test_a_spared_holding_ends_spared() -> None:
    state = spared(_state(), _read(V.SPARE, R.ACTIVE_HERE))
    assert state.outcome is Outcome.SPARED and state.actions[-1] == "spared: spare by active-here"


# ---- what each answer does -----------------------------------------------------------------

GRACEFUL_1 = Attempt(Step.GRACEFUL, 0, 1, 1)
CANCELS: list[tuple[str, CancelResult, int, str]] = [
    ("delivered: a try spent", _cancel(delivered=True, sent=True, agent="10.0.0.7:6818"), 1,
     "signal 0 (graceful-cancel 1) delivered to 10.0.0.7:6818"),
    ("not delivered: a try spent", _cancel(error="unreachable"), 1,
     "signal 0 (graceful-cancel 1) not delivered: unreachable"),
    ("skipped by decision: no try spent", _cancel(skipped=True, error="not sent: observe mode"),
     0, "signal 0 (graceful-cancel 1) not sent: observe mode"),
    ("the agent let go: no try spent", _cancel(skipped=True, released=DONE,
     error="not sent: the agent let go"), 0,
     "signal 0 (graceful-cancel 1) not sent: the agent let go"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "result", "spent", "line"), CANCELS, ids=[c[0] for c in CANCELS])
def test_a_cancel_spends_a_try_unless_it_was_skipped_and_its_answer_is_written_down(
    case: str, result: CancelResult, spent: int, line: str
) -> None:
    state = cancel_answered(at_step(_state(), Step.GRACEFUL), GRACEFUL_1, result)
    assert (state.attempts, state.actions[-1], state.cancels_sent) == (spent, line, 1)
    assert state.remembered == result.released


def test_a_drain_made_tells_the_operator_what_to_free() -> None:
    read = _read(V.QUARANTINE, R.NEVER_SEEN)
    asked = drain_asked(_state())
    assert (asked.step, asked.drain) == (Step.DRAINED, Drain.ASKED)
    reason = drain_reason(HOLDING, read, "reclaim-n1-7-e1.1")
    assert (
        reason == "keeper-reclaim: job 7 held after release (never-seen-issued); reclaim-n1-7-e1.1"
    )
    made = drain_answered(asked, DrainResult(node="n1", actual_state="drain",
                                             decision=read.decision), read, reason)  # fmt: skip
    assert made.drain is Drain.MADE and made.actions[-1] == f"drained n1: {reason}"
    assert "keeper reclaim release n1 7" in made.attention


def test_a_drain_its_own_read_refused_leaves_no_drain_and_asks_nothing() -> None:
    read = _read(V.QUARANTINE, R.NEVER_SEEN)
    spare = _decision(V.SPARE, R.ACTIVE_HERE)
    refused = DrainResult(node="n1", actual_state="not drained", drained=False, decision=spare)
    state = drain_answered(drain_asked(_state()), refused, read, "why")
    assert state.drain is Drain.NONE and state.attention == ""
    assert (
        state.actions[-1]
        == "not drained: a fresh read says spare (active-here): spare by active-here"
    )


def test_a_node_keeper_cannot_drain_asks_the_operator() -> None:
    state = cannot_drain(_state())
    assert state.step is Step.DRAINED and state.drain is Drain.NONE
    assert "not a node the controller lists" in state.attention


def test_the_actions_stay_bounded() -> None:
    state = _state()
    for n in range(KEPT_ACTIONS * 2):
        state = cancel_answered(state, GRACEFUL_1, _cancel(error=f"e{n}"))
    assert len(state.actions) == KEPT_ACTIONS and state.actions[-1].endswith(
        f"e{KEPT_ACTIONS * 2 - 1}"
    )


# ---- how it ends ---------------------------------------------------------------------------

ABSENT_TWICE = [_beat(BeatEvidence.ABSENT), _beat(BeatEvidence.ABSENT, 30)]


def _heard(state: ReclaimState, beats: list[BeatReport]) -> ReclaimState:
    for beat in beats:
        state = heard(state, beat)
    return state


RELEASES: list[tuple[str, ReclaimState, Outcome | None, str]] = [
    ("nothing yet", _state(), None, ""),
    ("one absent heartbeat", _heard(_state(), ABSENT_TWICE[:1]), None, ""),
    ("release_beats absent heartbeats", _heard(_state(), ABSENT_TWICE), Outcome.RELEASED,
     "released: 2 heartbeats in a row listed other jobs, not this one"),
    ("keeper's memory", remembered(_state(), DONE), Outcome.RELEASED,
     "released: the agent reported the job finished"),
    ("an operator", operator_released(_state(), ALICE), Outcome.OPERATOR_RELEASED,
     "released by alice: freed by hand"),
    ("an operator without a reason", operator_released(_state(), OperatorRelease(by="bob")),
     Outcome.OPERATOR_RELEASED, "released by bob"),
    ("the agent's word outweighs an operator's", _heard(operator_released(_state(), ALICE),
     ABSENT_TWICE), Outcome.RELEASED,
     "released: 2 heartbeats in a row listed other jobs, not this one"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "state", "outcome", "line"), RELEASES, ids=[r[0] for r in RELEASES]
)
def test_heartbeats_keepers_memory_or_an_operator_release_a_holding_and_the_agent_wins(
    case: str, state: ReclaimState, outcome: Outcome | None, line: str
) -> None:
    assert released(state, POLICY) is (outcome is not None)
    if outcome is not None:
        settled = settle_release(state, POLICY)
        assert (settled.outcome, settled.actions[-1]) == (outcome, line)
        assert (settled.release is not None) is (outcome is Outcome.RELEASED)


REFUSALS: list[tuple[str, ReclaimState | None, str | None]] = [
    ("not started", None, "the reclaim has not started yet; try again in a moment"),
    ("escalating", _state(step=Step.GRACEFUL, attempts=1), None),
    ("observing", _state(step=Step.OBSERVING), None),
    ("drained", _state(step=Step.DRAINED, drain=Drain.MADE), None),
    ("released by an operator", operator_released(_state(), ALICE),
     "already released by alice (freed by hand)"),
    ("released by an operator, settled", settle_release(operator_released(_state(), ALICE),
     POLICY), "already released by alice (freed by hand)"),
    ("released by the agent", settle_release(remembered(_state(), DONE), POLICY),
     "the reclaim no longer waits for an operator: it is ending released "
     "(released: the agent reported the job finished)"),
    ("spared", spared(_state(), _read(V.SPARE, R.ACTIVE_HERE)),
     "the reclaim no longer waits for an operator: it is ending spared "
     "(spared: spare by active-here)"),
    ("cancelled", ending(_state(), "cancelled", Outcome.CANCELLED),
     "the reclaim no longer waits for an operator: it is ending cancelled (cancelled)"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "state", "refusal"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_an_operator_may_release_a_started_reclaim_only_until_it_is_released_or_ending(
    case: str, state: ReclaimState | None, refusal: str | None
) -> None:
    assert release_refusal(state) == refusal


@pytest.mark.parametrize(
    ("drain", "line"),
    [(Drain.NONE, "cancelled"), (Drain.ASKED, "cancelled: lifting keeper's drain"),
     (Drain.MADE, "cancelled: lifting keeper's drain")],
)  # fmt: skip
def test_a_cancel_lifts_a_drain_made_or_asked_for(drain: Drain, line: str) -> None:
    state = ending(_state(drain=drain), "cancelled", Outcome.CANCELLED)
    assert (state.actions[-1], state.outcome) == (line, Outcome.CANCELLED)
    assert ending(_state(drain=drain), "failed").outcome is None


def test_the_result_says_whether_the_drain_was_lifted() -> None:
    state = settle_release(
        operator_released(_state(drain=Drain.MADE, attention="x"), ALICE), POLICY
    )
    assert result_of(state).drained is False
    kept = lifted(state, UndrainResult(resumed=False, why="keeper still holds n1 drained for y"))
    resumed = lifted(state, UndrainResult(resumed=True, why="n1 resumed: keeper's drain lifted"))
    assert (kept.drain, kept.attention) == (Drain.NONE, "")
    assert (result_of(kept).drained, result_of(kept).undrained) == (True, False)
    done = closed(resumed)
    assert (done.step, done.closed) == (Step.DONE, True)
    result = result_of(done)
    assert (result.outcome, result.drained, result.undrained) == (
        Outcome.OPERATOR_RELEASED,
        True,
        True,
    )
    assert result.detail == "n1 resumed: keeper's drain lifted"


@pytest.mark.parametrize(
    ("last", "outcome", "fenced", "with_release"),
    [(V.QUARANTINE, Outcome.RELEASED, True, True), (V.RECLAIM, Outcome.RELEASED, False, True),
     (V.QUARANTINE, Outcome.OPERATOR_RELEASED, True, False),
     (V.QUARANTINE, Outcome.CANCELLED, True, False)],
)  # fmt: skip
def test_the_closing_call_fences_only_a_quarantine_and_carries_the_release_only_when_released(
    last: Verdict, outcome: Outcome, fenced: bool, with_release: bool
) -> None:
    state = settle_release(remembered(_state(last=_read(last, R.TERMINAL)), DONE), POLICY)
    call = close_call(state, "reclaim-n1-7-e1.1", outcome)
    assert (call.outcome, call.fenced, call.release is not None) == (outcome, fenced, with_release)


# ---- what it shows -------------------------------------------------------------------------


def test_the_view_and_the_details_show_the_drain_the_attention_and_the_heartbeat_count() -> None:
    state = _heard(drain_answered(drain_asked(assessed_quarantine := _state(
        last=_read(V.QUARANTINE, R.NEVER_SEEN), mode=Mode.ACT)), DrainResult(
        node="n1", actual_state="drain", decision=_decision(V.QUARANTINE, R.NEVER_SEEN)),
        _read(V.QUARANTINE, R.NEVER_SEEN), "why"), ABSENT_TWICE[:1])  # fmt: skip
    view = render_view(state)
    assert view.drained and view.attention == state.attention and view.actions == state.actions
    assert view.tally.absent_in_a_row == 1 and view.last == assessed_quarantine.last
    details = render_details(view, POLICY)
    assert "step: drained · mode: act · cancels sent: 0" in details
    assert "ATTENTION: n1 drained" in details and "1/2 heartbeats listing other jobs" in details
    assert "node drained by keeper until the agent releases the job" in details
    assert render_view(_state()).drained is False
