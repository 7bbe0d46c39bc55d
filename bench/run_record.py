"""The raw results of a benchmark run: one JSON file per run under bench/results/.

docs/benchmarks.md quotes these files, so each one says what produced it: the command line,
when it ran, the commit (and whether tracked files were modified), and the machine (cores,
CPU model, memory, load before and after, Python and temporalio versions), next to every
figure the script printed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=RESULTS_DIR.parent, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def source() -> dict[str, Any]:
    """The commit the run measured, and whether tracked files differed from it."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    modified = None if status is None else status != ""
    return {"commit": _git("rev-parse", "HEAD"), "modified": modified}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


class Run:
    """Started when the script starts; written once its figures are known."""

    def __init__(self, script: str) -> None:
        self.script = script
        self.started = datetime.now(UTC)
        self.argv = list(sys.argv[1:])
        self.load_before = load_average()
        self.source = source()

    def machine(self) -> dict[str, Any]:
        return {
            "cpu_count": os.cpu_count(),
            "cpu_model": _cpu_model(),
            "memory_gib": _memory_gib(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "temporalio": _version("temporalio"),
            "grpcio": _version("grpcio"),
            "load_average_before": self.load_before,
            "load_average_after": load_average(),
        }

    def write(self, figures: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.script}-{self.started:%Y%m%dT%H%M%SZ}.json"
        document = {
            "script": f"bench/{self.script}.py",
            "command": " ".join(["python", f"bench/{self.script}.py", *self.argv]),
            "started_utc": self.started.isoformat(timespec="seconds"),
            "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "source": self.source,
            "machine": self.machine(),
            "figures": figures,
        }
        path.write_text(json.dumps(document, indent=2) + "\n")
        return path
