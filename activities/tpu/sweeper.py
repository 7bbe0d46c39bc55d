"""Finds labelled TPU resources and the state of the workflow run that owns each.

One pass makes one visibility query for every bootstrap and teardown keeper has run. It
yields both the owners' states and the locations to look in: each bootstrap's zone (the
Zone search attribute) and project (its memo). Owners the listing does not show yet
(visibility lags a fresh close by a moment) are described one by one. A location or an
owner that cannot be read is reported, and the pass goes on with the rest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from google.api_core import exceptions as gexc
from temporalio import activity
from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError, RPCStatusCode

from keeper.activities.tpu.cloud import TpuActivities
from keeper.domain.tpu.models import (
    OwnedResource,
    SweepCandidate,
    SweepLocation,
    SweepRequest,
    SweepSurvey,
)
from keeper.domain.tpu.naming import (
    BOOTSTRAP_WORKFLOW_TYPE,
    PROJECT_MEMO,
    TEARDOWN_WORKFLOW_TYPE,
    slice_from_owner,
    teardown_workflow_id,
)
from keeper.domain.tpu.sweep import OWNER_NOT_FOUND, counts_as_release
from keeper.runtime.tpu import search_attributes as sa

log = logging.getLogger("keeper.sweeper")
MAX_ERRORS_REPORTED = 50


@dataclass(frozen=True)
class _Run:
    workflow_id: str
    run_id: str
    status: str
    started_at: datetime
    closed_at: datetime | None
    first_run_id: str


@dataclass
class _Owners:
    """What the pass's one listing says about keeper's slice workflows."""

    bootstraps: dict[str, _Run] = field(default_factory=dict)  # by run id
    teardowns: dict[str, list[_Run]] = field(default_factory=dict)  # by workflow id
    locations: set[SweepLocation] = field(default_factory=set)
    listed: bool = False


def _run_of(execution: WorkflowExecution) -> _Run:
    return _Run(
        workflow_id=execution.id,
        run_id=execution.run_id,
        status=execution.status.name if execution.status else "RUNNING",
        started_at=execution.start_time,
        closed_at=execution.close_time,
        first_run_id=execution.raw_info.first_run_id or execution.run_id,
    )


class SweeperActivities:
    def __init__(self, tpu: TpuActivities, temporal: Client) -> None:
        self._tpu = tpu
        self._temporal = temporal

    # -- the pass ------------------------------------------------------------------------

    @activity.defn(name="tpu.survey_owned_resources")
    async def survey_owned_resources(self, req: SweepRequest) -> SweepSurvey:
        errors: list[str] = []
        owners = _Owners()
        try:
            owners = await self._list_owners(req.project)
        except RPCError as err:
            errors.append(f"listing keeper's workflows: {err.message}; owners described one by one")
        locations = sorted(
            owners.locations | {SweepLocation(project=req.project, zone=req.zone)},
            key=str,
        )
        candidates: list[SweepCandidate] = []
        for location in locations:
            activity.heartbeat(f"listing {location}")
            try:
                owned = await self._tpu.list_owned(location.project, location.zone)
            except gexc.GoogleAPICallError as err:
                errors.append(f"listing {location}: {type(err).__name__}: {err.message}")
                continue
            for resource in owned:
                try:
                    candidates.append(await self._candidate(resource, location, owners))
                except RPCError as err:
                    errors.append(f"owner of {resource.name}: {err.message}")
        for line in errors:
            log.warning("sweep: %s; the next pass tries again", line)
        return SweepSurvey(
            locations=locations,
            candidates=candidates,
            errors=errors[:MAX_ERRORS_REPORTED],
        )

    async def _list_owners(self, default_project: str) -> _Owners:
        owners = _Owners(listed=True)
        query = (
            f'WorkflowType = "{BOOTSTRAP_WORKFLOW_TYPE}" '
            f'OR WorkflowType = "{TEARDOWN_WORKFLOW_TYPE}"'
        )
        async for execution in self._temporal.list_workflows(query):
            run = _run_of(execution)
            if execution.workflow_type == TEARDOWN_WORKFLOW_TYPE:
                owners.teardowns.setdefault(run.workflow_id, []).append(run)
                continue
            owners.bootstraps[run.run_id] = run
            zone = execution.typed_search_attributes.get(sa.ZONE)
            if zone:
                # Started without the memo (`temporal workflow start`) and not yet past its
                # first task, which records it: the configured project.
                project = await execution.memo_value(PROJECT_MEMO, default_project)
                owners.locations.add(SweepLocation(project=str(project), zone=zone))
        return owners

    # -- one resource --------------------------------------------------------------------

    async def _candidate(
        self, resource: OwnedResource, location: SweepLocation, owners: _Owners
    ) -> SweepCandidate:
        owner = await self._owner_run(resource, owners)
        teardown = self._release_of(resource, owner, owners)
        return SweepCandidate(
            resource=resource,
            owner_status=owner.status if owner else OWNER_NOT_FOUND,
            project=location.project,
            zone=location.zone,
            owner_closed_at=owner.closed_at if owner else None,
            teardown_status=teardown.status if teardown else None,
        )

    async def _owner_run(self, resource: OwnedResource, owners: _Owners) -> _Run | None:
        """The owning run, or the latest run of its chain when it continued as new."""
        if not resource.owner_workflow_id:
            return None
        run = owners.bootstraps.get(resource.owner_run_id or "")
        if run is None:
            run = await self._describe(resource.owner_workflow_id, resource.owner_run_id)
        if run is None or run.status != "CONTINUED_AS_NEW":
            return run
        chain = [r for r in owners.bootstraps.values() if r.first_run_id == run.run_id]
        if not chain:
            latest = await self._describe(resource.owner_workflow_id, None)
            chain = [latest] if latest and latest.first_run_id == run.run_id else []
        return max(chain, key=lambda r: r.started_at) if chain else run

    async def _describe(self, workflow_id: str, run_id: str | None) -> _Run | None:
        try:
            description = await self._temporal.get_workflow_handle(
                workflow_id, run_id=run_id
            ).describe()
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        return _run_of(description)

    @staticmethod
    def _release_of(resource: OwnedResource, owner: _Run | None, owners: _Owners) -> _Run | None:
        """The latest teardown of the owner's slice that started after the owner closed."""
        slice_name = slice_from_owner(resource.owner_workflow_id)
        if owner is None or slice_name is None:
            return None
        releases = [
            run
            for run in owners.teardowns.get(teardown_workflow_id(slice_name), [])
            if counts_as_release(owner.closed_at, run.started_at)
        ]
        return max(releases, key=lambda r: r.started_at) if releases else None
