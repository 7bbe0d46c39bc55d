"""The worker's TPU settings, as the workflows read them: the `tpu.policy` local activity,
called once at the start of each run (never carried in a workflow's input)."""

from __future__ import annotations

from temporalio import activity

from keeper.domain.tpu.models import TpuPolicy


class PolicyActivities:
    def __init__(self, policy: TpuPolicy) -> None:
        self._policy = policy

    @activity.defn(name="tpu.policy")
    async def policy(self) -> TpuPolicy:
        return self._policy
