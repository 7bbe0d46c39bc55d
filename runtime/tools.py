"""Where keeper finds the Temporal binaries that the dev extra installs."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_tool(name: str) -> str | None:
    """The venv's own copy first (beside this interpreter), then PATH; never a download."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)
