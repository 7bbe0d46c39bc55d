"""One port base moves every port of the local stack; the addresses that must agree with the
emulator section are derived from it, and a contradiction is refused naming both settings."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dev.devstack.layout import metrics_url, plan, temporal_cli_env
from keeper.cli.tpu.commands import build_request
from keeper.runtime.settings import Settings, SettingsConflict, SettingsError, load_settings

BASE = 17000


def _load(tmp_path: Path, config: dict[str, Any], **env: str) -> Settings:
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_settings(path, env)


def _flag(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_a_port_base_moves_every_port_and_what_dials_them(tmp_path: Path) -> None:
    settings = _load(tmp_path, {"dev": {"port_base": BASE}})
    assert settings.temporal.address == f"127.0.0.1:{BASE}"
    assert settings.temporal.ui_port == BASE + 1
    emu = settings.emulator
    assert (emu.grpc_port, emu.control_port, emu.github_port, emu.vm_health_port) == (
        BASE + 2,
        BASE + 3,
        BASE + 4,
        BASE + 5,
    )
    assert settings.tpu.emulator_address == f"127.0.0.1:{BASE + 2}"
    assert settings.runners.github.api_url == f"http://127.0.0.1:{BASE + 4}"
    assert settings.temporal.ui_base == f"http://127.0.0.1:{BASE + 1}"

    components = plan(settings, None)
    temporal = components["temporal"].argv
    assert (_flag(temporal, "--port"), _flag(temporal, "--ui-port")) == (str(BASE), str(BASE + 1))
    emulator = components["emulator"].argv
    assert _flag(emulator, "--grpc-port") == str(BASE + 2)
    assert _flag(emulator, "--control-port") == str(BASE + 3)
    assert _flag(emulator, "--vm-health-port") == str(BASE + 5)
    github = components["github"]
    assert github.mode == "managed" and _flag(github.argv, "--port") == str(BASE + 4)
    # Job reclaim: the spur emulator's controller and control API, the tap and its intake.
    assert (emu.spur_controller_port, emu.spur_control_port) == (BASE + 6, BASE + 7)
    reclaim = settings.reclaim
    assert reclaim.controller_address == f"127.0.0.1:{BASE + 6}"
    assert reclaim.tap_address == f"127.0.0.1:{BASE + 8}"
    assert reclaim.intake_address == f"127.0.0.1:{BASE + 9}"
    spur = components["spur"]
    assert spur.mode == "managed"
    assert _flag(spur.argv, "--controller-port") == str(BASE + 6)
    assert _flag(spur.argv, "--control-port") == str(BASE + 7)
    # The agents dial the tap as their controller, not the emulator's controller itself.
    assert _flag(spur.argv, "--controller-address") == f"127.0.0.1:{BASE + 8}"
    tap = components["tap"]
    assert tap.mode == "managed" and tap.argv[-2:] == ("reclaim", "tap")
    assert [p.number for p in tap.ports] == [BASE + 8, BASE + 9]
    # Job watch: the iris emulator, and the controller URL the worker dials.
    assert emu.iris_port == BASE + 10
    assert settings.watch.controller_url == f"http://127.0.0.1:{BASE + 10}"
    iris = components["iris"]
    assert iris.mode == "managed" and _flag(iris.argv, "--port") == str(BASE + 10)
    # The worker's Prometheus metrics, and what the `temporal` CLI needs to reach the server.
    assert settings.dev.metrics_address == f"127.0.0.1:{BASE + 11}"
    worker = components["worker"]
    assert _flag(worker.argv, "--metrics-address") == f"127.0.0.1:{BASE + 11}"
    assert metrics_url(settings) == f"http://127.0.0.1:{BASE + 11}/metrics"
    assert temporal_cli_env(settings) == {"TEMPORAL_ADDRESS": f"127.0.0.1:{BASE}"}
    numbers = [p.number for c in components.values() for p in c.ports]
    # Every port but the VMs' (N+5) is one a component listens on.
    assert sorted(numbers) == [n for n in range(BASE, BASE + 12) if n != BASE + 5]

    # The environment variable and the file agree; explicit values equal to the base's pass.
    by_env = _load(tmp_path, {}, KEEPER_DEV_PORT_BASE=str(BASE))
    assert by_env.model_dump(exclude={"worker"}) == settings.model_dump(exclude={"worker"})
    same = {"dev": {"port_base": BASE}, "emulator": {"grpc_port": BASE + 2}}
    assert _load(tmp_path, same).emulator.grpc_port == BASE + 2


def test_without_a_base_the_dialled_addresses_follow_the_emulator_section(tmp_path: Path) -> None:
    settings = _load(
        tmp_path, {"emulator": {"host": "0.0.0.0", "grpc_port": 9100, "github_port": 9101}}
    )
    # A wildcard listener is dialled on loopback.
    assert settings.tpu.emulator_address == "127.0.0.1:9100"
    assert settings.runners.github.api_url == "http://127.0.0.1:9101"
    # Defaults everywhere: today's ports.
    defaults = _load(tmp_path, {})
    assert defaults.tpu.emulator_address == "127.0.0.1:8470"
    assert defaults.runners.github.api_url == "http://127.0.0.1:8472"
    assert defaults.temporal.address == "127.0.0.1:7233"
    assert defaults.emulator.vm_health_port == 8080
    # spur's own controller port for the emulator's controller, and what job reclaim dials.
    assert defaults.emulator.spur_controller_port == 6817
    assert defaults.reclaim.controller_address == "127.0.0.1:6817"
    assert (defaults.reclaim.tap_address, defaults.reclaim.intake_address) == (
        "127.0.0.1:6819",
        "127.0.0.1:6820",
    )
    assert defaults.emulator.spur_control_port == 6821
    # The dev stack's worker serves metrics; the `temporal` CLI's defaults reach the server.
    assert defaults.dev.metrics_address == "127.0.0.1:9464"
    assert metrics_url(defaults) == "http://127.0.0.1:9464/metrics"
    assert temporal_cli_env(defaults) == {}
    moved = _load(tmp_path, {"emulator": {"spur_controller_port": 9200}})
    assert moved.reclaim.controller_address == "127.0.0.1:9200"
    spur = plan(moved, None)["spur"]
    assert spur.mode == "managed" and _flag(spur.argv, "--controller-address") == "127.0.0.1:6819"


@pytest.mark.parametrize(
    ("config", "env", "named"),
    [
        (
            {"emulator": {"grpc_port": 9100}, "tpu": {"emulator_address": "127.0.0.1:8470"}},
            {},
            ["tpu.emulator_address is 127.0.0.1:8470 (the config file)", "emulator.grpc_port"],
        ),
        (
            {"dev": {"port_base": BASE}},
            {"KEEPER_TPU_EMULATOR_ADDRESS": "127.0.0.1:8470"},
            ["(KEEPER_TPU_EMULATOR_ADDRESS)", f"dev.port_base {BASE} + 2"],
        ),
        (
            {"dev": {"port_base": BASE}, "temporal": {"ui_port": 8233}},
            {},
            [f"temporal.ui_port gives port 8233 (the config file) but dev.port_base {BASE}"],
        ),
        (
            {"dev": {"port_base": BASE}},
            {"TEMPORAL_ADDRESS": "127.0.0.1:7233"},
            ["temporal.address gives port 7233 (TEMPORAL_ADDRESS)", f"puts it at {BASE}"],
        ),
        (
            {"emulator": {"github_port": 9101}},
            {"KEEPER_GITHUB_API_URL": "http://127.0.0.1:8472"},
            ["runners.github.api_url is http://127.0.0.1:8472 (KEEPER_GITHUB_API_URL)", "9101"],
        ),
        (
            {"dev": {"port_base": BASE}},
            {"KEEPER_SPUR_CONTROLLER": "127.0.0.1:6817"},
            [
                "reclaim.controller_address is 127.0.0.1:6817 (KEEPER_SPUR_CONTROLLER)",
                f"dev.port_base {BASE} + 6",
            ],
        ),
        (
            {"emulator": {"spur_controller_port": 9200}},
            {"KEEPER_SPUR_CONTROLLER": "localhost:6817"},
            ["reclaim.controller_address is localhost:6817", "emulator.spur_controller_port"],
        ),
        (
            {"dev": {"port_base": BASE}, "reclaim": {"tap_address": "127.0.0.1:6819"}},
            {},
            [f"reclaim.tap_address gives port 6819 (the config file) but dev.port_base {BASE}"],
        ),
        (
            {"dev": {"port_base": BASE}, "reclaim": {"intake_address": "127.0.0.1:6820"}},
            {},
            [f"reclaim.intake_address gives port 6820 (the config file) but dev.port_base {BASE}"],
        ),
        (
            {"dev": {"port_base": BASE, "metrics_address": "127.0.0.1:9464"}},
            {},
            [f"dev.metrics_address gives port 9464 (the config file) but dev.port_base {BASE}"],
        ),
    ],
)
def test_a_contradiction_is_refused_naming_both_sides(
    tmp_path: Path, config: dict[str, Any], env: dict[str, str], named: list[str]
) -> None:
    with pytest.raises(SettingsConflict) as info:
        _load(tmp_path, config, **env)
    for text in named:
        assert text in str(info.value), str(info.value)


def test_what_the_stack_does_not_run_is_not_a_contradiction(tmp_path: Path) -> None:
    # The real TPU API: where an emulator would serve does not matter.
    gcp = {"tpu": {"endpoint": "gcp", "emulator_address": "x:1"}, "emulator": {"grpc_port": 9}}
    assert _load(tmp_path, gcp).tpu.emulator_address == "x:1"
    # A remote Temporal and the real GitHub keep their addresses under a base.
    remote = _load(
        tmp_path,
        {"dev": {"port_base": BASE}},
        TEMPORAL_ADDRESS="temporal.internal:7233",
        KEEPER_GITHUB_API_URL="https://api.github.com",
    )
    assert remote.temporal.address == "temporal.internal:7233"
    assert remote.runners.github.api_url == "https://api.github.com"
    components = plan(remote, None)
    assert components["temporal"].mode == "external"
    assert components["github"].mode == "disabled"
    # A real spur controller: the dev stack runs no spur emulator, the tap sits in front of it.
    real = _load(
        tmp_path, {"dev": {"port_base": BASE}}, KEEPER_SPUR_CONTROLLER="spur.internal:6817"
    )
    assert real.reclaim.controller_address == "spur.internal:6817"
    assert real.reclaim.tap_address == f"127.0.0.1:{BASE + 8}"
    components = plan(real, None)
    assert components["spur"].mode == "disabled"
    assert "reclaim.controller_address" in components["spur"].disabled_because
    assert components["tap"].mode == "managed"
    assert components["tap"].address == f"127.0.0.1:{BASE + 8} -> spur.internal:6817"
    # Explicit values equal to the base's pass.
    same = {"dev": {"port_base": BASE}, "reclaim": {"tap_address": f"127.0.0.1:{BASE + 8}"}}
    assert _load(tmp_path, same).reclaim.tap_address == f"127.0.0.1:{BASE + 8}"


@pytest.mark.parametrize("base", ["80", "65527", "many"])
def test_a_port_base_out_of_range_names_the_setting(tmp_path: Path, base: str) -> None:
    with pytest.raises(SettingsError, match=r"dev\.port_base"):
        _load(tmp_path, {}, KEEPER_DEV_PORT_BASE=base)


def test_a_request_probes_the_port_the_emulated_vms_answer_on(tmp_path: Path) -> None:
    fields = {
        "slice_name": "s-ports",
        "accelerator_type": "v4-8",
        "runtime_version": "tpu-ubuntu2204-base",
        "capacity": "on-demand",
    }
    on_emulator = _load(tmp_path, {"dev": {"port_base": BASE}})
    assert build_request(on_emulator, dict(fields)).health_port == BASE + 5
    assert build_request(on_emulator, {**fields, "health_port": 9000}).health_port == 9000
    on_gcp = _load(tmp_path, {"dev": {"port_base": BASE}, "tpu": {"endpoint": "gcp"}})
    assert build_request(on_gcp, dict(fields)).health_port == 8080


def _keeper_dev(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dev", *args],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dev_up_refuses_a_port_base_the_config_contradicts_before_starting(
    tmp_path: Path,
) -> None:
    config = tmp_path / "keeper.yaml"
    config.write_text(yaml.safe_dump({"temporal": {"ui_port": 8233}}))
    result = _keeper_dev(tmp_path, "--config", str(config), "up", "--port-base", str(BASE))
    assert result.returncode == 2, result
    assert "--port-base" in result.stderr and "temporal.ui_port gives port 8233" in result.stderr
    assert not (tmp_path / ".dev").exists()  # nothing started, nothing recorded

    low = _keeper_dev(tmp_path, "--config", str(config), "up", "--port-base", "80")
    assert low.returncode == 2 and "--port-base" in low.stderr, low


async def test_keeper_dev_emulator_iris_finds_the_emulator_at_the_port_base(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dev.main import keeper_dev
    from emulators.iris import IrisEmulatorConfig, start_emulator

    config = tmp_path / "keeper.yaml"
    config.write_text(yaml.safe_dump({"temporal": {"db_file": str(tmp_path / "t.db")}}))
    emu = await start_emulator(IrisEmulatorConfig(settle_interval=0))
    # The base whose iris port (base + 10) is the one the emulator got.
    base = int(emu.url.rsplit(":", 1)[1]) - 10
    # Nothing from the shell that would point the command elsewhere.
    env = {"KEEPER_DEV_PORT_BASE": str(base), "KEEPER_IRIS_EMULATOR_URL": None}
    env |= {var: None for var in ("TEMPORAL_ADDRESS", "TEMPORAL_PROFILE", "KEEPER_CONFIG")}

    def keeper(*args: str) -> Any:
        # In a thread: the emulator answers on this test's event loop.
        return CliRunner().invoke(keeper_dev, ["--config", str(config), *args], env=env)

    try:
        launched = await asyncio.to_thread(keeper, "emulator", "iris", "launch", "moved")
        assert launched.exit_code == 0, launched.output
        assert "/alice/moved playing healthy" in launched.output
        assert "/alice/moved" in {job["job_id"] for job in emu.state()["jobs"]}
    finally:
        await emu.stop()

    # Nothing answers there now: the error names the port's origin and what to do, never
    # a second emulator started by hand.
    gone = await asyncio.to_thread(keeper, "emulator", "iris", "state")
    assert gone.exit_code == 1, gone.output
    assert f"not running at http://127.0.0.1:{base + 10} (dev.port_base {base} + 10)" in (
        gone.output
    )
    assert "keeper-dev up" in gone.output and "KEEPER_DEV_PORT_BASE" in gone.output
    assert "python -m emulators.iris" not in gone.output


def test_the_dev_stacks_worker_serves_metrics_and_worker_metrics_address_wins(
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from keeper.cli.context import KeeperContext
    from keeper.cli.worker import worker

    settings = _load(tmp_path, {"dev": {"port_base": BASE}})
    argv = plan(settings, None)["worker"].argv
    # What that worker would serve, as `keeper worker --check` reads its command line.
    checked = CliRunner().invoke(
        worker, [*argv[argv.index("worker") + 1 :], "--check", "--json"], obj=KeeperContext()
    )
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.output)["metrics_address"] == f"127.0.0.1:{BASE + 11}"

    # worker.metrics_address, set, is the worker's own: the stack adds no flag and lists it.
    own = _load(tmp_path, {"dev": {"port_base": BASE}}, KEEPER_METRICS_ADDRESS="127.0.0.1:9999")
    component = plan(own, None)["worker"]
    assert "--metrics-address" not in component.argv
    assert [(p.number, p.setting, p.env) for p in component.ports] == [
        (9999, "worker.metrics_address", "KEEPER_METRICS_ADDRESS")
    ]
    assert metrics_url(own) == "http://127.0.0.1:9999/metrics"
    # "" turns the stack's metrics off; a port base has nothing to move then.
    off = _load(tmp_path, {"dev": {"port_base": BASE, "metrics_address": ""}})
    assert plan(off, None)["worker"].ports == () and metrics_url(off) is None
    # A namespace of the stack's own is exported too.
    named = _load(tmp_path, {"temporal": {"namespace": "keeper-dev"}})
    assert temporal_cli_env(named) == {"TEMPORAL_NAMESPACE": "keeper-dev"}
