"""Run an emulator until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal

from emulators.tpu.config import EmulatorConfig
from emulators.tpu.emulator import TpuEmulator

log = logging.getLogger("emulators.tpu")


async def serve(config: EmulatorConfig) -> None:
    emulator = TpuEmulator(config)
    await emulator.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("TPU emulator: stopping")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await emulator.stop()
