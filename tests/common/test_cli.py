"""The `keeper tpu` commands end to end: validation before anything starts, a bootstrap with
--wait --json against the dev server, status and release."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulators.tpu import Scenario, TpuEmulator
from keeper.cli.main import cli
from tests.e2e_support import REPO, write_config
from tests.harness import assert_no_leaks, running_worker


def test_bad_request_is_refused_before_anything_starts(tmp_path: Path):
    # The address points nowhere: validation must fail before any connection is tried.
    config = tmp_path / "keeper.yaml"
    config.write_text("temporal: {address: '127.0.0.1:1'}\n")
    result = CliRunner().invoke(
        cli,
        ["--config", str(config), "tpu", "bootstrap", "Bad_Name", "-a", "v9-8", "-c", "spot"],
    )
    # A bad argument is a usage error, named by its flag, in plain words.
    assert result.exit_code == 2, result.output
    assert "nothing was started" in result.output
    assert "SLICE_NAME: must be 1-40 characters" in result.output
    assert "--accelerator-type: 'v9-8' is not an accelerator type" in result.output


def test_help_is_complete():
    runner = CliRunner()
    for command in ("bootstrap", "status", "cancel", "delete", "sweep", "list"):
        result = runner.invoke(cli, ["tpu", command, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.output
        assert "--json" in result.output and "--output" in result.output, command


async def keeper(config: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.cli.main", "--config", str(config), *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


@pytest.mark.e2e
async def test_bootstrap_wait_json_status_and_delete(dev_env, emu: TpuEmulator, tmp_path: Path):
    emu.set_default_scenario(Scenario(assign_after=0.3, active_after=0.3, ips_after=0.1))
    queue = f"keeper-cli-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp_path / "keeper.yaml", dev_env, emu, queue)
    name = f"cli-{uuid.uuid4().hex[:6]}"
    async with running_worker(dev_env.client, emu, task_queue=f"{queue}-tpu"):
        code, out, err = await keeper(
            config, "tpu", "bootstrap", name, "-a", "v4-16", "-c", "reserved",
            "--reservation", "res-a", "--poll-interval", "1s", "--wait", "--json",
        )  # fmt: skip
        assert code == 0, err
        payload = json.loads(out)
        assert payload["status"] == "COMPLETED"
        assert len(payload["result"]["vms"]) == 2
        assert set(payload["result"]["phase_seconds"]) >= {"assign", "ready", "health"}

        assert {"workflow_id", "run_id", "ui_url", "status", "result"} <= set(payload)

        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        assert code == 0, err
        status = json.loads(out)
        assert status["status"] == "COMPLETED"
        assert status["slice_state"] == "ready"
        assert status["progress"]["phase"] == "done"
        assert status["teardown"] is None
        assert status["started_at"].endswith("Z")

        # A second bootstrap of a live slice is refused before anything starts: the
        # handed-over slice keeps its COMPLETED bootstrap.
        code, out, err = await keeper(config, "tpu", "bootstrap", name, "-a", "v4-16",
                                      "-c", "reserved", "--reservation", "res-a",
                                      "--poll-interval", "1s", "--wait", "--json")  # fmt: skip
        assert code == 1, err
        refused = json.loads(out)["error"]
        assert f"slice {name} is live" in refused["message"]
        assert f"keeper tpu delete {name}" in refused["hint"]
        assert f"keeper tpu delete {name}" in err
        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        assert json.loads(out)["status"] == "COMPLETED"
        assert emu.leaks(set()) != []  # the handed-over slice is still there

        code, out, err = await keeper(config, "tpu", "delete", name, "--json")
        assert code == 0, err
        report = json.loads(out)["result"]
        qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{name}"
        node = f"projects/keeper-test/locations/us-central2-b/nodes/{name}"
        # The force delete of the QR takes its node with it.
        assert report == {
            "deleted": [qr],
            "already_gone": [node],
            "not_ours": [],
            "deleted_earlier": [],
        }

        # After the delete, the status tells the release, not the handed-over slice.
        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        assert code == 0, err
        released = json.loads(out)
        assert released["slice_state"] == "released"
        assert released["teardown"]["status"] == "COMPLETED"
        assert released["teardown"]["workflow_id"] == f"tpu-teardown-{name}"
        code, out, err = await keeper(config, "tpu", "status", name)
        assert code == 0, err
        assert f"tpu-bootstrap-{name}: released" in out
        assert f"teardown tpu-teardown-{name}: COMPLETED, deleted {name}" in out
        assert "ACTIVE" not in out

        # Released, the slice is over: listed only with --all.
        code, out, err = await keeper(config, "tpu", "list", "--json")
        assert code == 0, err
        assert name not in {row["slice"] for row in json.loads(out)["slices"]}
        code, out, err = await keeper(config, "tpu", "list", "--all", "--json")
        assert code == 0, err
        rows = {row["slice"]: row for row in json.loads(out)["slices"]}
        assert rows[name]["status"] == "COMPLETED"
        assert rows[name]["slice_state"] == "released"
        assert rows[name]["zone"] == "us-central2-b"
        assert rows[name]["started_at"].endswith("Z")
        code, out, err = await keeper(config, "tpu", "list", "--all")
        assert code == 0, err
        assert out.splitlines()[0].split() == [
            "SLICE",
            "ZONE",
            "PHASE",
            "STATUS",
            "STATE",
            "STARTED",
        ]
        assert any(line.startswith(name) and "released" in line for line in out.splitlines())
    assert_no_leaks(emu)
