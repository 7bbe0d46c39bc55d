"""Recording workflow histories for tests/common/test_replay.py, on demand:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> pytest tests/<family>/test_*_recordings.py

writes into tests/histories/<folder>/ (today's date when unset) and never overwrites a file:
a recording is never edited or removed (docs/operations.md, Rollouts).
"""

from __future__ import annotations

import asyncio
import os
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.harness import env_flag

HISTORIES = Path(__file__).parent / "histories"
REPO = Path(__file__).resolve().parent.parent

# Marks a test that records rather than checks.
on_demand = pytest.mark.skipif(
    not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand"
)


def recording_dir() -> Path:
    folder = HISTORIES / os.environ.get("KEEPER_HISTORY_DIR", date.today().isoformat())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_recording(name: str, text: str) -> None:
    target = recording_dir() / name
    if target.exists():
        raise FileExistsError(
            f"{target.relative_to(REPO)} is already recorded and is never overwritten; "
            "record into a new folder with KEEPER_HISTORY_DIR"
        )
    target.write_text(text)


async def until_rolled_over(handle: Any, first_run: str | None, within: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while (await handle.describe()).run_id == first_run:
        assert asyncio.get_running_loop().time() < deadline, f"{handle.id} never rolled over"
        await asyncio.sleep(0.1)
