"""Local stand-in for an iris controller running zephyr jobs, on iris's Connect-JSON API.

    from emulators.iris import IrisEmulator, IrisEmulatorConfig, start_emulator

See docs/iris-emulator.md.
"""

from emulators.iris.clock import ManualWallClock, ScenarioClock, SystemWallClock
from emulators.iris.config import SCENARIO_ENV, IrisEmulatorConfig
from emulators.iris.emulator import IrisEmulator, start_emulator
from emulators.iris.scenarios import SCENARIOS, Scenario, Stage
from emulators.iris.serve import serve

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
