"""What the JobReclaim workflow and its activities pass each other, and what an operator's
release Update carries (the run's input, state and result: domain/reclaim/state.py).

Nothing here carries a secret: the agents' and controller's token stays in the worker.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from keeper.domain.reclaim.evidence import Release
from keeper.domain.reclaim.models import Decision, Frozen, Holding
from keeper.domain.reclaim.steps import Mode, Outcome


class NodeView(Frozen):
    """The holding's node as the controller lists it."""

    name: str = ""
    state: str = ""
    reason: str = ""
    # The node carries a drain keeper made (its reason is keeper's).
    drained_by_keeper: bool = False


class Assessment(Frozen):
    """A fresh read of the controller, decided: what the next step acts on."""

    decision: Decision
    mode: Mode
    node: NodeView = Field(default_factory=NodeView)
    read_at: datetime
    # When a heartbeat last listed the holding, as keeper's memory had it at the read.
    listed_at: datetime | None = None
    # The agent already let go, by the evidence the intake folded into keeper's memory
    # (the workflow may not have been told yet: signals lost, or it was not running).
    released: Release | None = None


class AssessCall(Frozen):
    holding: Holding
    workflow_id: str


class CancelCall(Frozen):
    holding: Holding
    signal: int
    attempt: int


class CancelResult(Frozen):
    # The agent answered; it always answers Empty, so this says the cancel arrived, not what
    # it did (the heartbeats say that).
    delivered: bool
    # Why not, for the operator (a timeout may still have acted).
    error: str = ""
    agent: str = ""
    # The call went out (delivered, or timed out and so perhaps acted on).
    sent: bool = False
    # The fresh decision the call acted on.
    decision: Decision
    # Every cancel claimed for this holding so far, this one included: what may have reached
    # the agent, answers lost to a crash counted.
    cancels_sent: int
    # Not sent because keeper's memory shows the agent already let go.
    released: Release | None = None
    # Not tried, by decision (a fresh read not `reclaim`, observe mode, the agent's word
    # pending): no try of the escalation is spent. An unreachable or unknown agent is a try.
    skipped: bool


class DrainCall(Frozen):
    holding: Holding
    workflow_id: str
    reason: str
    # The run chain (its first run's id): once that chain lifted its drain, a drain call of
    # the same chain still on its way never leaves the node drained.
    chain: str


class DrainResult(Frozen):
    node: str
    actual_state: str
    # False: a fresh read in the same call no longer found the holding stale (`decision`
    # says why), so nothing was drained and no operator is told to free anything.
    drained: bool = True
    decision: Decision


class UndrainCall(Frozen):
    holding: Holding
    workflow_id: str
    # As DrainCall.chain: the undrain fences that chain's drains off the node. Empty for the
    # lift a drain call makes of its own earlier try: the run goes on, so no fence.
    chain: str = ""


class UndrainResult(Frozen):
    # The node was resumed; false when another drain (keeper's for another holding, or
    # anyone else's) keeps it drained.
    resumed: bool
    why: str


class CloseCall(Frozen):
    holding: Holding
    workflow_id: str
    outcome: Outcome
    # What released it, and whether keeper's last verdict on it was quarantine: together
    # they say whether the holding keeps its fence for a later listing.
    release: Release | None = None
    fenced: bool = False


class OperatorRelease(Frozen):
    """`keeper reclaim release`: an operator vouches that the agent no longer holds the job."""

    by: str = Field(default="operator", max_length=200)
    reason: str = Field(default="", max_length=500)
