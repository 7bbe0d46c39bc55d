"""Run an emulator until SIGTERM/SIGINT."""

from __future__ import annotations

import logging

from emulators.lifecycle import until_stop_signal
from emulators.tpu.config import EmulatorConfig
from emulators.tpu.emulator import TpuEmulator

log = logging.getLogger("emulators.tpu")


async def serve(config: EmulatorConfig) -> None:
    emulator = TpuEmulator(config)
    await emulator.start()
    try:
        await until_stop_signal()
        log.info("TPU emulator: stopping")
    finally:
        await emulator.stop()
