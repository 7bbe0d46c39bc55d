"""Every rule of a watch that a deployment may tune, as the workflow receives it.

The worker reads them from its settings (`watch:` in temporal-dev.yaml) and each run reads
them once, at its start, through the local activity `watch.policy`: a run started by hand
(`temporal workflow start`) follows the deployment's settings too, and a change applies from
the next run on (a long watch's next continue-as-new).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from keeper.domain.common.durations import HumanDuration
from keeper.domain.watch.cadence import CadencePolicy
from keeper.domain.watch.escalation import EscalationPolicy
from keeper.domain.watch.liveness_models import LivenessPolicy
from keeper.domain.watch.values import Frozen


class WatchPolicy(Frozen):
    cadence: CadencePolicy = Field(default_factory=CadencePolicy)
    liveness: LivenessPolicy = Field(default_factory=LivenessPolicy)
    escalation: EscalationPolicy = Field(default_factory=EscalationPolicy)
    # The delta probe's two reads, this far apart.
    probe_gap: HumanDuration = Field(default=timedelta(seconds=3), gt=timedelta(0))
    history_events_limit: int = Field(default=2000, ge=200, le=40_000)
    # Timeline entries kept (the oldest are dropped and counted).
    timeline_limit: int = Field(default=100, ge=10, le=1000)
