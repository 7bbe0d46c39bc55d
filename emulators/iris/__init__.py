"""Local stand-in for an iris controller running zephyr jobs, on iris's Connect-JSON API.

    from emulators.iris import IrisEmulator, IrisEmulatorConfig, start_emulator

See docs/iris-emulator.md.
"""

from emulators.clock import EmulatorClock as SystemWallClock
from emulators.clock import ManualClock as ManualWallClock
from emulators.iris.clock import ScenarioClock
from emulators.iris.config import SCENARIO_ENV, IrisEmulatorConfig
from emulators.iris.emulator import IrisEmulator, serve, start_emulator
from emulators.iris.scenarios import SCENARIOS, Scenario, Stage

__all__ = [
    "SCENARIOS",
    "SCENARIO_ENV",
    "IrisEmulator",
    "IrisEmulatorConfig",
    "ManualWallClock",
    "Scenario",
    "ScenarioClock",
    "Stage",
    "SystemWallClock",
    "serve",
    "start_emulator",
]
