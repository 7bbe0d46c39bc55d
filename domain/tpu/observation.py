"""What one read of the cloud tells a bootstrap, and how far along that is.

A poll returns to the workflow only when progress moved by a visible step (see
`progress_key`), so history grows with the number of steps, never with wait time.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from keeper.domain.tpu.qr_state import QrStage, node_is_terminal, qr_stage

# Counts are reported in steps of this many percent so a 512-VM slice returns at most
# ~10 times per phase instead of once per VM.
PROGRESS_STEPS = 10


class VmEndpoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    node: str
    index: int
    ip: str


class NodeView(BaseModel):
    model_config = ConfigDict(frozen=True)

    node_id: str
    state: str
    ips: list[str | None] = []  # one entry per VM (network endpoint), None until assigned


class SliceObservation(BaseModel):
    model_config = ConfigDict(frozen=True)

    qr_state: str | None = None  # None for non-queued capacity
    qr_error: str | None = None
    nodes: list[NodeView] = []
    expected_nodes: int
    expected_vms: int

    @property
    def stage(self) -> QrStage | None:
        return None if self.qr_state is None else qr_stage(self.qr_state)

    @property
    def nodes_ready(self) -> int:
        return sum(1 for n in self.nodes if n.state == "READY")

    @property
    def vms_with_ip(self) -> int:
        return sum(1 for n in self.nodes for ip in n.ips if ip)

    @property
    def endpoints(self) -> list[VmEndpoint]:
        return [
            VmEndpoint(node=n.node_id, index=i, ip=ip)
            for n in self.nodes
            for i, ip in enumerate(n.ips)
            if ip
        ]

    @property
    def cloud_ready(self) -> bool:
        """Every node READY, every VM with an IP, and exactly the expected VM count."""
        total_vms = sum(len(n.ips) for n in self.nodes)
        return (
            len(self.nodes) == self.expected_nodes
            and self.nodes_ready == self.expected_nodes
            and total_vms == self.expected_vms
            and self.vms_with_ip == self.expected_vms
        )

    @property
    def terminal_reason(self) -> str | None:
        if self.stage is QrStage.TERMINAL:
            detail = f": {self.qr_error}" if self.qr_error else ""
            return f"queued resource is {self.qr_state}{detail}"
        for node in self.nodes:
            if node_is_terminal(node.state):
                return f"node {node.node_id} is {node.state}"
        return None


def bucket(count: int, total: int) -> int:
    if total <= 0 or count >= total:
        return PROGRESS_STEPS
    return count * PROGRESS_STEPS // total


def progress_key(obs: SliceObservation) -> str:
    """Changes whenever the workflow should hear about the observation."""
    total_nodes = max(obs.expected_nodes, 1)
    return "|".join(
        [
            obs.qr_state or "-",
            str(bucket(obs.nodes_ready, total_nodes)),
            str(bucket(obs.vms_with_ip, obs.expected_vms)),
            "ready" if obs.cloud_ready else "",
        ]
    )
