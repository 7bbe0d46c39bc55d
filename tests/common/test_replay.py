"""Replays every recorded workflow history against the current workflow code.

A recorded history stands for a workflow that may be running on a cluster right now, so a
change that would break it (a new command, a reordered activity, a changed child id) must
fail here. Recordings are never edited or deleted: each family's recordings are made on
demand by tests/<family>/test_<family>_recordings.py into a new folder (tests/recording.py), and
`test_recorded_histories_are_never_edited_or_removed` fails CI when a committed recording
changes. A recording stops replaying only when the patch it depends on is retired; then it
moves under tests/histories/retired/ and RETIRED.md says why (docs/operations.md, Rollouts).
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from keeper.domain.reclaim.models import Holding
from keeper.domain.runners.models import deletion_workflow_id
from keeper.domain.tpu.naming import (
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.watch.models import watch_id
from keeper.workers.registry import (
    WORKFLOW_FAILURE_EXCEPTION_TYPES,
    WORKFLOW_INTERCEPTORS,
    WORKFLOWS,
)
from tests.recording import HISTORIES, REPO

RETIRED_DIR = HISTORIES / "retired"
RETIRED = HISTORIES / "RETIRED.md"
# The commit that cut the 1.0 baseline (it moved every earlier recording under retired/).
# From here on recordings are only ever added.
FROZEN_SINCE = "c218aa18c62c20b3e745a61c9e48d14892837e7d"


def recorded() -> list[Path]:
    return sorted(p for p in HISTORIES.rglob("*.json") if RETIRED_DIR not in p.parents)


def retired_rows() -> dict[str, str]:
    """`| path | release | reason |` rows of RETIRED.md: a file or a folder under retired/."""
    rows: dict[str, str] = {}
    for line in RETIRED.read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("retired/"):
            rows[cells[0]] = f"retired in {cells[1]}: {cells[2]}"
    return rows


def test_every_retired_recording_is_listed_with_its_reason():
    rows = retired_rows()
    files = [str(path.relative_to(HISTORIES)) for path in sorted(RETIRED_DIR.rglob("*.json"))]
    unlisted = [name for name in files if name not in rows]
    assert unlisted == [], f"retired recordings RETIRED.md does not list one by one: {unlisted}"
    missing = [row for row in rows if not (HISTORIES / row).exists()]
    assert missing == [], f"RETIRED.md lists recordings that are not there: {missing}"


# The release whose recordings every later build must replay: each family's recordings module
# lists the paths it records (its LABELS), and the baseline holds every one of them.
BASELINE = HISTORIES / "1.0.0"


# Family folder -> its recordings module.
RECORDINGS = {
    "tpu": "tests.tpu.test_tpu_recordings",
    "runners": "tests.runners.test_runner_recordings",
    "reclaim": "tests.reclaim.test_reclaim_recordings",
    "watch": "tests.watch.test_watch_recordings",
}


@pytest.mark.parametrize("family", list(RECORDINGS))
def test_the_baseline_holds_every_path_each_family_records(family: str):
    module = importlib.import_module(RECORDINGS[family])
    labels: list[str] = module.LABELS
    held = {path.name.removesuffix(".json") for path in BASELINE.glob("*.json")}
    assert labels, f"{RECORDINGS[family]} lists no LABELS"
    missing = sorted(set(labels) - held)
    assert missing == [], f"{family}: not recorded in {BASELINE.name}/: {missing}"


# Workflow type -> its canonical id from its input: the workflows refuse to run under any
# other id, and a history file does not hold the id it ran under.
CANONICAL_IDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "TpuSliceBootstrap": lambda inp: bootstrap_workflow_id(inp["slice_name"]),
    "TpuSliceBootstrapRun": lambda inp: bootstrap_run_workflow_id(inp["request"]["slice_name"]),
    "TpuSliceTeardown": lambda inp: teardown_workflow_id(inp["slice_name"]),
    "RunnerDeletion": lambda inp: deletion_workflow_id(inp["runner"]),
    "JobReclaim": lambda inp: Holding.model_validate(inp["holding"]).workflow_id,
    "JobWatch": lambda inp: watch_id(inp["job_id"]),
}


def workflow_id_of(path: Path, text: str) -> str:
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    canonical = CANONICAL_IDS.get(started["workflowType"]["name"])
    payloads = started.get("input", {}).get("payloads", [])
    if canonical is None or not payloads:
        return path.stem
    return canonical(json.loads(base64.b64decode(payloads[0]["data"])))


@pytest.mark.parametrize("path", recorded(), ids=lambda p: str(p.relative_to(HISTORIES)))
async def test_replay(path: Path):
    text = await asyncio.to_thread(path.read_text)
    history = WorkflowHistory.from_json(workflow_id_of(path, text), text)
    # The worker's own interceptors and failure types: a replay runs what a worker would.
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        interceptors=WORKFLOW_INTERCEPTORS,
        workflow_failure_exception_types=WORKFLOW_FAILURE_EXCEPTION_TYPES,
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    assert git, "git is needed to check that recorded histories are never edited"
    return subprocess.run([git, *args], cwd=REPO, capture_output=True, text=True, check=False)


def test_recorded_histories_are_never_edited_or_removed():
    if _git("cat-file", "-e", f"{FROZEN_SINCE}^{{commit}}").returncode != 0:
        shallow = _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        if shallow:
            pytest.skip("a shallow clone has no history to compare; CI uses a full clone")
        pytest.fail(f"commit {FROZEN_SINCE[:7]} is not in this repository's history")
    committed = _git(
        "log",
        "--format=%h",
        "--name-status",
        "--diff-filter=MDR",
        f"{FROZEN_SINCE}..HEAD",
        "--",
        "tests/histories/*.json",
        "tests/histories/**/*.json",
    )
    assert committed.returncode == 0, committed.stderr
    uncommitted = _git("status", "--porcelain", "--", "tests/histories")
    assert uncommitted.returncode == 0, uncommitted.stderr
    changed = [
        line
        for line in uncommitted.stdout.splitlines()
        if re.match(r"^( ?[MDR]|[MDR].)", line) and line.endswith(".json")
    ]
    assert committed.stdout.strip() == "" and changed == [], (
        "recorded histories were edited, moved or removed; restore them and add new recordings "
        "in a new folder instead (use workflow.patched for the change):\n"
        + committed.stdout
        + "\n".join(changed)
    )
