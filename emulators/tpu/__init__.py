"""Local stand-in for the Cloud TPU v2 API plus a simulated VM fleet.

    from emulators.tpu import TpuEmulator, EmulatorConfig, Scenario

See docs/emulator.md.
"""

from emulators.tpu.config import EmulatorConfig
from emulators.tpu.emulator import TpuEmulator, serve
from emulators.tpu.faults import Fault
from emulators.tpu.scenario import Scenario, ScenarioFile, Terminal, load_scenario_file

__all__ = [
    "EmulatorConfig",
    "Fault",
    "Scenario",
    "ScenarioFile",
    "Terminal",
    "TpuEmulator",
    "load_scenario_file",
    "serve",
]
