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

from cli.main import cli
from emulators.tpu import Scenario, TpuEmulator
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
    assert result.exit_code != 0
    assert "nothing was started" in result.output
    assert "slice_name" in result.output
    assert "accelerator_type" in result.output


def test_help_is_complete():
    runner = CliRunner()
    for command in ("bootstrap", "status", "cancel", "delete", "sweep", "demo"):
        result = runner.invoke(cli, ["tpu", command, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage:" in result.output
    assert "--json" in runner.invoke(cli, ["tpu", "bootstrap", "--help"]).output


async def keeper(config: Path, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli.main", "--config", str(config), *args,
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

        code, out, err = await keeper(config, "tpu", "status", name, "--json")
        assert code == 0, err
        status = json.loads(out)
        assert status["status"] == "COMPLETED"
        assert status["progress"]["phase"] == "done"

        # A second bootstrap of the same name finds a QR owned by the completed run: it fails,
        # and its compensation leaves the other run's slice alone.
        code, out, err = await keeper(config, "tpu", "bootstrap", name, "-a", "v4-16",
                                      "-c", "reserved", "--reservation", "res-a",
                                      "--poll-interval", "1s", "--wait", "--json")  # fmt: skip
        assert code == 1, err
        failed = json.loads(out)
        assert "already exists and belongs to" in failed["error"]
        qr = f"projects/keeper-test/locations/us-central2-b/queuedResources/{name}"
        node = f"projects/keeper-test/locations/us-central2-b/nodes/{name}"
        compensation = failed["failure"]["compensation"]
        assert (compensation["deleted"], compensation["not_ours"]) == ([], [qr, node])
        assert emu.leaks(set()) != []  # the handed-over slice is still there
        code, out, err = await keeper(config, "tpu", "delete", name, "--json")
        assert code == 0, err
        report = json.loads(out)["report"]
        # The force delete of the QR takes its node with it.
        assert report == {"deleted": [qr], "already_gone": [node], "not_ours": []}
    assert_no_leaks(emu)
