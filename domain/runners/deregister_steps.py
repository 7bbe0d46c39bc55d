"""The registration step as data: given the deletion's state and what just happened (GitHub's
answer, a force arriving mid-call, a forced call giving up), the next move.

`RunnerDeletion._deregister` only carries the moves out: it asks GitHub in the mode the
state says, and stops on DONE or LEAVE. Every rule is here, in one pure function per event,
with table tests (tests/runners/test_deregister_steps.py).

| event | mode | answer | act | the deletion shows |
|---|---|---|---|---|
| answer | any | gone (removed, 404) | DONE | deregister (KeeperStep too, after a wait) |
| answer | wait | busy | ASK in busy | busy_wait, the busy clock started |
| answer | busy, recheck | busy past busy_wait, or a refusal | ASK in recheck | escalated |
| answer | busy | busy past busy_wait, policy `proceed` | LEAVE | the decision to proceed |
| answer | force | busy, refused | LEAVE | the decision; the registration goes after the compute |
| answer | wait, busy, recheck | token refused | ASK | needs attention (once) |
| force arrives | any | - | ASK in force | deregister when it answers an escalation |
| forced call gives up | force | - | LEAVE | GitHub kept failing |
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from keeper.domain.common.durations import format_duration
from keeper.domain.runners.deletion_state import (
    GITHUB_WAIT,
    WAITING_STEPS,
    DeletionState,
    escalate,
    moved,
)
from keeper.domain.runners.deregistration import TOKEN_SOURCES, DeregisterMode, Next, next_step
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome
from keeper.domain.runners.models import DeletionPolicy, DeletionStep

M = DeregisterMode
# The modes in which a refused token comes back to the workflow once, so the deletion can
# say it needs attention; a force or a cleanup is bounded and reports it when it gives up.
REPORTS_AUTH = frozenset({M.WAIT, M.BUSY, M.RECHECK})


class Act(StrEnum):
    ASK = "ask"  # ask GitHub again, in the new state's mode
    DONE = "done"  # the registration is gone
    LEAVE = "leave"  # delete the compute first; the registration is removed after it


@dataclass(frozen=True)
class Move:
    act: Act
    state: DeletionState
    # DONE and LEAVE: what happened to the registration, for the record's audit trail.
    audit: str | None = None


def asking(state: DeletionState) -> DeletionState:
    """The state a call is made in: a force that landed meanwhile asks with a force's
    patience (a force that arrived with the last answer, in the same task, counts too)."""
    mode = M.FORCE if state.force and state.mode not in (M.FORCE, M.CLEANUP) else state.mode
    return state.model_copy(update={"mode": mode, "waiting": GITHUB_WAIT})


def report_auth(state: DeletionState) -> bool:
    """Whether a refused token comes back to the workflow (once) instead of being retried."""
    return state.mode in REPORTS_AUTH and state.attention is None


def on_answer(
    state: DeletionState,
    answer: DeregistrationAnswer,
    *,
    attempts: int,
    policy: DeletionPolicy,
    now: datetime,
    token_source: str | None = None,
) -> Move:
    """GitHub answered and the activity handed the answer back."""
    seen = state.model_copy(
        update={
            "github": answer.message,
            "github_attempts": state.github_attempts + attempts,
            # Another answer came back, so the token was accepted after all.
            "attention": None,
            "waiting": None,
        }
    )
    if answer.outcome is DeregistrationOutcome.AUTH and state.mode in REPORTS_AUTH:
        attention = auth_attention(answer, token_source)
        return Move(Act.ASK, seen.model_copy(update={"attention": attention}))
    step = next_step(answer, state.mode, policy)
    if step is Next.DONE:
        done = seen.model_copy(update={"busy_since": None})
        if state.escalated:
            done = done.model_copy(
                update={
                    "escalated": False,
                    "error": None,
                    "decision": f"resolved while escalated: GitHub answered {answer.message}",
                }
            )
        gone = "removed" if answer.outcome is DeregistrationOutcome.REMOVED else "already gone"
        # After a busy wait or an escalation, KeeperStep moves off it too.
        searchable = state.shown_step in WAITING_STEPS
        return Move(
            Act.DONE,
            moved(done, DeletionStep.DEREGISTER, searchable=searchable),
            audit=f"registration {gone} ({answer.message})",
        )
    if step is Next.WAIT_BUSY:
        busy = seen.model_copy(update={"busy_since": now, "mode": M.BUSY})
        return Move(Act.ASK, moved(busy, DeletionStep.BUSY_WAIT))
    answered = _answered(answer)
    if step is Next.PROCEED:
        if state.mode is not M.FORCE:
            decision = (
                f"still busy after {policy.busy_wait}: proceeding (policy "
                "on_busy_timeout=proceed); the job on it is lost"
            )
            audit = (
                f"registration left: {answered} after {format_duration(policy.busy_wait)}; "
                "proceeding "
                "(on_busy_timeout=proceed), removed once the compute is gone"
            )
        elif state.force:
            decision = f"GitHub answered {answer.message}; force: deleting the compute anyway"
            audit = f"registration left: {answered}; forced past it"
        else:
            decision = (
                f"GitHub answered {answer.message}; the record is already deleting, so "
                "the compute goes first and the registration after it"
            )
            audit = f"registration left: {answered}; the record was already deleting"
        return Move(Act.LEAVE, seen.model_copy(update={"decision": decision}), audit=audit)
    # Next.ESCALATE: stop and ask an operator; GitHub is still asked every
    # escalation_recheck, so a job that ends or a cause that is fixed finishes it.
    why = (
        f"runner still busy after {policy.busy_wait}"
        if answer.busy
        else f"GitHub refused the removal ({answer.message})"
    )
    error = (
        f"{why}. Let it finish or fix the cause (keeper asks GitHub again every "
        f"{policy.escalation_recheck} by itself), or run "
        f"`keeper runner delete {state.runner} --force` to delete it anyway"
    )
    return Move(Act.ASK, escalate(seen, why, error, mode=M.RECHECK))


def on_force(state: DeletionState) -> Move:
    """A force arrived while GitHub was being asked: the call was cancelled."""
    forced = state.model_copy(update={"mode": M.FORCE, "force": True})
    if not state.escalated:
        return Move(Act.ASK, forced)
    answered = forced.model_copy(
        update={
            "error": None,
            "decision": f"{state.decision or 'escalated'}; answered: force requested",
        }
    )
    # KeeperStep moves off `escalated`: nobody needs to find this one any more.
    return Move(Act.ASK, moved(answered, DeletionStep.DEREGISTER, searchable=True))


def on_gave_up(state: DeletionState, cause: str) -> Move | None:
    """The call failed for good. A forced call that used up its attempts leaves the
    registration for after the compute; anything else is not the step's to decide (None)."""
    if state.mode is not M.FORCE:
        return None
    decision = (
        f"force: GitHub kept failing ({cause}); registration left for after the compute is gone"
    )
    return Move(
        Act.LEAVE,
        state.model_copy(update={"decision": decision, "waiting": None}),
        audit=f"registration left: GitHub kept failing ({cause}); forced past it",
    )


def auth_attention(answer: DeregistrationAnswer, token_source: str | None) -> str:
    """What a refused token needs: someone to fix it, and where it is read from."""
    source = token_source or TOKEN_SOURCES
    return (
        f"GitHub refused keeper's token ({answer.message}); the deletion cannot progress by "
        f"itself. The token comes from {source}: fix it there and keeper asks again by "
        "itself (backoff), or run the deletion with --force to go on without the registration"
    )


def _answered(answer: DeregistrationAnswer) -> str:
    if answer.busy:
        return f"GitHub answered {answer.status_code} (runner busy)"
    return f"GitHub answered {answer.message}"
