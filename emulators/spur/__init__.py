"""Local stand-in for spur's controller and its node agents, on spur's gRPC protocol.

    from emulators.spur import SpurEmulator, SpurEmulatorConfig, AgentSpec

See docs/spur-emulator.md.
"""

from emulators.clock import EmulatorClock, ManualClock
from emulators.spur.agent import AgentDown
from emulators.spur.config import AgentSpec, SpurEmulatorConfig, hostname_variants, numbered_agents
from emulators.spur.emulator import SpurEmulator, serve
from emulators.spur.holdings import CancelRecord

__all__ = [
    "AgentDown",
    "AgentSpec",
    "CancelRecord",
    "EmulatorClock",
    "ManualClock",
    "SpurEmulator",
    "SpurEmulatorConfig",
    "hostname_variants",
    "numbered_agents",
    "serve",
]
