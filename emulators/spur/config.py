"""Settings of one spur emulator instance, and the small built-in scenarios."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_HEARTBEAT_INTERVAL = 30.0  # spurd's hardcoded interval
DEFAULT_KILL_GRACE = 5.0  # spurd's SIGTERM -> SIGKILL delay


@dataclass(frozen=True)
class AgentSpec:
    # The controller's name for the physical node: what allocations and nodelists show.
    node: str
    # What the agent reports as its hostname; None means the same as `node`.
    hostname: str | None = None
    cpus: int = 64
    memory_mb: int = 512_000
    gpus: int = 8

    @property
    def reported_hostname(self) -> str:
        return self.hostname or self.node


@dataclass
class SpurEmulatorConfig:
    host: str = "127.0.0.1"
    # 0 picks a free port; the chosen ones are on SpurEmulator.controller_target etc.
    controller_port: int = 0
    control_port: int = 0
    # Agent i listens on agent_base_port + i; 0 gives each agent a free port.
    agent_base_port: int = 0
    agents: list[AgentSpec] = field(default_factory=lambda: numbered_agents(2))
    # Seconds between heartbeats; None or 0 means only on demand (beat_now).
    heartbeat_interval: float | None = None
    # Where agents send RegisterAgent and Heartbeat; None means this controller. Point it
    # at a proxy to see (and answer) what the agents send.
    controller_address: str | None = None
    kill_grace: float = DEFAULT_KILL_GRACE
    retention: float = 3600.0
    first_job_id: int = 1
    # When set, every controller RPC needs `authorization: Bearer <token>`.
    token: str | None = None
    # None: no follower. Otherwise the port (0 = free) of a replica that is not the leader.
    follower_port: int | None = None
    # Nodes silent for longer go DOWN "Not responding" on advance() (spur's
    # heartbeat_timeout_secs, 90 there). None turns the health tick off: advance() jumps the
    # emulator clock while agents beat in real time, so every node would look silent.
    heartbeat_timeout: float | None = None
    # Per-RPC deadline of an agent's calls to the controller.
    agent_rpc_timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.kill_grace < 0:
            raise ValueError("kill_grace must not be negative")
        if self.heartbeat_interval is not None and self.heartbeat_interval < 0:
            raise ValueError("heartbeat_interval must not be negative")
        nodes = [spec.node for spec in self.agents]
        if len(set(nodes)) != len(nodes):
            raise ValueError("two agents claim the same node")


def numbered_agents(count: int) -> list[AgentSpec]:
    return [AgentSpec(node=f"gpu-node-{i:02d}") for i in range(1, count + 1)]


def hostname_variants() -> list[AgentSpec]:
    """One agent per way a hostname can differ from the controller's name for the node."""
    return [
        AgentSpec(node="gpu-node-07"),
        AgentSpec(node="gpu-node-08", hostname="GPU-NODE-08"),
        AgentSpec(node="gpu-node-09", hostname="gpu-node-09.cluster.local"),
    ]


SCENARIOS = {"hostname-variants": hostname_variants}
