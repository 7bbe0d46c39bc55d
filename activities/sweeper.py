"""Finds labelled TPU resources and the state of the workflow run that owns each."""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.tpu import TpuActivities
from domain.bootstrap_models import SweepCandidate, SweepRequest
from domain.sweep import OWNER_NOT_FOUND


class SweeperActivities:
    def __init__(self, tpu: TpuActivities, temporal: Client) -> None:
        self._tpu = tpu
        self._temporal = temporal

    async def _owner_status(self, workflow_id: str, run_id: str | None) -> str:
        if not workflow_id:
            return OWNER_NOT_FOUND
        try:
            description = await self._temporal.get_workflow_handle(
                workflow_id, run_id=run_id
            ).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return OWNER_NOT_FOUND
            raise
        return description.status.name if description.status else "RUNNING"

    @activity.defn
    async def find_sweep_candidates(self, req: SweepRequest) -> list[SweepCandidate]:
        owned = await self._tpu.list_owned(req.project, req.zone)
        return [
            SweepCandidate(
                resource=resource,
                owner_status=await self._owner_status(
                    resource.owner_workflow_id, resource.owner_run_id
                ),
            )
            for resource in owned
        ]
