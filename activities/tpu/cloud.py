"""Thin adapters between the bootstrap workflows and the Cloud TPU API.

Each method makes a bounded number of calls with an explicit timeout, and leaves waiting and
deadlines to Temporal: a poll that sees no progress raises keeper's benign wait
(runtime/waiting.py), which the RetryPolicy turns into the next poll; that keeps history flat
however long the wait.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import tpu_v2
from temporalio import activity
from temporalio.exceptions import ApplicationError

from keeper.activities.tpu.gcp_errors import RateLimitTracker, deletion_error, to_application_error
from keeper.activities.tpu.zone_lister import ListedQr, ZoneLister, ZoneListing
from keeper.domain.tpu import naming
from keeper.domain.tpu.models import (
    CreateOutcome,
    CreateSliceInput,
    DeleteSliceInput,
    DeletionReport,
    ObserveInput,
    OwnedResource,
    SliceRef,
)
from keeper.domain.tpu.observation import NodeView, SliceObservation, progress_key
from keeper.domain.tpu.phases import waiting_for
from keeper.domain.tpu.qr_state import GONE
from keeper.domain.tpu.slice_request import Capacity, SliceRequest
from keeper.runtime.tracing import tracer
from keeper.runtime.waiting import waiting

# A delete is confirmed by reading NotFound; we look quickly at first, then every few seconds.
CONFIRM_FIRST_INTERVAL = 0.1
CONFIRM_MAX_INTERVAL = 3.0
# A resource still there this long after our delete ends the attempt with an error that
# says so; the next attempt sends the delete again (a delete operation can fail on the
# cloud side without the resource ever leaving DELETING).
REDELETE_AFTER = 60.0
STILL_EXISTS = "StillExists"
# The create's refusal when the name holds another run's resource: the bootstrap fails
# without compensating, so it never touches that resource.
SLICE_NAME_TAKEN = "SliceNameTaken"
# The heartbeat detail of delete_slice that names the resources it sent a delete for, so a
# retry that finds them gone knows this compensation deleted them (an attempt killed after
# its delete went out would otherwise be reported as "already gone").
DELETES_SENT = "deletes_sent"
HEALTH_PORT_METADATA = "keeper-health-port"
HEALTH_PATH_METADATA = "keeper-health-path"
# Asked of each ListQueuedResources page; the server may return fewer (it caps the size).
LIST_PAGE_SIZE = 1000


def _delete_request_id() -> str:
    """The request id of the one delete an attempt sends.

    The API keeps a request id as an idempotency key and answers a repeat with the first
    request's operation, long finished. So an id is never reused: it is derived from the
    compensating run, the activity and its attempt. A new bootstrap of the same slice name
    and a new attempt (which sends the delete again) both differ.
    """
    info = activity.info()
    return str(
        uuid.uuid5(
            uuid.NAMESPACE_URL, f"keeper:{info.workflow_run_id}/{info.activity_id}/{info.attempt}"
        )
    )


def _deletes_sent_earlier() -> frozenset[str]:
    """What earlier attempts of this delete_slice sent a delete for, from the last heartbeat
    they got through (the first heartbeat after a delete goes out at once)."""
    for detail in activity.info().heartbeat_details:
        if isinstance(detail, dict) and isinstance(detail.get(DELETES_SENT), list):
            return frozenset(str(name) for name in detail[DELETES_SENT])
    return frozenset()


def credit_earlier_attempts(report: DeletionReport, earlier: frozenset[str]) -> DeletionReport:
    """A resource an earlier attempt sent the delete for and this one found gone was deleted
    by this compensation: deleted (by an earlier attempt), not "already gone"."""
    found_gone = [name for name in report.already_gone if name in earlier]
    if not found_gone:
        return report
    return report.model_copy(
        update={
            "deleted": [*report.deleted, *found_gone],
            "already_gone": [n for n in report.already_gone if n not in earlier],
            "deleted_earlier": [*report.deleted_earlier, *found_gone],
        }
    )


def _labels_of_qr(qr: tpu_v2.QueuedResource) -> dict[str, str]:
    specs = qr.tpu.node_spec
    return dict(specs[0].node.labels) if specs else {}


def _owned_by(labels: dict[str, str], workflow_id: str, run_id: str | None) -> bool:
    if labels.get(naming.LABEL_OWNER) != workflow_id:
        return False
    return run_id is None or labels.get(naming.LABEL_RUN) == run_id


def build_node(request: SliceRequest, labels: dict[str, str]) -> tpu_v2.Node:
    return tpu_v2.Node(
        accelerator_type=request.accelerator_type,
        runtime_version=request.runtime_version,
        labels={**request.labels, **labels},
        metadata={
            HEALTH_PORT_METADATA: str(request.health_port),
            HEALTH_PATH_METADATA: request.health_path,
        },
        scheduling_config=tpu_v2.SchedulingConfig(
            preemptible=request.capacity is Capacity.PREEMPTIBLE
        ),
    )


def build_queued_resource(
    request: SliceRequest, labels: dict[str, str], valid_until: timedelta
) -> tpu_v2.QueuedResource:
    spec = tpu_v2.QueuedResource.Tpu.NodeSpec(
        parent=naming.parent(request.project, request.zone),
        node=build_node(request, labels),
    )
    if request.node_count == 1:
        spec.node_id = request.slice_name
    else:
        spec.multislice_params = tpu_v2.QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_count=request.node_count, node_id_prefix=request.slice_name
        )
    qr = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]),
        queueing_policy=tpu_v2.QueuedResource.QueueingPolicy(valid_until_duration=valid_until),
    )
    if request.capacity is Capacity.RESERVED:
        qr.reservation_name = (
            f"{naming.parent(request.project, request.zone)}/reservations/"
            f"{request.reservation_name}"
        )
    elif request.capacity is Capacity.SPOT:
        qr.spot = tpu_v2.QueuedResource.Spot()
    elif request.capacity is Capacity.GUARANTEED:
        qr.guaranteed = tpu_v2.QueuedResource.Guaranteed(
            min_duration=request.guaranteed_min_duration
        )
    return qr


def _listed(qr: tpu_v2.QueuedResource) -> ListedQr:
    return ListedQr(state=qr.state.state.name, error=qr.state.failed_data.error.message or None)


def _freshness() -> tuple[float, float]:
    """(now, max_age) for the zone lister: the attempt's start in server time, and the poll
    interval its retry policy repeats it at. A server that does not hand the activity its
    retry policy (the time-skipping test server) gets 0: only lists started no earlier than
    this attempt serve it."""
    info = activity.info()
    policy = info.retry_policy
    interval = policy.initial_interval if policy and policy.initial_interval else None
    return info.started_time.timestamp(), interval.total_seconds() if interval else 0.0


def _node_view(node_id: str, node: tpu_v2.Node | None) -> NodeView:
    if node is None:
        return NodeView(node_id=node_id, state=GONE)
    return NodeView(
        node_id=node_id,
        state=node.state.name,
        ips=[ep.ip_address or None for ep in node.network_endpoints],
    )


class TpuActivities:
    """Cloud TPU calls for one project's bootstraps, teardowns and sweeps."""

    def __init__(
        self,
        client: tpu_v2.TpuAsyncClient,
        call_timeout: timedelta = timedelta(seconds=30),
        max_backoff: timedelta = timedelta(minutes=5),
    ) -> None:
        self._client = client
        self._timeout = call_timeout.total_seconds()
        self._rate_limits = RateLimitTracker(timedelta(seconds=5), max_backoff)
        # One per worker process: every bootstrap waiting in a zone shares its lists.
        self._qr_lister = ZoneLister(self._list_zone_qrs)

    # -- reads ---------------------------------------------------------------------------

    async def _get_qr(self, name: str) -> tpu_v2.QueuedResource | None:
        with tracer().start_as_current_span("tpu.GetQueuedResource", attributes={"name": name}):
            try:
                return await self._client.get_queued_resource(name=name, timeout=self._timeout)
            except gexc.NotFound:
                return None

    async def _get_node(self, name: str) -> tpu_v2.Node | None:
        with tracer().start_as_current_span("tpu.GetNode", attributes={"name": name}):
            try:
                return await self._client.get_node(name=name, timeout=self._timeout)
            except gexc.NotFound:
                return None

    async def _list_zone_qrs(self, parent: str) -> ZoneListing:
        """Every queued resource in a zone, every page of it."""
        with tracer().start_as_current_span(
            "tpu.ListQueuedResources", attributes={"parent": parent}
        ):
            pager = await self._client.list_queued_resources(
                request=tpu_v2.ListQueuedResourcesRequest(parent=parent, page_size=LIST_PAGE_SIZE),
                timeout=self._timeout,
            )
            return {qr.name.rsplit("/", 1)[-1]: _listed(qr) async for qr in pager}

    async def _read_qr(self, ref: SliceRef, now: float, max_age: float) -> ListedQr:
        """The QR from a fresh list of its zone, or else from a Get of its own (the only
        read that may find it gone)."""
        parent = naming.parent(ref.project, ref.zone)
        listed = await self._qr_lister.find(parent, ref.slice_name, now, max_age)
        if listed is not None:
            return listed
        qr = await self._get_qr(naming.queued_resource_name(ref.project, ref.zone, ref.slice_name))
        return ListedQr(state=GONE, error=None) if qr is None else _listed(qr)

    async def _observe(
        self, ref: SliceRef, expected_vms: int, now: float, max_age: float
    ) -> SliceObservation:
        qr_state: str | None = None
        qr_error: str | None = None
        fetch_nodes = not ref.queued
        if ref.queued:
            # Nodes are read only once the QR is ACTIVE: a slice waiting for assignment
            # costs its share of one zone list and nothing else.
            qr = await self._read_qr(ref, now, max_age)
            qr_state, qr_error = qr.state, qr.error
            fetch_nodes = qr_state == "ACTIVE"
        nodes: list[NodeView] = []
        if fetch_nodes:
            names = [naming.node_name(ref.project, ref.zone, n) for n in ref.node_ids]
            found = await asyncio.gather(*(self._get_node(n) for n in names))
            nodes = [_node_view(i, n) for i, n in zip(ref.node_ids, found, strict=True)]
        return SliceObservation(
            qr_state=qr_state,
            qr_error=qr_error,
            nodes=nodes,
            expected_nodes=len(ref.node_ids),
            expected_vms=expected_vms,
        )

    @activity.defn(name="tpu.observe_slice")
    async def observe_slice(self, inp: ObserveInput) -> SliceObservation:
        """Returns as soon as progress moved past `last_key`; otherwise asks to be retried."""
        info = activity.info()
        key = f"{info.workflow_run_id}/{info.activity_id}"
        try:
            obs = await self._observe(inp.slice, inp.expected_vms, *_freshness())
        except gexc.GoogleAPICallError as err:
            base = info.retry_policy.initial_interval if info.retry_policy else None
            delay = self._rate_limits.next_delay(key, base)
            action = f"reading slice {inp.slice.slice_name}"
            raise to_application_error(err, action, delay) from None
        self._rate_limits.clear(key)
        if progress_key(obs) == inp.last_key and not inp.final:
            raise waiting(
                waiting_for(inp.phase),
                seen=f"QR {obs.qr_state or '-'}, {obs.vms_with_ip}/{obs.expected_vms} VMs with IP",
            )
        return obs

    # -- create --------------------------------------------------------------------------

    @activity.defn(name="tpu.create_slice")
    async def create_slice(self, inp: CreateSliceInput) -> CreateOutcome:
        """Creates the QR (queued capacity) or the node (on-demand/preemptible).

        The id and request id are fixed by the workflow before this runs, so a retry after a
        lost reply finds our own resource instead of making a second one.
        """
        request = inp.request
        labels = naming.owner_labels(inp.owner.workflow_id, inp.owner.run_id)
        parent = naming.parent(request.project, request.zone)
        try:
            with tracer().start_as_current_span(
                "tpu.Create", attributes={"slice": request.slice_name}
            ):
                if request.capacity.queued:
                    name = naming.queued_resource_name(
                        request.project, request.zone, request.slice_name
                    )
                    await self._client.create_queued_resource(
                        request=tpu_v2.CreateQueuedResourceRequest(
                            parent=parent,
                            queued_resource_id=request.slice_name,
                            queued_resource=build_queued_resource(request, labels, inp.valid_until),
                            request_id=inp.request_id,
                        ),
                        timeout=self._timeout,
                    )
                else:
                    name = naming.node_name(request.project, request.zone, request.slice_name)
                    # The node create operation finishes only when the node is READY; the
                    # workflow polls for that itself, so the operation is not awaited here.
                    await self._client.create_node(
                        request=tpu_v2.CreateNodeRequest(
                            parent=parent,
                            node_id=request.slice_name,
                            node=build_node(request, labels),
                        ),
                        timeout=self._timeout,
                    )
        except gexc.AlreadyExists:
            return await self._claim_existing(inp, name)
        except gexc.GoogleAPICallError as err:
            raise to_application_error(err, f"creating {name}") from None
        return CreateOutcome(created=True, name=name)

    async def _claim_existing(self, inp: CreateSliceInput, name: str) -> CreateOutcome:
        if inp.request.capacity.queued:
            qr = await self._get_qr(name)
            labels = _labels_of_qr(qr) if qr else {}
        else:
            node = await self._get_node(name)
            labels = dict(node.labels) if node else {}
        if _owned_by(labels, inp.owner.workflow_id, inp.owner.run_id):
            return CreateOutcome(created=False, name=name)
        owner = labels.get(naming.LABEL_OWNER, "someone outside keeper")
        raise ApplicationError(
            f"{name} already exists and belongs to {owner} "
            f"(run {labels.get(naming.LABEL_RUN, '?')}); delete it with `keeper tpu delete` "
            "or choose another slice name",
            type=SLICE_NAME_TAKEN,
            non_retryable=True,
        )

    # -- delete --------------------------------------------------------------------------

    @activity.defn(name="tpu.delete_slice")
    async def delete_slice(self, inp: DeleteSliceInput) -> DeletionReport:
        """Force-deletes what the owner created and returns only once NotFound is confirmed.

        Idempotent: anything already gone counts as deleted. Resources labelled with another
        owner are never touched. An attempt that cannot finish fails with an error saying
        why (a refused call, or a resource still there a minute after the delete), so the
        workflow and the UI see it; every failure is retryable.
        """
        ref = inp.slice
        report = DeletionReport()
        earlier = _deletes_sent_earlier()
        sent = sorted(earlier)  # carried on, so a third attempt still knows
        try:
            if ref.queued:
                qr_name = naming.queued_resource_name(ref.project, ref.zone, ref.slice_name)
                report = await self._delete_qr(qr_name, inp, report, sent)
            for node_id in ref.node_ids:
                node_name = naming.node_name(ref.project, ref.zone, node_id)
                report = await self._delete_node(node_name, inp, report, sent)
        except gexc.GoogleAPICallError as err:
            raise deletion_error(err, f"deleting {ref.slice_name}") from None
        return credit_earlier_attempts(report, earlier)

    async def _delete_qr(
        self, name: str, inp: DeleteSliceInput, report: DeletionReport, sent: list[str]
    ) -> DeletionReport:
        qr = await self._get_qr(name)
        if qr is None:
            return report.model_copy(update={"already_gone": [*report.already_gone, name]})
        if not _owned_by(_labels_of_qr(qr), inp.owner_workflow_id, inp.owner_run_id):
            return report.model_copy(update={"not_ours": [*report.not_ours, name]})
        # Sent even when the QR already shows DELETING: that may be someone else's delete
        # that failed, and a second force delete of a deleting QR is harmless.
        activity.logger.info("deleting %s (force): %s", name, inp.reason)
        if not await self._send_qr_delete(name, _delete_request_id()):
            return report.model_copy(update={"already_gone": [*report.already_gone, name]})
        sent.append(name)
        await self._until_gone(name, self._get_qr, lambda qr: qr.state.state.name, sent)
        return report.model_copy(update={"deleted": [*report.deleted, name]})

    async def _delete_node(
        self, name: str, inp: DeleteSliceInput, report: DeletionReport, sent: list[str]
    ) -> DeletionReport:
        node = await self._get_node(name)
        if node is None:
            if name not in report.already_gone:
                return report.model_copy(update={"already_gone": [*report.already_gone, name]})
            return report
        if not _owned_by(dict(node.labels), inp.owner_workflow_id, inp.owner_run_id):
            return report.model_copy(update={"not_ours": [*report.not_ours, name]})
        if node.state.name != "DELETING":
            activity.logger.info("deleting node %s: %s", name, inp.reason)
            if not await self._send_node_delete(name):
                return report.model_copy(update={"already_gone": [*report.already_gone, name]})
            sent.append(name)
        await self._until_gone(name, self._get_node, lambda node: node.state.name, sent)
        return report.model_copy(update={"deleted": [*report.deleted, name]})

    async def _send_qr_delete(self, name: str, request_id: str) -> bool:
        """Sends a force delete; False when the QR is already gone."""
        try:
            with tracer().start_as_current_span(
                "tpu.DeleteQueuedResource", attributes={"name": name}
            ):
                await self._client.delete_queued_resource(
                    request=tpu_v2.DeleteQueuedResourceRequest(
                        name=name, force=True, request_id=request_id
                    ),
                    timeout=self._timeout,
                )
        except gexc.NotFound:
            return False
        except gexc.FailedPrecondition as err:
            activity.logger.info("delete of %s not accepted yet (%s); waiting", name, err.message)
        return True

    async def _send_node_delete(self, name: str) -> bool:
        try:
            with tracer().start_as_current_span("tpu.DeleteNode", attributes={"name": name}):
                await self._client.delete_node(name=name, timeout=self._timeout)
        except gexc.NotFound:
            return False
        return True

    async def _until_gone(
        self,
        name: str,
        get: Callable[[str], Awaitable[Any | None]],
        state_of: Callable[[Any], str],
        sent: list[str],
    ) -> None:
        # Reading NotFound is the only proof that matters: an operation marked done says
        # nothing about a second resource a retried create may have left behind.
        interval = CONFIRM_FIRST_INTERVAL
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        while True:
            activity.heartbeat(f"waiting for {name} to disappear", {DELETES_SENT: sent})
            found = await get(name)
            if found is None:
                return
            waited = loop.time() - sent_at
            if waited > REDELETE_AFTER:
                short = name.rsplit("/", 1)[-1]
                raise ApplicationError(
                    f"{short} still exists (state {state_of(found)}) {waited:.0f}s after the "
                    "delete; the next attempt sends it again",
                    type=STILL_EXISTS,
                )
            await asyncio.sleep(interval)
            interval = min(interval * 2, CONFIRM_MAX_INTERVAL)

    # -- sweep ---------------------------------------------------------------------------

    async def list_owned(self, project: str, zone: str) -> list[OwnedResource]:
        parent = naming.parent(project, zone)
        owned: list[OwnedResource | None] = []
        qr_pager = await self._client.list_queued_resources(parent=parent, timeout=self._timeout)
        async for qr in qr_pager:
            owned.append(_owned("queued_resource", qr.name, qr.state.state.name, _labels_of_qr(qr)))
        node_pager = await self._client.list_nodes(parent=parent, timeout=self._timeout)
        async for node in node_pager:
            # Nodes of a queued resource go with it; only stand-alone nodes are listed.
            if not node.queued_resource:
                owned.append(_owned("node", node.name, node.state.name, dict(node.labels)))
        return [resource for resource in owned if resource is not None]


def _owned(kind: str, name: str, state: str, labels: dict[str, str]) -> OwnedResource | None:
    """A resource keeper labelled as its own; None for any other."""
    if labels.get(naming.LABEL_MANAGED) != "true":
        return None
    return OwnedResource(
        kind=kind,
        id=name.rsplit("/", 1)[-1],
        name=name,
        state=state,
        owner_workflow_id=labels.get(naming.LABEL_OWNER, ""),
        owner_run_id=labels.get(naming.LABEL_RUN),
    )
