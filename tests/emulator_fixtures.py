"""Pytest fixtures for the TPU emulator (a plugin module, not conftest.py).

Use from a test module with `pytest_plugins = ("tests.emulator_fixtures",)`; the helpers
they rely on are in emulators.tpu.testing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from google.cloud.tpu_v2 import TpuAsyncClient

from emulators.tpu import TpuEmulator
from emulators.tpu.testing import client_for, make_config


@pytest.fixture
async def emulator() -> AsyncIterator[TpuEmulator]:
    emu = TpuEmulator(make_config())
    await emu.start()
    try:
        yield emu
    finally:
        await emu.stop()


@pytest.fixture
async def tpu(emulator: TpuEmulator) -> AsyncIterator[TpuAsyncClient]:
    client, channel = client_for(emulator)
    try:
        yield client
    finally:
        await channel.close()
