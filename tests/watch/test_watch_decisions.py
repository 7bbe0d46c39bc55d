"""An operator's decisions and the state changes the workflow makes between checks, as the pure
functions of domain/watch/ decide them: what the `approve` and `deny` validators refuse, and
the state a queued job's start, a roll-over and the watch's close leave."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keeper.domain.watch.assess import approval_refusal, decide, finish_action, refusal
from keeper.domain.watch.cadence import PhaseState, WatchPhase
from keeper.domain.watch.calls import JobWatchInput, JobWatchResult
from keeper.domain.watch.closing import closed
from keeper.domain.watch.models import (
    Decision,
    Proposal,
    ProposalKind,
    ProposalState,
    WatchOutcome,
    WatchView,
)
from keeper.domain.watch.relaunch import HeldLaunch
from keeper.domain.watch.state import ReadingState, WatchState, rolled_over, scheduled

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
JOB = "/alice/tokenize"
HELD = HeldLaunch(request={"name": "tokenize", "entrypoint": {"runCommand": {"argv": ["run"]}}})
# A redacted request with no full copy in the launch store: nothing keeper may resend.
REDACTED = HeldLaunch(request={"name": "tokenize"}, secrets=["environment.envVars.HF_TOKEN"])
COMMAND = ["python", "-m", "pipeline", "--resume"]
HF_SECRET = "hf_Zq3Lm7Rt2Vb5Nc8Kd1Hs4Jx9Wp6Yt0Qa2Sd4Fg"


def proposal(pid: str, state: ProposalState = ProposalState.PENDING, **kw: object) -> Proposal:
    kind = ProposalKind(pid.split("-")[0])
    return Proposal(
        id=pid, kind=kind, reason="zombie", key=f"k:{pid}", created_at=T0, state=state, **kw
    )


def view(*proposals: Proposal) -> WatchView:
    return WatchView(job_id=JOB, job_state="running", proposals=list(proposals))


@pytest.mark.parametrize(
    ("proposals", "decision", "launch", "refused"),
    [
        # (what the watch holds, the approval, the request held, the refusal's words or None)
        ([proposal("stop-1")], Decision(proposal="stop-1", by="bob"), None, None),
        ([proposal("restart-1")], Decision(proposal="restart-1", by="bob"), HELD, None),
        (
            [proposal("restart-1")],
            Decision(proposal="restart-1", by="bob", command=COMMAND),
            None,
            None,
        ),
        (
            [proposal("restart-1")],
            Decision(proposal="restart-1", by="bob"),
            None,
            "keeper holds no launch request",
        ),
        (
            [proposal("restart-1")],
            Decision(proposal="restart-1", by="bob"),
            REDACTED,
            "is redacted",
        ),
        (
            [proposal("restart-1")],
            Decision(proposal="restart-1", by="bob", command=["run", f"--token={HF_SECRET}"]),
            HELD,
            "looks like a secret",
        ),
        (
            [proposal("stop-1")],
            Decision(proposal="stop-1", by="bob", command=COMMAND),
            HELD,
            "only a restart takes a command",
        ),
        ([proposal("stop-1")], Decision(proposal="stop-9", by="bob"), HELD, "no proposal 'stop-9'"),
        (
            [proposal("stop-1", ProposalState.DENIED, decided_by="carol")],
            Decision(proposal="stop-1", by="bob"),
            HELD,
            "already denied by carol",
        ),
        (
            [proposal("restart-1", ProposalState.APPROVED), proposal("stop-2")],
            Decision(proposal="stop-2", by="bob"),
            HELD,
            "restart-1 (restart) is being carried out",
        ),
    ],
)
def test_approve_refuses_what_keeper_could_not_carry_out_and_says_why(
    proposals: list[Proposal], decision: Decision, launch: HeldLaunch | None, refused: str | None
) -> None:
    problem = approval_refusal(view(*proposals), decision, launch)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem, problem


def test_deny_refuses_only_a_proposal_that_is_not_pending_or_not_there() -> None:
    watch = view(proposal("restart-1"), proposal("stop-2", ProposalState.WITHDRAWN))
    assert refusal(watch, "restart-1") is None  # no launch request needed to deny
    assert "already withdrawn" in (refusal(watch, "stop-2") or "")
    assert "pending: restart-1" in (refusal(watch, "nope") or "")


def test_a_decision_records_who_and_when_and_a_carried_out_step_finishes_the_watch() -> None:
    state = WatchState(view=view(proposal("restart-1")))
    decision = Decision(proposal="restart-1", by="bob", note="stuck", command=COMMAND)
    approved = decide(state, decision, T0, approve=True)
    (p,) = approved.view.proposals
    assert (p.state, p.decided_by, p.decided_at, p.note, p.command) == (
        ProposalState.APPROVED, "bob", T0, "stuck", COMMAND,
    )  # fmt: skip
    denied = decide(state, decision, T0, approve=False).view.proposals[0]
    assert (denied.state, denied.command) == (ProposalState.DENIED, None)
    done = finish_action(approved, "restart-1", ProposalState.DONE, "relaunched", T0)
    assert (done.view.proposals[0].outcome, done.view.phase) == ("relaunched", WatchPhase.FINISHED)
    failed = finish_action(approved, "restart-1", ProposalState.FAILED, "refused", T0)
    assert failed.view.phase is approved.view.phase  # a failed step keeps watching


def test_a_queued_job_starts_its_smoke_window_when_it_is_scheduled() -> None:
    queued = WatchState(
        view=view(), phase=PhaseState(phase=WatchPhase.SMOKE, since=T0), interval_s=30.0
    )
    later = T0 + timedelta(hours=3)
    started = scheduled(queued, later)
    assert started.phase == PhaseState(phase=WatchPhase.SMOKE, since=later)
    assert started.model_copy(update={"phase": queued.phase}) == queued  # nothing else


def test_a_roll_over_hands_the_whole_state_on_one_generation_older() -> None:
    state = WatchState(
        view=view(proposal("stop-1")).model_copy(update={"generation": 4, "checks": 9}),
        reading=ReadingState(attempt="ab12cd34-p0-a0", coordinator_cursor=4096),
        told=("stalled:a0",),
        proposals_made=1,
    )
    next_run = rolled_over(state)
    assert next_run.view.generation == 5
    assert next_run.model_copy(update={"view": state.view}) == state
    # What the next run receives in its input, whole: the carry round-trips as JSON.
    inp = JobWatchInput(job_id=JOB, carry=next_run)
    assert JobWatchInput.model_validate_json(inp.model_dump_json()).carry == next_run


def test_a_closed_watch_is_the_close_view_and_nothing_else_changes() -> None:
    state = WatchState(view=view(proposal("stop-1")), told=("k",), proposals_made=1)
    result = JobWatchResult(job_id=JOB, outcome=WatchOutcome.UNWATCHED, job_state="running")
    done = closed(state, result, T0, timeline_limit=10)
    assert (done.view.verdict, done.view.phase) == ("finished", WatchPhase.FINISHED)
    assert done.view.proposals[0].state is ProposalState.WITHDRAWN
    assert done.model_copy(update={"view": state.view}) == state
