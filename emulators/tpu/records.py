"""What the emulator remembers about each queued resource, node and VM.

Records are never dropped when the resource is deleted: they become tombstones with their
full history so a test can prove what happened (and what never happened) after the fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.cloud.tpu_v2.types import cloud_tpu

from emulators.clock import iso
from emulators.tpu.operations import OpRecord

# Pseudo-state recorded when a resource is gone from the API (the API itself says NotFound).
DELETED = "DELETED"


@dataclass
class Transition:
    state: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "at": iso(self.at)}


@dataclass
class Tracked:
    """State plus history; `evaluated_until` keeps late-computed transitions monotonic."""

    state: str
    created_at: float
    history: list[Transition] = field(default_factory=list)
    deleted_at: float | None = None
    evaluated_until: float = 0.0

    def move(self, state: str, at: float) -> str:
        previous = self.state
        self.state = state
        self.history.append(Transition(state, at))
        return previous

    @property
    def live(self) -> bool:
        return self.deleted_at is None


@dataclass
class VmRecord:
    node: NodeRecord
    # Slice-wide index: node position in the QR x VMs per node + position in the node.
    index: int
    port: int
    health_path: str
    ip: str | None = None
    ip_assigned_at: float | None = None
    booted_at: float | None = None
    phoned_home_at: float | None = None
    stopped_at: float | None = None
    error: str | None = None

    @property
    def serving(self) -> bool:
        return self.booted_at is not None and self.stopped_at is None

    @property
    def qr_id(self) -> str | None:
        return self.node.qr.id if self.node.qr is not None else None


@dataclass
class NodeRecord(Tracked):
    name: str = ""
    id: str = ""
    parent: str = ""
    spec: cloud_tpu.Node = field(default_factory=cloud_tpu.Node)
    qr: QrRecord | None = None
    numeric_id: int = 0
    multislice: bool = False
    vms: list[VmRecord] = field(default_factory=list)
    ready_at: float | None = None
    ips_at: float | None = None
    removal_at: float | None = None
    create_op: OpRecord | None = None
    delete_ops: list[OpRecord] = field(default_factory=list)

    @property
    def scenario_key(self) -> str:
        # Nodes of a queued resource behave as their QR's scenario says.
        return self.qr.id if self.qr is not None else self.id

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.id,
            "state": self.state,
            "history": [t.to_json() for t in self.history],
            "labels": dict(self.spec.labels),
            "ips": [vm.ip for vm in self.vms if vm.ip],
            "created_at": iso(self.created_at),
            "deleted_at": iso(self.deleted_at),
            "queued_resource": self.qr.name if self.qr is not None else None,
            "queued_resource_id": self.qr.id if self.qr is not None else None,
            "accelerator_type": self.spec.accelerator_type,
            "vm_count": len(self.vms),
        }


@dataclass
class NodePlan:
    """A node a queued resource will create once capacity is assigned."""

    name: str
    id: str
    parent: str
    spec: cloud_tpu.Node
    multislice: bool


@dataclass
class QrRecord(Tracked):
    name: str = ""
    id: str = ""
    parent: str = ""
    request: cloud_tpu.QueuedResource = field(default_factory=cloud_tpu.QueuedResource)
    request_id: str = ""
    initiator: str = "USER"
    error_code: int | None = None
    error_message: str | None = None
    plan: list[NodePlan] = field(default_factory=list)
    nodes: list[NodeRecord] = field(default_factory=list)
    valid_after: float | None = None
    valid_until: float | None = None
    provisioning_at: float | None = None
    removal_at: float | None = None
    terminal_applied: bool = False
    create_op: OpRecord | None = None
    delete_ops: list[OpRecord] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        if not self.plan:
            return {}
        return dict(self.plan[0].spec.labels)

    def to_json(self) -> dict[str, Any]:
        error = None
        if self.error_message is not None:
            error = {"code": self.error_code, "message": self.error_message}
        return {
            "name": self.name,
            "id": self.id,
            "state": self.state,
            "history": [t.to_json() for t in self.history],
            "labels": self.labels,
            "created_at": iso(self.created_at),
            "deleted_at": iso(self.deleted_at),
            "error": error,
            "node_ids": [p.id for p in self.plan],
            "request_id": self.request_id or None,
            "initiator": self.initiator,
        }
