"""Run the iris emulator until SIGTERM/SIGINT."""

from __future__ import annotations

import logging

from emulators.iris.config import IrisEmulatorConfig
from emulators.iris.emulator import IrisEmulator
from emulators.lifecycle import until_stop_signal

log = logging.getLogger("emulators.iris")


async def serve(config: IrisEmulatorConfig) -> None:
    emulator = IrisEmulator(config)
    await emulator.start()
    try:
        await until_stop_signal()
        log.info("iris emulator: stopping")
    finally:
        await emulator.stop()
