"""All a JobReclaim run knows, in one frozen model: its input, the state it carries whole
across continue-as-new, and its result.

Only the pure functions of domain/reclaim/transitions.py make a new state; the query view and
the current details are rendered from it (domain/reclaim/view.py).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from keeper.domain.reclaim.calls import Assessment, OperatorRelease, UndrainResult
from keeper.domain.reclaim.evidence import Release, ReleaseTally
from keeper.domain.reclaim.models import Decision, Frozen, Holding
from keeper.domain.reclaim.steps import Mode, Outcome, Step

# The actions a run keeps (newest last); the details show the last half of them.
MAX_ACTIONS = 8
KEPT_ACTIONS = MAX_ACTIONS * 2


class Drain(StrEnum):
    """keeper's drain of the holding's node, as far as this run chain knows."""

    NONE = "none"
    # Asked for: the call may have drained the node even if its answer never came back.
    ASKED = "asked"
    MADE = "made"


class ReclaimState(Frozen):
    holding: Holding
    step: Step = Step.ASSESS
    mode: Mode = Mode.OBSERVE
    # Tries of the escalation spent (domain/reclaim/steps.py).
    attempts: int = 0
    # What keeper did (act) or would have done (observe), newest last, bounded.
    actions: tuple[str, ...] = ()
    tally: ReleaseTally = Field(default_factory=ReleaseTally)
    # The last fresh read of the controller, decided.
    last: Assessment | None = None
    # Cancels that may have reached the agent (keeper's send ledger, answers lost to a crash
    # included); None until the first cancel call answered.
    cancels_sent: int | None = None
    drain: Drain = Drain.NONE
    # What an operator must do, when keeper cannot finish on its own.
    attention: str = ""
    # An operator vouched that the agent let go (`keeper reclaim release`).
    operator: OperatorRelease | None = None
    # keeper's memory showed the agent let go when an activity read it (the intake folds
    # every heartbeat in, whether or not this run heard): as good as a signal's evidence.
    remembered: Release | None = None
    # How the reclaim ends, once decided, and the evidence that released it.
    outcome: Outcome | None = None
    release: Release | None = None
    # The answer of the lift of keeper's drain at the end (None: there was none to lift).
    lifted: UndrainResult | None = None
    # The run closed its holding in keeper's memory: nothing is left to do.
    closed: bool = False


class JobReclaimInput(Frozen):
    holding: Holding
    # The intake's verdict that started it; the workflow re-reads before acting on it.
    first: Decision
    # The state the previous run of the chain handed over (continue-as-new).
    carry: ReclaimState | None = None


class JobReclaimResult(Frozen):
    outcome: Outcome
    holding: Holding
    attempts: int
    # Whether keeper's drain was on the node at the end, and whether lifting it resumed the
    # node (another drain may keep it drained).
    drained: bool
    undrained: bool
    mode: Mode
    last: Assessment | None = None
    detail: str = ""
