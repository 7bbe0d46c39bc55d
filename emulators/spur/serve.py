"""Run the spur emulator until SIGTERM/SIGINT."""

from __future__ import annotations

import logging

from emulators.lifecycle import until_stop_signal
from emulators.spur.config import SpurEmulatorConfig
from emulators.spur.emulator import SpurEmulator

log = logging.getLogger("emulators.spur")


async def serve(config: SpurEmulatorConfig) -> None:
    emulator = SpurEmulator(config)
    await emulator.start()
    try:
        await until_stop_signal()
        log.info("spur emulator: stopping")
    finally:
        await emulator.stop()
