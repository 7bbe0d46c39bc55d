"""How a reclaim's state changes: pure functions, one for each thing that happens to it
(a signal heard, a fresh read of the controller, a call answered, the end), in the order a
run meets them.

What to do after a fresh read is one table (`next_move`), and whether an operator's release
is taken another (`release_refusal`).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from keeper.domain.reclaim.calls import (
    Assessment,
    CancelResult,
    CloseCall,
    DrainResult,
    OperatorRelease,
    UndrainResult,
)
from keeper.domain.reclaim.evidence import BeatReport, Release
from keeper.domain.reclaim.models import DRAIN_REASON_PREFIX, Holding, Reason, Verdict
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.state import (
    KEPT_ACTIONS,
    Drain,
    JobReclaimInput,
    JobReclaimResult,
    ReclaimState,
)
from keeper.domain.reclaim.steps import Attempt, Mode, Outcome, Step, attempts


def _act(state: ReclaimState, line: str, *, dedupe: bool = False, **update: object) -> ReclaimState:
    """`update`, and one more action line (bounded; `dedupe`: not when it repeats the last)."""
    actions = state.actions
    if not (dedupe and actions and actions[-1] == line):
        actions = (*actions, line)[-KEPT_ACTIONS:]
    return state.model_copy(update={**update, "actions": actions})


def begin(inp: JobReclaimInput, heard_first: Iterable[BeatReport] = ()) -> ReclaimState:
    """The run's state: what the last run of the chain carried, or a new reclaim. Evidence
    signalled before the run began (the start signal) is counted in order."""
    state = inp.carry
    if state is None:
        d = inp.first
        state = ReclaimState(
            holding=inp.holding, actions=(f"started: {d.verdict.value} ({d.reason.value})",)
        )
    for report in heard_first:
        state = heard(state, report)
    return state


def heard(state: ReclaimState, report: BeatReport) -> ReclaimState:
    return state.model_copy(update={"tally": state.tally.add(report)})


def assessed(state: ReclaimState, a: Assessment) -> ReclaimState:
    return state.model_copy(update={"last": a, "mode": a.mode})


# ---- what the next move is ---------------------------------------------------------------


class Move(StrEnum):
    RELEASE = "release"
    SPARE = "spare"
    OBSERVE = "observe"
    # Quarantine a node keeper cannot drain: the operator is told, and the run waits.
    ATTENTION = "attention"
    DRAIN = "drain"
    CANCEL = "cancel"


def next_move(state: ReclaimState, a: Assessment, policy: ReclaimPolicy) -> Move:
    """After a fresh read, rows tried top to bottom:

    | the read | move |
    |---|---|
    | keeper's memory shows the agent let go | release |
    | verdict spare | spare (the run ends) |
    | observe mode | observe: show what keeper would do, send nothing |
    | a node the controller does not list (quarantine) | attention: no drain is possible |
    | verdict quarantine, or every try of the escalation spent | drain |
    | verdict reclaim | cancel: the next try of the escalation |
    """
    if a.released is not None:
        return Move.RELEASE
    if a.decision.verdict is Verdict.SPARE:
        return Move.SPARE
    if a.mode is Mode.OBSERVE:
        return Move.OBSERVE
    if a.decision.reason is Reason.UNKNOWN_NODE:
        return Move.ATTENTION
    if a.decision.verdict is Verdict.QUARANTINE or next_attempt(state, policy) is None:
        return Move.DRAIN
    return Move.CANCEL


def next_attempt(state: ReclaimState, policy: ReclaimPolicy) -> Attempt | None:
    """The next try of the escalation; None once every one was spent."""
    plan = attempts(policy)
    return plan[state.attempts] if state.attempts < len(plan) else None


def remembered(state: ReclaimState, release: Release) -> ReclaimState:
    return state.model_copy(update={"remembered": release})


def spared(state: ReclaimState, a: Assessment) -> ReclaimState:
    return _act(state, f"spared: {a.decision.detail}", outcome=Outcome.SPARED)


def observed(state: ReclaimState, a: Assessment, policy: ReclaimPolicy) -> ReclaimState:
    step = next_attempt(state, policy)
    if a.decision.verdict is Verdict.QUARANTINE or step is None:
        would = f"would drain {a.node.name or state.holding.node}"
    else:
        would = f"would send signal {step.signal} ({step.step.value})"
    line = f"observe mode: {would}; {a.decision.reason.value}"
    return _act(state, line, dedupe=True, step=Step.OBSERVING)


# ---- the escalation ----------------------------------------------------------------------


def at_step(state: ReclaimState, step: Step) -> ReclaimState:
    return state.model_copy(update={"step": step})


def cancel_answered(state: ReclaimState, attempt: Attempt, result: CancelResult) -> ReclaimState:
    """A cancel skipped by decision (the call's own fresh read found nothing to cancel,
    observe mode, the agent's word pending) spends no try: the next read decides. Sent or
    not delivered, it does."""
    what = f"signal {attempt.signal} ({attempt.step.value} {attempt.try_in_step})"
    state = state.model_copy(update={"cancels_sent": result.cancels_sent})
    if result.released is not None:
        # keeper's memory shows the agent let go: nothing was sent, nothing is left.
        return _act(state, f"{what} {result.error}", remembered=result.released)
    if result.skipped:
        return _act(state, f"{what} {result.error}")
    line = (
        f"{what} delivered to {result.agent}"
        if result.delivered
        else f"{what} not delivered: {result.error}"
    )
    return _act(state, line, attempts=state.attempts + 1)


def drain_reason(holding: Holding, a: Assessment, workflow_id: str) -> str:
    """The reason keeper's drain carries on the node: its prefix marks it keeper's, and the
    workflow id names the reclaim that made it."""
    return (
        f"{DRAIN_REASON_PREFIX} job {holding.job_id} held after release "
        f"({a.decision.reason.value}); {workflow_id}"
    )


def cannot_drain(state: ReclaimState) -> ReclaimState:
    h = state.holding
    attention = (
        f"{h.node} is not a node the controller lists, so keeper cannot drain it; check the "
        "agent's hostname (reclaim.node_aliases) and release it with "
        f"`keeper reclaim release {h.node} {h.job_id}`"
    )
    return state.model_copy(update={"step": Step.DRAINED, "attention": attention})


def drain_asked(state: ReclaimState) -> ReclaimState:
    return state.model_copy(update={"step": Step.DRAINED, "drain": Drain.ASKED})


def drain_answered(
    state: ReclaimState, result: DrainResult, a: Assessment, reason: str
) -> ReclaimState:
    """Drained: the operator is told what to free. Not drained: the drain's own fresh read
    found the holding no longer stale, and nothing is asked of anyone."""
    if not result.drained:
        d = result.decision
        why = f"{d.verdict.value} ({d.reason.value}): {d.detail}"
        return _act(state, f"not drained: a fresh read says {why}", drain=Drain.NONE)
    h = state.holding
    attention = (
        f"{h.node} drained ({result.actual_state}): its agent still holds job {h.job_id} "
        f"({a.decision.reason.value}). Free it on the node, then "
        f"`keeper reclaim release {h.node} {h.job_id}`"
    )
    return _act(state, f"drained {result.node}: {reason}", drain=Drain.MADE, attention=attention)


# ---- how it ends -------------------------------------------------------------------------


def released(state: ReclaimState, policy: ReclaimPolicy) -> bool:
    """Whether the agent let go, by its word or an operator's: the run ends released."""
    return (
        state.operator is not None or state.remembered is not None or state.tally.released(policy)
    )


def settle_release(state: ReclaimState, policy: ReclaimPolicy) -> ReclaimState:
    """Released: by the agent's evidence when there is any (it says more than an
    operator's word), else by the operator."""
    release = state.tally.release(policy) or state.remembered
    if release is not None:
        return _act(state, f"released: {release.why}", outcome=Outcome.RELEASED, release=release)
    op = state.operator
    assert op is not None, "settle_release before any release"
    line = f"released by {op.by}" + (f": {op.reason}" if op.reason else "")
    return _act(state, line, outcome=Outcome.OPERATOR_RELEASED)


def release_refusal(state: ReclaimState | None) -> str | None:
    """Why an operator's release is refused (None: it is taken):

    | the reclaim | answer |
    |---|---|
    | has not started | refused: nothing to release yet |
    | an operator already released it | refused: already released, by whom |
    | its outcome is decided (released, spared, cancelled) | refused: it no longer waits for an operator |
    | waits for release evidence (any step before its end) | taken |
    """  # noqa: E501
    if state is None:
        return "the reclaim has not started yet; try again in a moment"
    if state.operator is not None:
        op = state.operator
        return f"already released by {op.by}" + (f" ({op.reason})" if op.reason else "")
    if state.outcome is not None:
        last = f" ({state.actions[-1]})" if state.actions else ""
        return f"the reclaim no longer waits for an operator: it is ending {state.outcome}{last}"
    return None


def operator_released(state: ReclaimState, release: OperatorRelease) -> ReclaimState:
    """Kept until the run settles the release (`settle_release` says who and why)."""
    return state.model_copy(update={"operator": release})


def lifted(state: ReclaimState, result: UndrainResult) -> ReclaimState:
    return _act(state, result.why, drain=Drain.NONE, attention="", lifted=result)


def ending(state: ReclaimState, why: str, outcome: Outcome | None = None) -> ReclaimState:
    """A cancel (`outcome` cancelled) or a failure: said, and whether keeper's drain, made or
    asked for, is lifted on the way out."""
    line = f"{why}: lifting keeper's drain" if state.drain is not Drain.NONE else why
    return _act(state, line, outcome=outcome if outcome is not None else state.outcome)


def close_call(state: ReclaimState, workflow_id: str, outcome: Outcome) -> CloseCall:
    """What keeper's memory is told at the end: what released the holding, and whether
    keeper's last verdict on it was quarantine (together: whether it keeps its fence)."""
    last = state.last
    return CloseCall(
        holding=state.holding,
        workflow_id=workflow_id,
        outcome=outcome,
        release=state.release if outcome is Outcome.RELEASED else None,
        fenced=last is not None and last.decision.verdict is Verdict.QUARANTINE,
    )


def closed(state: ReclaimState) -> ReclaimState:
    return state.model_copy(update={"step": Step.DONE, "closed": True})


def result_of(state: ReclaimState) -> JobReclaimResult:
    assert state.outcome is not None, "a result before the outcome"
    return JobReclaimResult(
        outcome=state.outcome,
        holding=state.holding,
        attempts=state.attempts,
        drained=state.lifted is not None,
        undrained=state.lifted is not None and state.lifted.resumed,
        mode=state.mode,
        last=state.last,
        detail=state.actions[-1] if state.actions else "",
    )
