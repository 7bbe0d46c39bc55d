"""The emulated cloud: queued resources, nodes and VMs, and the clock-driven state machine.

Everything here is synchronous and runs on the event loop thread, so an API call observes
and mutates the world atomically. Transitions are computed from timestamps rather than from
timers: `evaluate()` replays every transition that is due by "now", in time order and across
all resources, each stamped with the time it was due. That way advancing the clock by an
hour yields the same history as waiting an hour would have.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.tpu_v2.types import cloud_tpu
from google.rpc import status_pb2

from emulators.clock import Clock, iso, to_datetime
from emulators.tpu import ips
from emulators.tpu.operations import OperationStore, OpRecord
from emulators.tpu.records import DELETED, NodePlan, NodeRecord, QrRecord, VmRecord
from emulators.tpu.scenario import Scenario, ScenarioBook, status_code
from keeper.domain.tpu.topology import vms_per_node

log = logging.getLogger("emulators.tpu")

ID_RE = re.compile(r"^[A-Za-z0-9_.~+%-]+$")
PARENT_RE = re.compile(r"^projects/[^/]+/locations/[^/]+$")
HEALTH_PORT_KEY = "keeper-health-port"
HEALTH_PATH_KEY = "keeper-health-path"

# How long a new queued resource shows CREATING before it is queued.
CREATING_SECONDS = 0.1

WAITING = {"CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"}
# States the emulator never leaves on its own (only a delete moves them on).
STOPPED = {"FAILED", "SUSPENDING", "SUSPENDED", "DELETING"}
# A non-force delete is allowed in these states even while nodes exist.
DELETABLE_WITHOUT_FORCE = {"ACCEPTED", "WAITING_FOR_RESOURCES", "FAILED", "SUSPENDED"}

EXPIRED_MESSAGE = (
    "queued resource expired: valid_until_duration elapsed before capacity was assigned"
)

# States whose QueuedResourceState carries a (empty) `<state>_data` message.
_WITH_DATA = {
    "CREATING",
    "ACCEPTED",
    "PROVISIONING",
    "DELETING",
    "ACTIVE",
    "SUSPENDING",
    "SUSPENDED",
}


class ApiError(Exception):
    """Becomes a gRPC status in the service layer."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> ApiError:
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, message)


@dataclass(order=True)
class _Event:
    due: float
    # Breaks ties at the same instant: removal, then progress, then expiry, then scenarios.
    rank: int
    seq: int
    apply: Callable[[float], None]


class World:
    def __init__(
        self,
        clock: Clock,
        scenarios: ScenarioBook,
        ip_prefix: str,
        vm_health_port: int,
        vm_health_path: str,
    ) -> None:
        self.clock = clock
        self.scenarios = scenarios
        self.ip_prefix = ip_prefix
        self.vm_health_port = vm_health_port
        self.vm_health_path = vm_health_path
        self._node_ids = itertools.count(1_000_001)
        self.clear()

    def clear(self) -> None:
        self.qrs: dict[str, QrRecord] = {}
        self.all_qrs: list[QrRecord] = []
        self.nodes: dict[str, NodeRecord] = {}
        self.all_nodes: list[NodeRecord] = []
        self.ops = OperationStore()
        self.delete_requests: dict[tuple[str, str], OpRecord] = {}
        self.registrations: list[dict[str, Any]] = []
        # Hand-offs to the VM fleet, drained after every evaluation.
        self.vms_to_boot: list[VmRecord] = []
        self.vms_to_stop: list[VmRecord] = []

    # ----------------------------------------------------------------- evaluation

    def evaluate(self) -> float:
        """Applies every transition due by now, earliest first, and returns now.

        The order is the one a full rescan after each transition gives: by due time, then
        rank, then queued resources before nodes, each in insertion order, then the order a
        record lists its own events. Only a record's own transitions, its queued resource's
        or its nodes' change its events, so after each transition only those are computed
        again (a version per record retires the events queued before); a rescan of every
        record per transition made a burst of k transitions among N resources cost k x N."""
        now = self.clock.now()
        # (due, rank, kind, position, seq, version, id, record, event): the first seven
        # never tie, so the record and the event are never compared.
        ready: list[tuple[float, int, int, int, int, int, int, QrRecord | NodeRecord, _Event]] = []
        version: dict[int, int] = {}
        position: dict[int, tuple[int, int]] = {}
        for index, qr in enumerate(self.qrs.values()):
            position[id(qr)] = (0, index)
        for index, node in enumerate(self.nodes.values()):
            position[id(node)] = (1, index)
        next_node = itertools.count(len(self.nodes))

        def schedule(record: QrRecord | NodeRecord) -> None:
            key = id(record)
            stamp = version[key] = version.get(key, 0) + 1
            if isinstance(record, QrRecord):
                if self.qrs.get(record.name) is not record:
                    return  # removed: no longer scanned
                due = self._qr_events(record, itertools.count())
            else:
                if self.nodes.get(record.name) is not record:
                    return
                due = self._node_events(record, itertools.count())
            kind, index = position[key]
            for event in due:
                if event.due <= now:
                    order = (event.due, event.rank, kind, index, event.seq, stamp, key)
                    heapq.heappush(ready, (*order, record, event))

        for record in itertools.chain(list(self.qrs.values()), list(self.nodes.values())):
            schedule(record)
        # Bounded so a scenario bug cannot spin forever; each event moves a resource on.
        for _ in range(100_000):
            while ready and version[ready[0][6]] != ready[0][5]:
                heapq.heappop(ready)
            if not ready:
                break
            *_, key, record, event = heapq.heappop(ready)
            nodes_before = len(self.all_nodes)
            event.apply(event.due)
            touched: dict[int, QrRecord | NodeRecord] = {key: record}
            if isinstance(record, QrRecord):
                touched.update((id(node), node) for node in record.nodes)
            elif record.qr is not None:
                touched[id(record.qr)] = record.qr
            for node in self.all_nodes[nodes_before:]:
                position[id(node)] = (1, next(next_node))
                touched[id(node)] = node
            for other in touched.values():
                schedule(other)
        for record in itertools.chain(self.qrs.values(), self.nodes.values()):
            record.evaluated_until = now
        return now

    def _qr_events(self, qr: QrRecord, seq: Iterable[int]) -> list[_Event]:
        counter = iter(seq)
        events: list[_Event] = []

        def add(due: float, rank: int, apply: Callable[[float], None]) -> None:
            if math.isfinite(due):
                at = max(due, qr.evaluated_until)
                events.append(_Event(due, rank, next(counter), lambda _d: apply(at)))

        if qr.removal_at is not None:
            add(qr.removal_at, 0, lambda at: self._remove_qr(qr, at))
        if qr.state in STOPPED:
            return events
        sc = self.scenarios.get(qr.id)
        assign = math.inf if sc.assign_after is None else qr.created_at + sc.assign_after
        if qr.valid_after is not None:
            assign = max(assign, qr.valid_after)
        if qr.state == "CREATING":
            add(min(qr.created_at + CREATING_SECONDS, assign), 1, lambda at: self._queue(qr, at))
        if qr.state in WAITING:
            add(assign, 2, lambda at: self._provision(qr, at))
            if qr.valid_until is not None:
                add(qr.valid_until, 3, lambda at: self._expire(qr, at))
        if qr.state == "PROVISIONING" and sc.active_after is not None:
            assert qr.provisioning_at is not None
            add(qr.provisioning_at + sc.active_after, 2, lambda at: self._activate(qr, at))
        if sc.terminal is not None and not qr.terminal_applied:
            add(qr.created_at + sc.terminal.after, 4, lambda at: self._force_terminal(qr, at))
        return events

    def _node_events(self, node: NodeRecord, seq: Iterable[int]) -> list[_Event]:
        counter = iter(seq)
        events: list[_Event] = []

        def add(due: float, rank: int, apply: Callable[[float], None]) -> None:
            at = max(due, node.evaluated_until)
            events.append(_Event(due, rank, next(counter), lambda _d: apply(at)))

        if node.removal_at is not None:
            add(node.removal_at, 0, lambda at: self._remove_node(node, at))
        if node.state == "DELETING":
            return events
        sc = self.scenarios.get(node.scenario_key)
        if node.qr is None and node.state == "CREATING" and sc.active_after is not None:
            add(node.created_at + sc.active_after, 2, lambda at: self._node_ready(node, at))
        if node.state == "READY" and node.ips_at is None and sc.ips_after is not None:
            assert node.ready_at is not None
            add(node.ready_at + sc.ips_after, 3, lambda at: self._assign_ips(node, at))
        return events

    # ----------------------------------------------------------------- transitions

    def _qr_move(self, qr: QrRecord, state: str, at: float, initiator: str = "SERVICE") -> None:
        previous = qr.move(state, at)
        qr.initiator = initiator
        log.info("queued resource %s: %s -> %s at %s", qr.id, previous, state, iso(at))
        # A create operation completes once the request has been queued (or ended).
        if previous == "CREATING" and qr.create_op is not None:
            qr.create_op.finish(at, cloud_tpu.QueuedResource.pb(self.qr_pb(qr)))

    def _node_move(self, node: NodeRecord, state: str, at: float) -> None:
        previous = node.move(state, at)
        log.info("node %s: %s -> %s at %s", node.id, previous, state, iso(at))

    def _queue(self, qr: QrRecord, at: float) -> None:
        self._qr_move(qr, "WAITING_FOR_RESOURCES", at)

    def _provision(self, qr: QrRecord, at: float) -> None:
        taken = [plan.id for plan in qr.plan if plan.name in self.nodes]
        if taken:
            self._fail(qr, at, 6, f"node id already in use: {', '.join(taken)}")
            return
        self._qr_move(qr, "PROVISIONING", at)
        qr.provisioning_at = at
        sc = self.scenarios.get(qr.id)
        next_index = 0
        for plan in qr.plan:
            node = self._new_node(plan, at, sc, qr)
            for vm in node.vms:
                vm.index = next_index
                next_index += 1
            qr.nodes.append(node)

    def _activate(self, qr: QrRecord, at: float) -> None:
        self._qr_move(qr, "ACTIVE", at)
        for node in qr.nodes:
            if node.live and node.state == "CREATING":
                self._node_ready(node, at)

    def _expire(self, qr: QrRecord, at: float) -> None:
        self._fail(qr, at, grpc.StatusCode.DEADLINE_EXCEEDED.value[0], EXPIRED_MESSAGE)

    def _fail(self, qr: QrRecord, at: float, code: int, message: str) -> None:
        qr.error_code, qr.error_message = code, message
        self._qr_move(qr, "FAILED", at)

    def _force_terminal(self, qr: QrRecord, at: float) -> None:
        qr.terminal_applied = True
        terminal = self.scenarios.get(qr.id).terminal
        assert terminal is not None
        if terminal.state == "FAILED":
            message = terminal.message or "queued resource failed"
            self._fail(qr, at, status_code(terminal.code), message)
            return
        self._qr_move(qr, terminal.state, at)
        # Suspension and a service-side delete take the capacity away; FAILED and
        # SUSPENDING leave whatever nodes exist for the owner to delete.
        if terminal.state in {"SUSPENDED", "DELETING"}:
            for node in qr.nodes:
                if node.live:
                    self._delete_node_now(node, at)

    def _remove_qr(self, qr: QrRecord, at: float) -> None:
        qr.removal_at = None
        qr.deleted_at = at
        self._qr_move(qr, DELETED, at, qr.initiator)
        del self.qrs[qr.name]
        for op in qr.delete_ops:
            op.finish(at)

    def _node_ready(self, node: NodeRecord, at: float) -> None:
        self._node_move(node, "READY", at)
        node.ready_at = at
        if node.create_op is not None:
            node.create_op.finish(at, cloud_tpu.Node.pb(self.node_pb(node)))

    def _assign_ips(self, node: NodeRecord, at: float) -> None:
        node.ips_at = at
        without_ip = set(self.scenarios.get(node.scenario_key).vms_without_ip)
        for vm in node.vms:
            if vm.index in without_ip:
                continue
            try:
                vm.ip = ips.allocate(self.ip_prefix)
            except ips.AddressesExhausted as exc:
                vm.error = str(exc)
                continue
            vm.ip_assigned_at = at
            self.vms_to_boot.append(vm)
        assigned = sum(1 for vm in node.vms if vm.ip is not None)
        log.info(
            "node %s: %d of %d VM IPs assigned at %s", node.id, assigned, len(node.vms), iso(at)
        )

    def _start_node_delete(self, node: NodeRecord, at: float) -> None:
        self._node_move(node, "DELETING", at)
        for vm in node.vms:
            if vm.stopped_at is None:
                vm.stopped_at = at
                self.vms_to_stop.append(vm)
        if node.create_op is not None and not node.create_op.done:
            node.create_op.fail(
                at, grpc.StatusCode.ABORTED.value[0], "node was deleted before it became ready"
            )

    def _delete_node_now(self, node: NodeRecord, at: float) -> None:
        if node.state != "DELETING":
            self._start_node_delete(node, at)
        self._remove_node(node, at)

    def _remove_node(self, node: NodeRecord, at: float) -> None:
        node.removal_at = None
        node.deleted_at = at
        self._node_move(node, DELETED, at)
        self.nodes.pop(node.name, None)
        for op in node.delete_ops:
            op.finish(at)

    # ----------------------------------------------------------------- nodes

    def _new_node(self, plan: NodePlan, at: float, sc: Scenario, qr: QrRecord | None) -> NodeRecord:
        node = NodeRecord(
            state="CREATING",
            created_at=at,
            evaluated_until=at,
            name=plan.name,
            id=plan.id,
            parent=plan.parent,
            spec=cloud_tpu.Node(plan.spec),
            qr=qr,
            numeric_id=next(self._node_ids),
            multislice=plan.multislice,
        )
        node.move("CREATING", at)
        log.info("node %s: created (CREATING) at %s", plan.id, iso(at))
        port = int(plan.spec.metadata.get(HEALTH_PORT_KEY, self.vm_health_port))
        path = plan.spec.metadata.get(HEALTH_PATH_KEY, self.vm_health_path)
        count = _vm_count(plan.spec, sc)
        node.vms = [VmRecord(node=node, index=i, port=port, health_path=path) for i in range(count)]
        self.nodes[plan.name] = node
        self.all_nodes.append(node)
        return node

    # ----------------------------------------------------------------- API: queued resources

    def create_qr(self, request: cloud_tpu.CreateQueuedResourceRequest) -> OpRecord:
        parent, qr_id = request.parent, request.queued_resource_id
        if not PARENT_RE.match(parent):
            raise _invalid("parent must look like projects/PROJECT/locations/ZONE")
        if not ID_RE.match(qr_id):
            raise _invalid(f"queued_resource_id {qr_id!r} must match {ID_RE.pattern}")
        name = f"{parent}/queuedResources/{qr_id}"
        existing = self.qrs.get(name)
        if existing is not None:
            # Same request id on a live QR: the client is retrying a create that already
            # worked, so it gets the original operation instead of an error.
            if request.request_id and request.request_id == existing.request_id:
                assert existing.create_op is not None
                return existing.create_op
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, f"queued resource {name} already exists")
        sc = self.scenarios.get(qr_id)
        plan = self._plan_nodes(parent, request.queued_resource, sc)
        taken = [p.id for p in plan if p.name in self.nodes]
        if taken:
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, f"node already exists: {taken[0]}")
        now = self.clock.now()
        qr = QrRecord(
            state="CREATING",
            created_at=now,
            evaluated_until=now,
            name=name,
            id=qr_id,
            parent=parent,
            request=cloud_tpu.QueuedResource(request.queued_resource),
            request_id=request.request_id,
            plan=plan,
        )
        qr.valid_after, qr.valid_until = _queueing_window(request.queued_resource, now)
        qr.move("CREATING", now)
        qr.create_op = self.ops.new(parent, "create", name, now)
        qr.create_op.request_id = request.request_id or None
        self.qrs[name] = qr
        self.all_qrs.append(qr)
        log.info("queued resource %s: created (CREATING) at %s", qr_id, iso(now))
        return qr.create_op

    def _plan_nodes(
        self, parent: str, qr: cloud_tpu.QueuedResource, sc: Scenario
    ) -> list[NodePlan]:
        specs = list(qr.tpu.node_spec)
        if not specs:
            raise _invalid("queued_resource.tpu.node_spec must have at least one entry")
        plan: list[NodePlan] = []
        for i, spec in enumerate(specs):
            where = f"queued_resource.tpu.node_spec[{i}]"
            node_parent = spec.parent or parent
            if not PARENT_RE.match(node_parent):
                raise _invalid(f"{where}.parent must look like projects/PROJECT/locations/ZONE")
            if "node" not in spec:
                raise _invalid(f"{where}.node is required")
            _check_node(spec.node, f"{where}.node", sc)
            which = cloud_tpu.QueuedResource.Tpu.NodeSpec.pb(spec).WhichOneof("name_strategy")
            if which == "node_id":
                ids = [spec.node_id]
                multislice = False
            elif which == "multislice_params":
                params = spec.multislice_params
                if params.node_count < 1:
                    raise _invalid(f"{where}.multislice_params.node_count must be >= 1")
                prefix = params.node_id_prefix
                if not prefix:
                    raise _invalid(f"{where}.multislice_params.node_id_prefix is required")
                ids = [f"{prefix}-{n}" for n in range(params.node_count)]
                multislice = True
            else:
                raise _invalid(f"{where} needs node_id or multislice_params")
            for node_id in ids:
                if not ID_RE.match(node_id):
                    raise _invalid(f"{where}: node id {node_id!r} must match {ID_RE.pattern}")
                plan.append(
                    NodePlan(
                        name=f"{node_parent}/nodes/{node_id}",
                        id=node_id,
                        parent=node_parent,
                        spec=cloud_tpu.Node(spec.node),
                        multislice=multislice,
                    )
                )
        names = [p.name for p in plan]
        if len(set(names)) != len(names):
            raise _invalid("queued_resource.tpu.node_spec produces duplicate node ids")
        return plan

    def get_qr(self, name: str) -> QrRecord:
        qr = self.qrs.get(name)
        if qr is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"queued resource {name} not found")
        return qr

    def list_qrs(self, parent: str) -> list[QrRecord]:
        return [qr for qr in self.qrs.values() if _under(qr.parent, parent)]

    def delete_qr(self, name: str, force: bool, request_id: str) -> OpRecord:
        if request_id and (name, request_id) in self.delete_requests:
            return self.delete_requests[(name, request_id)]
        qr = self.get_qr(name)
        now = self.clock.now()
        sc = self.scenarios.get(qr.id)
        op = self.ops.new(qr.parent, "delete", name, now)
        op.request_id = request_id or None
        if qr.state == "DELETING":
            # Already going away; a DELETING forced by a scenario has no end yet, so the
            # user's delete gives it one.
            if qr.removal_at is None:
                qr.removal_at = now + sc.delete_duration
        else:
            live_nodes = [node for node in qr.nodes if node.live]
            if live_nodes and not force and qr.state not in DELETABLE_WITHOUT_FORCE:
                raise ApiError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"queued resource {name} is {qr.state} and has nodes; delete with force",
                )
            self._qr_move(qr, "DELETING", now, initiator="USER")
            # Nodes go first and at once: their VMs stop serving and never phone home.
            for node in live_nodes:
                self._delete_node_now(node, now)
            qr.removal_at = now + sc.delete_duration
        qr.delete_ops.append(op)
        if request_id:
            self.delete_requests[(name, request_id)] = op
        return op

    # ----------------------------------------------------------------- API: nodes

    def create_node(self, request: cloud_tpu.CreateNodeRequest) -> OpRecord:
        parent, node_id = request.parent, request.node_id
        if not PARENT_RE.match(parent):
            raise _invalid("parent must look like projects/PROJECT/locations/ZONE")
        if not ID_RE.match(node_id):
            raise _invalid(f"node_id {node_id!r} must match {ID_RE.pattern}")
        if "node" not in request:
            raise _invalid("node is required")
        sc = self.scenarios.get(node_id)
        _check_node(request.node, "node", sc)
        name = f"{parent}/nodes/{node_id}"
        if name in self.nodes:
            raise ApiError(grpc.StatusCode.ALREADY_EXISTS, f"node {name} already exists")
        now = self.clock.now()
        plan = NodePlan(name, node_id, parent, request.node, multislice=False)
        node = self._new_node(plan, now, sc, None)
        node.create_op = self.ops.new(parent, "create", name, now)
        return node.create_op

    def get_node(self, name: str) -> NodeRecord:
        node = self.nodes.get(name)
        if node is None:
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"node {name} not found")
        return node

    def list_nodes(self, parent: str) -> list[NodeRecord]:
        return [node for node in self.nodes.values() if _under(node.parent, parent)]

    def delete_node(self, name: str) -> OpRecord:
        node = self.get_node(name)
        now = self.clock.now()
        op = self.ops.new(node.parent, "delete", name, now)
        if node.state != "DELETING":
            self._start_node_delete(node, now)
            node.removal_at = now + self.scenarios.get(node.scenario_key).delete_duration
        node.delete_ops.append(op)
        return op

    # ----------------------------------------------------------------- messages

    def qr_pb(self, qr: QrRecord) -> cloud_tpu.QueuedResource:
        msg = cloud_tpu.QueuedResource(qr.request)
        msg.name = qr.name
        msg.create_time = to_datetime(qr.created_at)
        state = qr.state if qr.state != DELETED else "DELETING"
        qr_state = cloud_tpu.QueuedResourceState(
            state=cloud_tpu.QueuedResourceState.State[state],
            state_initiator=cloud_tpu.QueuedResourceState.StateInitiator[qr.initiator],
        )
        if state == "FAILED":
            qr_state.failed_data = cloud_tpu.QueuedResourceState.FailedData(
                error=status_pb2.Status(code=qr.error_code or 0, message=qr.error_message or "")
            )
        elif state in _WITH_DATA:
            data_field = f"{state.lower()}_data"
            data_type = type(getattr(cloud_tpu.QueuedResourceState(), data_field))
            setattr(qr_state, data_field, data_type())
        msg.state = qr_state
        return msg

    def node_pb(self, node: NodeRecord) -> cloud_tpu.Node:
        msg = cloud_tpu.Node(node.spec)
        msg.name = node.name
        state = node.state if node.state != DELETED else "DELETING"
        msg.state = cloud_tpu.Node.State[state]
        msg.create_time = to_datetime(node.created_at)
        msg.id = node.numeric_id
        msg.api_version = cloud_tpu.Node.ApiVersion.V2
        msg.multislice_node = node.multislice
        if node.qr is not None:
            msg.queued_resource = node.qr.name
        msg.network_endpoints = [
            cloud_tpu.NetworkEndpoint(ip_address=vm.ip or "", port=vm.port) for vm in node.vms
        ]
        if node.state == "READY" and node.ips_at is not None:
            msg.health = cloud_tpu.Node.Health.HEALTHY
        return msg

    # ----------------------------------------------------------------- inspection

    def vm_health(self, vm: VmRecord) -> str:
        """What a prober would see right now: ok, unhealthy, unreachable, or down."""
        if not vm.serving:
            return "down"
        return self.vm_behaviour(vm)

    def vm_behaviour(self, vm: VmRecord) -> str:
        sc = self.scenarios.get(vm.node.scenario_key)
        if vm.index in sc.unreachable_vms:
            return "unreachable"
        if vm.index in sc.unhealthy_vms:
            return "unhealthy"
        return "ok"

    def all_vms(self) -> list[VmRecord]:
        return [vm for node in self.all_nodes for vm in node.vms]

    def vm_at(self, ip: str) -> VmRecord | None:
        """The VM most recently given this address (addresses are reused only much later)."""
        for vm in reversed(self.all_vms()):
            if vm.ip == ip:
                return vm
        return None

    def vms_json(self) -> list[dict[str, Any]]:
        return [
            {
                "node": vm.node.id,
                "qr": vm.qr_id,
                "index": vm.index,
                "ip": vm.ip,
                "port": vm.port,
                "ip_assigned_at": iso(vm.ip_assigned_at),
                "booted_at": iso(vm.booted_at),
                "phoned_home_at": iso(vm.phoned_home_at),
                "stopped_at": iso(vm.stopped_at),
                "health": self.vm_health(vm),
                "error": vm.error,
            }
            for vm in self.all_vms()
        ]

    def leaks(self, handed_over: Iterable[str], include_stopped_vms: bool = False) -> list[str]:
        owned = set(handed_over)
        found: list[str] = []
        for qr in self.qrs.values():
            if qr.id not in owned:
                found.append(f"queued_resource/{qr.id} ({qr.state})")
        for node in self.nodes.values():
            owner = node.qr.id if node.qr is not None else None
            if node.id not in owned and owner not in owned:
                found.append(f"node/{node.id} ({node.state})")
        for vm in self.all_vms():
            if vm.phoned_home_at is None or vm.node.id in owned or vm.qr_id in owned:
                continue
            # A VM that registered and has since been deleted is history, not a zombie,
            # unless the caller asks for every registration of an unowned slice.
            if vm.stopped_at is not None and not include_stopped_vms:
                continue
            found.append(f"vm/{vm.node.id}/{vm.index} phoned home from {vm.ip}")
        return found


# --------------------------------------------------------------------- helpers


def _under(resource_parent: str, parent: str) -> bool:
    # "locations/-" lists every zone of the project, as the real API allows.
    if parent.endswith("/locations/-"):
        return resource_parent.startswith(parent[: -len("-")])
    return resource_parent == parent


def _vm_count(node: cloud_tpu.Node, sc: Scenario) -> int:
    if sc.vm_count is not None:
        return sc.vm_count
    try:
        return vms_per_node(node.accelerator_type)
    except ValueError:
        # Validated at create time; only a scenario edited since then can land here.
        return 1


def _check_node(node: cloud_tpu.Node, where: str, sc: Scenario) -> None:
    if not node.accelerator_type:
        raise _invalid(f"{where}.accelerator_type is required")
    if sc.vm_count is None:
        try:
            vms_per_node(node.accelerator_type)
        except ValueError as exc:
            raise _invalid(f"{where}.accelerator_type: {exc}") from None
    raw_port = node.metadata.get(HEALTH_PORT_KEY)
    if raw_port is not None and not (raw_port.isdigit() and 1 <= int(raw_port) <= 65535):
        raise _invalid(f"{where}.metadata[{HEALTH_PORT_KEY}] must be a port number")


def _queueing_window(qr: cloud_tpu.QueuedResource, now: float) -> tuple[float | None, float | None]:
    """(not before, not after) in emulator seconds from the QR's queueing_policy."""
    policy = cloud_tpu.QueuedResource.pb(qr).queueing_policy
    which = policy.WhichOneof("start_timing_constraints")
    if which == "valid_until_duration":
        return None, now + policy.valid_until_duration.ToTimedelta().total_seconds()
    if which == "valid_until_time":
        return None, policy.valid_until_time.ToNanoseconds() / 1e9
    if which == "valid_after_duration":
        return now + policy.valid_after_duration.ToTimedelta().total_seconds(), None
    if which == "valid_after_time":
        return policy.valid_after_time.ToNanoseconds() / 1e9, None
    if which == "valid_interval":
        interval = policy.valid_interval
        start = (
            interval.start_time.ToNanoseconds() / 1e9 if interval.HasField("start_time") else None
        )
        end = interval.end_time.ToNanoseconds() / 1e9 if interval.HasField("end_time") else None
        return start, end
    return None, None
