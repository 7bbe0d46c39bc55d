"""`runners.policy`: the worker's deletion policy (runners.deletion), as each run of a
deletion reads it once, at its start.

A local activity (no task of its own on the queue): a deletion started by hand (`temporal
workflow start`) follows the deployment's settings too, and a settings change reaches a
long deletion (escalated for days, say) at its next continue-as-new.
"""

from __future__ import annotations

from temporalio import activity

from keeper.domain.runners.models import DeletionPolicy


class DeletionPolicySource:
    def __init__(self, policy: DeletionPolicy) -> None:
        self._policy = policy

    @activity.defn(name="runners.policy")
    async def policy(self) -> DeletionPolicy:
        return self._policy
