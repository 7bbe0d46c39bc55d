"""`watch.policy`: the worker's watch settings, as each run reads them once, at its start.

A local activity (no task of its own on the queue): a run started by hand (`temporal workflow
start`) follows the deployment's settings too, and a settings change reaches a long watch at
its next continue-as-new.
"""

from __future__ import annotations

from temporalio import activity

from keeper.domain.watch.policy import WatchPolicy


class WatchPolicySource:
    def __init__(self, policy: WatchPolicy) -> None:
        self._policy = policy

    @activity.defn(name="watch.policy")
    async def policy(self) -> WatchPolicy:
        return self._policy
