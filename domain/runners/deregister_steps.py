"""The deregistration step as data: given what the step knows so far and what just happened
(GitHub's answer, a force arriving mid-call, a forced call giving up), the next move.

`RunnerDeletion._deregister` only carries the moves out: it asks GitHub in the mode the
state says, shows the step a move names, and stops on DONE or LEAVE. Every rule is here, in
one pure function per event, with table tests (tests/test_deregister_steps.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from keeper.domain.common.durations import format_duration
from keeper.domain.runners.deregistration import DeregisterMode, Next, next_step
from keeper.domain.runners.github import DeregistrationAnswer, DeregistrationOutcome
from keeper.domain.runners.models import DeletionPolicy, DeletionStep

M = DeregisterMode
# The modes in which a refused token comes back to the workflow once, so the deletion can
# say it needs attention; a force or a cleanup is bounded and reports it when it gives up.
REPORTS_AUTH = frozenset({M.WAIT, M.BUSY, M.RECHECK})
NO_REGISTRATION = "no registration recorded"
TOKEN_SOURCES = "KEEPER_GITHUB_TOKEN or runners.github.token_file"


@dataclass(frozen=True)
class Deregistration:
    """What the step knows so far (the part of the deletion's state it reads and writes)."""

    mode: DeregisterMode
    force: bool = False
    busy_since: datetime | None = None
    escalated: bool = False
    decision: str | None = None
    error: str | None = None
    github: str = "-"
    github_attempts: int = 0
    # A refused token was reported: what it needs, shown until another answer comes back
    # (meanwhile the activity retries it instead of answering again).
    attention: str | None = None
    # RunnerStep (the search attribute) shows busy_wait or escalated.
    waiting_shown: bool = False

    def asking(self) -> Deregistration:
        """The state a call is made in: a force that landed meanwhile asks with a force's
        patience (a force that arrived with the last answer, in the same task, counts too)."""
        if self.force and self.mode not in (M.FORCE, M.CLEANUP):
            return replace(self, mode=M.FORCE)
        return self

    def report_auth(self) -> bool:
        return self.mode in REPORTS_AUTH and self.attention is None


class Act(StrEnum):
    ASK = "ask"  # ask GitHub again, in the new state's mode
    DONE = "done"  # the registration is gone
    LEAVE = "leave"  # delete the compute first; the registration is removed after it


@dataclass(frozen=True)
class Move:
    act: Act
    state: Deregistration
    # The step the deletion shows now (None: it stays where it is), and whether RunnerStep
    # follows it even when the step is not one operators search for.
    step: DeletionStep | None = None
    searchable: bool = False
    # DONE and LEAVE: what happened to the registration, for the record's audit trail.
    audit: str | None = None


def on_answer(
    state: Deregistration,
    answer: DeregistrationAnswer,
    *,
    attempts: int,
    policy: DeletionPolicy,
    now: datetime,
    runner: str,
    token_source: str | None = None,
) -> Move:
    """GitHub answered and the activity handed the answer back."""
    seen = replace(
        state,
        github=answer.message,
        github_attempts=state.github_attempts + attempts,
        # Another answer came back, so the token was accepted after all.
        attention=None,
    )
    if answer.outcome is DeregistrationOutcome.AUTH and state.mode in REPORTS_AUTH:
        return Move(Act.ASK, replace(seen, attention=auth_attention(answer, token_source)))
    step = next_step(answer, state.mode, policy)
    if step is Next.DONE:
        done = replace(seen, busy_since=None)
        if state.escalated:
            done = replace(
                done,
                escalated=False,
                error=None,
                decision=f"resolved while escalated: GitHub answered {answer.message}",
            )
        gone = "removed" if answer.outcome is DeregistrationOutcome.REMOVED else "already gone"
        # After a busy wait or an escalation, RunnerStep moves off it too.
        return Move(
            Act.DONE,
            done,
            step=DeletionStep.DEREGISTER,
            searchable=state.waiting_shown,
            audit=f"registration {gone} ({answer.message})",
        )
    if step is Next.WAIT_BUSY:
        return Move(
            Act.ASK, replace(seen, busy_since=now, mode=M.BUSY), step=DeletionStep.BUSY_WAIT
        )
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
        return Move(Act.LEAVE, replace(seen, decision=decision), audit=audit)
    # Next.ESCALATE: stop and ask an operator; GitHub is still asked every
    # escalation_recheck, so a job that ends or a cause that is fixed finishes it.
    why = (
        f"runner still busy after {policy.busy_wait}"
        if answer.busy
        else f"GitHub refused the removal ({answer.message})"
    )
    escalated = replace(
        seen,
        mode=M.RECHECK,
        escalated=True,
        decision=f"{why}; escalated to an operator",
        error=(
            f"{why}. Let it finish or fix the cause (keeper asks GitHub again every "
            f"{policy.escalation_recheck} by itself), or run "
            f"`keeper runner delete {runner} --force` to delete it anyway"
        ),
    )
    return Move(Act.ASK, escalated, step=DeletionStep.ESCALATED)


def on_force(state: Deregistration) -> Move:
    """A force arrived while GitHub was being asked: the call was cancelled."""
    forced = replace(state, mode=M.FORCE, force=True)
    if not state.escalated:
        return Move(Act.ASK, forced)
    answered = replace(
        forced, error=None, decision=f"{state.decision or 'escalated'}; answered: force requested"
    )
    # RunnerStep moves off `escalated`: nobody needs to find this one any more.
    return Move(Act.ASK, answered, step=DeletionStep.DEREGISTER, searchable=True)


def on_gave_up(state: Deregistration, cause: str) -> Move | None:
    """The call failed for good. A forced call that used up its attempts leaves the
    registration for after the compute; anything else is not the step's to decide (None)."""
    if state.mode is not M.FORCE:
        return None
    decision = (
        f"force: GitHub kept failing ({cause}); registration left for after the compute is gone"
    )
    return Move(
        Act.LEAVE,
        replace(state, decision=decision),
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
