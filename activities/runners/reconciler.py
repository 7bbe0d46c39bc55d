"""The reconciler's pass: list the store, GitHub and the provider, count mismatches across
passes, and act on those seen twice. One bad record, scope or pool never aborts the pass."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import timedelta

from temporalio import activity
from temporalio.client import Client

from keeper.activities.runners import metrics
from keeper.domain.runners.github import GitHubRunner, GitHubScope
from keeper.domain.runners.models import (
    DELETION_WORKFLOW_TYPE,
    DeletionRequest,
    Requester,
    deletion_workflow_id,
)
from keeper.domain.runners.provider import ProviderInstance
from keeper.domain.runners.reconcile import (
    CONFIRMING_PASSES,
    Mismatch,
    MismatchKind,
    ReconcileReport,
    ReconcileRequest,
    find_mismatches,
)
from keeper.domain.runners.record_check import shown, what_to_do
from keeper.domain.runners.status import InstanceStatus, on_lane
from keeper.runtime.runners.garm_provider import ExternalProvider
from keeper.runtime.runners.github_client import GitHubClient
from keeper.runtime.runners.instance_lease import InstanceLeases, LeaseHeld, held_by
from keeper.runtime.runners.requests import request_deletion
from keeper.store import RunnerStore

log = logging.getLogger("keeper.reconciler")
MAX_ERRORS_REPORTED = 50


class ReconcilerActivities:
    def __init__(
        self,
        store: RunnerStore,
        github: GitHubClient,
        provider: ExternalProvider,
        client: Client,
        leases: InstanceLeases | None = None,
    ) -> None:
        self._store = store
        self._github = github
        self._provider = provider
        self._client = client
        self._leases = leases

    @activity.defn(name="runners.reconcile_pass")
    async def reconcile_pass(self, request: ReconcileRequest) -> ReconcileReport:
        errors: list[str] = []
        found = await asyncio.to_thread(self._store.scan, include_deleted=True)
        records = found.records
        metrics.lane_records(records)
        # Reported, not counted against max_actions: a bad row must not starve the others.
        skipped = [
            f"record {shown(bad.name)} skipped: {'; '.join(bad.problems)}; {what_to_do(bad.name)}"
            for bad in found.bad
        ]

        registrations: dict[str, list[GitHubRunner]] = {}
        for text in request.scopes:
            activity.heartbeat(f"listing registrations in {text}")
            try:
                scope = GitHubScope.parse(text)
                registrations[str(scope)] = await self._github.list_runners(scope)
            except Exception as err:  # one scope failing must not hide the others
                errors.append(f"list registrations in {text}: {err}")

        instances: dict[str, list[ProviderInstance]] = {}
        # Pools of leaks too: a leak outlives its runner's tombstone.
        leaks = await asyncio.to_thread(self._store.leaks)
        pools = sorted(
            {r.scale_set for r in records} | {leak.scale_set for leak in leaks} | set(request.pools)
        )
        for pool in pools:
            activity.heartbeat(f"listing pool {pool}")
            try:
                instances[pool] = await self._provider.list_instances(
                    pool, timeout_s=request.provider_timeout_s
                )
            except Exception as err:
                errors.append(f"list instances in pool {pool}: {err}")
        activity.heartbeat("listed")

        lane = [
            r.name
            for r in records
            if on_lane(r.instance_status) and r.instance_status is not InstanceStatus.DELETED
        ]
        try:
            owned = await self._running_deletions(lane)
        except Exception as err:
            owned = lane  # unknown: leave them be this pass
            errors.append(f"list running deletions: {err}")

        mismatches = find_mismatches(
            records,
            registrations,
            instances,
            managed_label=request.managed_label,
            lane_owned=owned,
        )
        # A bad row is still somebody's runner: its registration and instance are no orphans.
        bad_names = {bad.name for bad in found.bad}
        bad_ids = {bad.provider_id for bad in found.bad if bad.provider_id}
        mismatches = [
            m for m in mismatches if m.runner not in bad_names and m.provider_id not in bad_ids
        ]
        seen = Counter(m.kind.value for m in mismatches)
        confirmed: Counter[str] = Counter()
        acted: list[str] = []
        for kind in MismatchKind:
            of_kind = [m for m in mismatches if m.kind is kind]
            passes = await asyncio.to_thread(
                self._store.mark_pass, kind.value, [m.key for m in of_kind]
            )
            for mismatch in of_kind:
                if passes.get(mismatch.key, 0) < CONFIRMING_PASSES:
                    continue
                confirmed[kind.value] += 1
                if len(acted) + len(errors) >= request.max_actions:
                    continue  # confirmed still; the next pass acts on it
                activity.heartbeat(f"acting on {kind.value} {mismatch.key}")
                try:
                    done = await self._act(mismatch, request)
                except Exception as err:
                    errors.append(f"{kind.value} {mismatch.key}: {err}")
                    continue
                acted.append(f"{kind.value} {mismatch.key}: {done}")
                await asyncio.to_thread(self._store.clear_mark, kind.value, mismatch.key)
                activity.heartbeat(f"acted on {len(acted)}")

        purged = 0
        try:
            purged = await asyncio.to_thread(
                self._store.purge_tombstones, timedelta(seconds=request.tombstone_retention_s)
            )
        except Exception as err:
            errors.append(f"purge tombstones: {err}")
        for line in acted:
            log.info("reconciler: %s", line)
        return ReconcileReport(
            seen=dict(seen),
            confirmed=dict(confirmed),
            acted=acted,
            errors=[*errors, *skipped][:MAX_ERRORS_REPORTED],
            purged_tombstones=purged,
        )

    async def _running_deletions(self, lane: list[str]) -> list[str]:
        """The lane records whose deletion workflow runs: one visibility query for the
        pass rather than a describe per record. Visibility may lag a fresh start by a
        moment, which the second confirming pass absorbs."""
        if not lane:
            return []
        running = {
            execution.id
            async for execution in self._client.list_workflows(
                f'WorkflowType = "{DELETION_WORKFLOW_TYPE}" AND ExecutionStatus = "Running"'
            )
        }
        return [name for name in lane if deletion_workflow_id(name) in running]

    async def _act(self, mismatch: Mismatch, request: ReconcileRequest) -> str:
        if mismatch.kind is MismatchKind.REGISTRATION:
            assert mismatch.scope is not None and mismatch.github_runner_id is not None
            answer = await self._github.remove_runner(
                GitHubScope.parse(mismatch.scope), mismatch.github_runner_id
            )
            if not answer.done:
                raise RuntimeError(f"GitHub answered {answer.message}")
            return f"registration removed ({answer.message})"
        if mismatch.kind is MismatchKind.INSTANCE:
            assert mismatch.pool is not None and mismatch.provider_id is not None
            # A leak is often what a forced deletion gave up on, whose last attempt may still
            # run on a host that was lost: never a second process beside it.
            lease = held_by(
                self._leases,
                mismatch.provider_id,
                runs_for=timedelta(seconds=request.provider_timeout_s),
                what=f"{activity.info().workflow_id} reconcile pass",
            )
            try:
                async with lease:
                    answer = await self._provider.delete_instance(
                        mismatch.provider_id,
                        mismatch.pool,
                        timeout_s=request.provider_timeout_s,
                        on_tick=lambda elapsed: activity.heartbeat(
                            f"provider delete {elapsed:.0f}s"
                        ),
                    )
            except LeaseHeld as held:
                raise RuntimeError(f"{held}; the next pass tries again") from None
            if not answer.gone:
                raise RuntimeError(f"provider answered {answer.outcome}: {answer.message}")
            await asyncio.to_thread(self._store.resolve_leak, mismatch.provider_id)
            return f"instance deleted ({answer.outcome})"
        # A refusal or no answer raises: reported in the pass, and the next pass asks again.
        requested = await request_deletion(
            self._client,
            mismatch.runner,
            DeletionRequest(requested_by=Requester.RECONCILER, reason=mismatch.detail),
            task_queue=request.task_queue,
        )
        joined = " (joined the running one)" if requested.answer.joined else ""
        return f"deletion requested ({requested.handle.id}){joined}"
