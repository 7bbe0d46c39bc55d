"""`watch.policy`: the worker's watch settings, as each run reads them once, at its start
(a local activity: domain/watch/policy.py says why)."""

from __future__ import annotations

from temporalio import activity

from keeper.domain.watch.policy import WatchPolicy


class WatchPolicySource:
    def __init__(self, policy: WatchPolicy) -> None:
        self._policy = policy

    @activity.defn(name="watch.policy")
    async def policy(self) -> WatchPolicy:
        return self._policy
