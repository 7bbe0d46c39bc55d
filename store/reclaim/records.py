"""What the reclaim memory hands back besides the domain's own models."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class AgentNode(BaseModel):
    """A node keeper knows, as its agent last registered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Canonical (domain/reclaim/identity.py).
    node_id: str
    # As the agent reports it: spur's own name for the node, used on the wire.
    hostname: str
    address: str
    port: int
    # The agent's start time, as the controller lists it (slurmd_start_time).
    boot: str
    registered_at: datetime
    last_beat_at: datetime | None = None


class DrainRecord(BaseModel):
    """A drain keeper made on a node for one reclaim workflow."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str
    workflow_id: str
    reason: str
    drained_at: datetime
    cleared_at: datetime | None = None


class CancelSend(BaseModel):
    """One agent cancel keeper claimed (and then sent, unless the sender died in between)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    send_key: str
    signal: int
    claimed_at: datetime
    # delivered | timed-out | not-delivered; None while unknown (the answer was lost).
    answer: str | None = None
