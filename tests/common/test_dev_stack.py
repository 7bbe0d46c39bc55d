"""`keeper-dev` (dev/: the local stack, `keeper-dev emulator`, the demos) end to end: real
processes on free ports, temp dirs.

Every test writes its own config file (free ports, a temporary `.dev`), runs `keeper-dev` (and
`keeper`) as a subprocess, and stops whatever it started, so it neither needs nor disturbs a
developer's own stack on the default ports.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from dev.devstack.layout import plan
from dev.devstack.procs import PidRecord, pid_alive
from dev.devstack.stack import lost_a_port_race
from dev.emulator import render_state
from dev.main import keeper_dev
from keeper.cli.local_stack import run_dir
from keeper.runtime.dev_ports import PORT_OFFSETS, PORT_SPAN
from keeper.runtime.settings import CONFIG_ENV, ENV_OVERRIDES, load_settings

HAVE_EMULATOR = importlib.util.find_spec("emulators.tpu") is not None
NEEDS_EMULATOR = pytest.mark.skipif(
    not HAVE_EMULATOR,
    reason="emulators.tpu is not importable yet: the worker needs the emulator (tpu=gcp "
    "would need real credentials), so the full-stack test cannot run",
)
COMPONENTS = ("temporal", "emulator", "github", "spur", "tap", "iris", "worker")


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on right now (all held at once, so they are distinct)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def free_port_base() -> int:
    """A base whose PORT_SPAN consecutive ports nothing listens on right now, below the
    kernel's ephemeral range: a block inside it can be taken by any process's outgoing or
    port-0 socket (a Temporal dev server's own ports) between this check and the stack's start."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    for _ in range(200):
        base = random.randrange(10_000, low - PORT_SPAN) if low > 12_000 else free_ports(1)[0]
        if base + PORT_SPAN > 65535:
            continue
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + PORT_SPAN):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no block of free ports found")


# The two commands, as `python -m` runs them: the operator's and the checkout's.
KEEPER = "keeper.cli.main"
KEEPER_DEV = "dev"


@dataclass
class Keeper:
    """Runs `keeper-dev --config <file>` (`dev`, `dev_ok`) or `keeper --config <file>` (`run`,
    `ok`) in a clean environment from a temporary directory; `bare=True` leaves --config
    out, as someone typing `keeper-dev status` there would."""

    root: Path
    config: Path
    env: dict[str, str]
    ports: dict[str, int]

    def run(
        self, *args: str, timeout: float = 120, bare: bool = False, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return self._run(KEEPER, args, timeout, bare, env)

    def ok(
        self, *args: str, timeout: float = 120, bare: bool = False, **env: str
    ) -> subprocess.CompletedProcess[str]:
        result = self.run(*args, timeout=timeout, bare=bare, **env)
        assert result.returncode == 0, _explain(args, result)
        return result

    def dev(
        self, *args: str, timeout: float = 120, bare: bool = False, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return self._run(KEEPER_DEV, args, timeout, bare, env)

    def dev_ok(
        self, *args: str, timeout: float = 120, bare: bool = False, **env: str
    ) -> subprocess.CompletedProcess[str]:
        result = self.dev(*args, timeout=timeout, bare=bare, **env)
        assert result.returncode == 0, _explain(args, result)
        return result

    def _run(
        self, module: str, args: tuple[str, ...], timeout: float, bare: bool, env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        config = [] if bare else ["--config", str(self.config)]
        return subprocess.run(
            [sys.executable, "-m", module, *config, *args],
            cwd=self.root,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def status(self, bare: bool = False) -> tuple[int, dict[str, Any]]:
        result = self.dev("status", "--json", bare=bare)
        assert result.returncode in (0, 3), _explain(("status", "--json"), result)
        return result.returncode, json.loads(result.stdout)

    def pids(self) -> dict[str, int | None]:
        return {name: c["pid"] for name, c in self.status()[1]["components"].items()}

    @property
    def run_dir(self) -> Path:
        return self.root / ".dev" / "run"


def _explain(args: tuple[str, ...], result: subprocess.CompletedProcess[str]) -> str:
    program = "keeper-dev" if result.args[2] == KEEPER_DEV else "keeper"
    return (
        f"`{program} {' '.join(args)}` exited {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


def _clean_env() -> dict[str, str]:
    # TEMPORAL_* too: a profile or address exported in the shell would redirect the stack.
    drop = {*ENV_OVERRIDES, CONFIG_ENV}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TEMPORAL_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _write_config(
    root: Path, tpu_endpoint: str, *, relative: bool = False
) -> tuple[Path, dict[str, int]]:
    """`relative=True` names every path relative to the config file, as the shipped
    temporal-dev.yaml does (`.dev/temporal.db`)."""
    dev = Path(".dev") if relative else root / ".dev"
    found = free_ports(12)
    grpc, ui, emu_grpc, emu_control, vm_health, github, spur, spur_control, tap, intake, iris = (
        found[:11]
    )
    metrics = found[11]
    ports = {
        "grpc": grpc,
        "ui": ui,
        "emu_grpc": emu_grpc,
        "emu_control": emu_control,
        "vm_health": vm_health,
        "github": github,
        "spur": spur,
        "spur_control": spur_control,
        "tap": tap,
        "intake": intake,
        "iris": iris,
        "metrics": metrics,
    }
    config = {
        "temporal": {
            "address": f"127.0.0.1:{grpc}",
            "namespace": "default",
            "ui_port": ui,
            "db_file": str(dev / "temporal.db"),
            "task_queue": "keeper-dev-stack-test",
        },
        "tpu": {"endpoint": tpu_endpoint, "emulator_address": f"127.0.0.1:{emu_grpc}"},
        "emulator": {
            "host": "127.0.0.1",
            "grpc_port": emu_grpc,
            "control_port": emu_control,
            # Apart from the suite's shared emulator (127.31) and a developer's (127.20).
            "ip_prefix": "127.33",
            "vm_health_port": vm_health,
            "github_port": github,
            "scenario_file": None,
            "spur_controller_port": spur,
            "spur_control_port": spur_control,
            "spur_agents": 2,
            "spur_heartbeat_interval": "1s",
            "spur_kill_grace": "200ms",
            "iris_port": iris,
        },
        # reclaim.controller_address is derived from the spur emulator's controller port.
        "reclaim": {
            "mode": "act",
            "tap_address": f"127.0.0.1:{tap}",
            "intake_address": f"127.0.0.1:{intake}",
            "store_url": f"sqlite:///{dev / 'reclaim.db'}",
            "timing": {"end_grace": "2s", "retry_initial": "3s", "retry_max": "10s"},
        },
        "runners": {
            "store_url": f"sqlite:///{dev / 'runners.db'}",
            "github": {
                "api_url": f"http://127.0.0.1:{github}",
                "token_file": str(dev / "github-token"),
            },
            "provider": {"config_file": str(dev / "provider" / "config.json")},
        },
        "worker": {"log_dir": str(dev / "logs")},
        # Not the default 9464: a developer's own stack may serve there.
        "dev": {"metrics_address": f"127.0.0.1:{metrics}"},
    }
    path = root / "keeper-test.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, ports


def _kill_leftovers(run: Path) -> None:
    """Last resort after a failed test: kill whatever the pid files still name."""
    for pid_file in run.glob("*.pid"):
        record = PidRecord.load(pid_file)
        if record is not None and pid_alive(record.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)


@pytest.fixture
def keeper(tmp_path: Path) -> Iterator[Keeper]:
    config, ports = _write_config(tmp_path, "emulator" if HAVE_EMULATOR else "gcp")
    k = Keeper(root=tmp_path, config=config, env=_clean_env(), ports=ports)
    try:
        yield k
    finally:
        if k.run_dir.exists():
            k.dev("down", "--timeout", "5")
            _kill_leftovers(k.run_dir)


def _wait_gone(pids: list[int], seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if pid_alive(p)]
    return alive


# -- the full stack ------------------------------------------------------------------------


@pytest.mark.e2e
@NEEDS_EMULATOR
def test_up_is_healthy_idempotent_recovers_a_dead_worker_and_down_stops_everything(
    keeper: Keeper,
) -> None:
    up = keeper.dev_ok("up", "--timeout", "90")
    for name in COMPONENTS:
        assert f"{name}" in up.stdout
    assert "The dev stack is up" in up.stdout

    code, report = keeper.status()
    assert code == 0, report
    assert report["healthy"] is True
    assert report["ui_url"] == f"http://127.0.0.1:{keeper.ports['ui']}"
    for name in ("temporal", "emulator", "github", "spur", "tap", "iris"):
        component = report["components"][name]
        assert component["state"] == "running", component
        assert component["healthy"] is True, component
    spur = report["components"]["spur"]
    assert spur["ports"] == {"gRPC": keeper.ports["spur"], "control": keeper.ports["spur_control"]}
    assert "2 of 2 agents registered" in spur["detail"], spur
    tap = report["components"]["tap"]
    assert tap["ports"] == {"gRPC": keeper.ports["tap"], "intake": keeper.ports["intake"]}
    assert tap["address"] == f"127.0.0.1:{keeper.ports['tap']} -> 127.0.0.1:{keeper.ports['spur']}"
    # The worker is `keeper worker` (cli/worker.py): healthy means it polls the task queue.
    worker = report["components"]["worker"]
    assert worker["state"] == "running" and worker["healthy"] is True, (
        f"keeper worker did not start or does not poll the task queue: {worker}\n"
        + "\n".join((keeper.root / ".dev/logs/worker.log").read_text().splitlines()[-20:])
    )
    first = keeper.pids()
    assert all(first.values()), first

    # Idempotent: a second `up` starts nothing.
    again = keeper.dev_ok("up")
    assert again.stdout.count("already running") == len(COMPONENTS), again.stdout
    assert keeper.pids() == first

    # Only some running: a dead worker is noticed by status and restarted alone by `up`.
    os.killpg(first["worker"], signal.SIGKILL)
    assert not _wait_gone([first["worker"]])
    code, report = keeper.status()
    assert code == 3 and report["components"]["worker"]["state"] == "stopped", report
    keeper.dev_ok("up")
    second = keeper.pids()
    for name in COMPONENTS[:-1]:
        assert second[name] == first[name], name
    assert second["worker"] not in (None, first["worker"])

    # Job reclaim on this stack: the demo leaks a job on a spur agent, the tap's intake starts
    # a reclaim, the (restarted) worker releases it, and the cancel log shows no live job hit.
    demo = keeper.dev("demo", "reclaim", "--json", "--timeout", "60")
    assert demo.returncode == 0, _explain(("demo", "reclaim", "--json"), demo)
    released = json.loads(demo.stdout)
    assert released["outcome"] == "released" and released["mode"] == "act", released
    assert released["workflow_id"].startswith(f"reclaim-{released['node']}-{released['job_id']}-")
    assert released["live_cancels"] == [] and released["live_job_held"] is True, released
    assert [c["signal"] for c in released["cancels"]] == [0], released
    assert "reclaim started" in demo.stderr and "reclaim ended: released" in demo.stderr
    spur_state = json.loads(keeper.dev_ok("emulator", "spur", "state", "--json").stdout)
    jobs = {j["job_id"]: j for j in spur_state["jobs"]}
    assert jobs[released["job_id"]]["state"] == "JOB_COMPLETED"
    assert not any(c["live_here"] for c in spur_state["cancels"]), spur_state["cancels"]
    holdings = {a["node"]: a["holdings"] for a in spur_state["agents"]}
    assert holdings[released["node"]] == [], holdings  # the demo ended its running job too

    # The emulator's control API through `keeper-dev emulator`.
    state = json.loads(keeper.dev_ok("emulator", "state", "--json").stdout)
    assert "queued_resources" in state
    assert "queued resources" in keeper.dev_ok("emulator", "state").stdout
    fault = keeper.dev_ok("emulator", "fault", "GetQueuedResource", "unavailable", "--count", "2")
    assert "UNAVAILABLE" in fault.stdout
    rejected = keeper.dev("emulator", "fault", "GetQueuedResource", "NOT_A_CODE")
    assert rejected.returncode != 0 and "NOT_A_CODE" in rejected.stderr, rejected.stderr
    assert "advanced by 90s" in keeper.dev_ok("emulator", "advance", "90s").stdout
    bad = keeper.dev("emulator", "scenario", "s1", "--inline", '{"no_such_field": 1}')
    assert bad.returncode == 2 and "no_such_field" in bad.stderr, bad.stderr

    down = keeper.dev_ok("down")
    for name in COMPONENTS:
        assert f"{name}" in down.stdout
    assert not _wait_gone(list(second.values())), "processes survived `keeper-dev down`"
    assert not list(keeper.run_dir.glob("*.pid"))
    code, report = keeper.status()
    assert code == 3
    assert {c["state"] for c in report["components"].values()} == {"stopped"}

    not_running = keeper.dev("emulator", "state")
    assert not_running.returncode != 0 and "keeper-dev up" in not_running.stderr


@pytest.fixture
def second(tmp_path: Path) -> Iterator[Keeper]:
    """A stack of its own directory whose config names no port: `--port-base` moves them."""
    root = tmp_path / "second"
    root.mkdir()
    dev_dir = root / ".dev"
    config = {
        "temporal": {"db_file": str(dev_dir / "temporal.db"), "task_queue": "keeper-second"},
        "emulator": {
            "ip_prefix": "127.44",  # apart from the first stack's 127.33
            "scenario_file": "emulators/scenarios/demo.yaml",
        },
        "runners": {
            "store_url": f"sqlite:///{dev_dir / 'runners.db'}",
            "github": {"token_file": str(dev_dir / "github-token")},
            "provider": {"config_file": str(dev_dir / "provider" / "config.json")},
        },
        "worker": {"log_dir": str(dev_dir / "logs")},
    }
    # Named as the default settings file, so a bare `keeper-dev` in this directory reads it.
    path = root / "temporal-dev.yaml"
    path.write_text(yaml.safe_dump(config))
    base = free_port_base()
    ports = {name: base + offset for name, offset in PORT_OFFSETS.items()}
    k = Keeper(root=root, config=path, env=_clean_env(), ports=ports)
    try:
        yield k
    finally:
        if k.run_dir.exists():
            k.dev("down", "--timeout", "5")
            _kill_leftovers(k.run_dir)


@pytest.mark.e2e
@NEEDS_EMULATOR
def test_a_second_stack_on_another_port_base_runs_beside_the_first_and_is_found_bare(
    keeper: Keeper, second: Keeper
) -> None:
    keeper.dev_ok("up", "--timeout", "90")
    base = second.ports["temporal.address"]
    up = second.dev_ok("up", "--port-base", str(base), "--timeout", "90")
    assert f"port base {base}" in up.stderr, up.stderr
    # The `temporal` CLI dials localhost:7233 unless told: `up` says what to export.
    assert f"export TEMPORAL_ADDRESS=127.0.0.1:{base}" in up.stdout, up.stdout
    metrics = f"http://127.0.0.1:{second.ports['dev.metrics_address']}/metrics"
    assert f"metrics      {metrics}" in up.stdout, up.stdout

    # The first stack is untouched and still healthy on its own ports.
    code, first = keeper.status()
    assert code == 0, first
    assert first["components"]["temporal"]["ports"] == {
        "gRPC": keeper.ports["grpc"],
        "UI": keeper.ports["ui"],
    }

    # `keeper-dev status` with neither --config nor --port-base: the recorded settings.
    code, report = second.status(bare=True)
    assert code == 0, report
    assert report["recorded"] is True and report["port_base"] == base, report
    assert report["config_file"] == str(second.config.resolve())
    assert report["ui_url"] == f"http://127.0.0.1:{second.ports['temporal.ui_port']}"
    components = report["components"]
    assert components["temporal"]["ports"] == {
        "gRPC": second.ports["temporal.address"],
        "UI": second.ports["temporal.ui_port"],
    }
    assert components["emulator"]["ports"] == {
        "gRPC": second.ports["emulator.grpc_port"],
        "control": second.ports["emulator.control_port"],
    }
    assert components["github"]["ports"] == {"HTTP": second.ports["emulator.github_port"]}
    assert components["spur"]["ports"] == {
        "gRPC": second.ports["emulator.spur_controller_port"],
        "control": second.ports["emulator.spur_control_port"],
    }
    assert components["tap"]["ports"] == {
        "gRPC": second.ports["reclaim.tap_address"],
        "intake": second.ports["reclaim.intake_address"],
    }
    assert components["worker"]["ports"] == {"metrics": second.ports["dev.metrics_address"]}
    assert all(c["healthy"] for c in components.values()), components
    assert report["temporal_address"] == f"127.0.0.1:{base}"
    assert report["temporal_env"] == {"TEMPORAL_ADDRESS": f"127.0.0.1:{base}"}
    # The worker serves Prometheus metrics there (the SDK's temporal_* among them).
    assert report["metrics_url"] == metrics
    scraped = httpx.get(metrics, timeout=10)
    assert scraped.status_code == 200 and "temporal_" in scraped.text, scraped.text[:500]
    text = second.dev("status", bare=True)
    assert f"temporal CLI: export TEMPORAL_ADDRESS=127.0.0.1:{base}" in text.stdout, text.stdout
    assert f"Metrics: {metrics}" in text.stdout, text.stdout
    emulator_argv = PidRecord.load(second.run_dir / "emulator.pid").argv  # type: ignore[union-attr]
    health_flag = emulator_argv.index("--vm-health-port")
    assert emulator_argv[health_flag + 1] == str(second.ports["emulator.vm_health_port"])

    # A bootstrap on the second stack goes READY: its worker dials the derived emulator
    # address, and the health probes find the VMs on the derived VM health port.
    # Commands other than `keeper-dev up`, `status` and `down` take the base from the file or
    # the environment.
    second.dev_ok("demo", "tpu", KEEPER_DEV_PORT_BASE=str(base))
    state = json.loads(
        second.dev_ok("emulator", "state", "--json", KEEPER_DEV_PORT_BASE=str(base)).stdout
    )
    vm_health_port = second.ports["emulator.vm_health_port"]
    assert state["vms"], state
    assert {(vm["port"], vm["booted_at"] is not None) for vm in state["vms"]} == {
        (vm_health_port, True)
    }, state["vms"]

    # `keeper-dev down` bare stops the second stack and leaves the first running.
    pids = [p for p in second.pids().values() if p]
    second.dev_ok("down", bare=True)
    assert not _wait_gone(pids), "processes survived `keeper-dev down`"
    assert not (second.run_dir / "stack.json").exists()
    assert keeper.status()[0] == 0


def test_the_stack_lives_beside_its_config_file_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dev.devstack.stack import Stack

    home = tmp_path / "home"
    home.mkdir()
    config, _ = _write_config(home, "emulator", relative=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for var in (CONFIG_ENV, "KEEPER_DEV_PORT_BASE"):
        monkeypatch.delenv(var, raising=False)
    stack = Stack.open(str(config), None, follow_record=False)
    assert stack.home == home.resolve()
    assert run_dir(stack.settings) == home.resolve() / ".dev" / "run"
    assert stack.settings.temporal.db_file == home.resolve() / ".dev" / "temporal.db"
    for comp in stack.components.values():
        assert comp.pid_file.is_relative_to(home.resolve() / ".dev" / "run"), comp
        assert comp.log_file.is_relative_to(home.resolve() / ".dev" / "logs"), comp
    temporal = stack.components["temporal"].argv
    assert temporal[temporal.index("--db-filename") + 1] == str(home.resolve() / ".dev/temporal.db")
    # A config given by a relative name is read from here, and still anchors at its own
    # directory.
    monkeypatch.chdir(tmp_path)
    again = Stack.open("home/keeper-test.yaml", None, follow_record=False)
    assert run_dir(again.settings) == run_dir(stack.settings)


@pytest.mark.e2e
@NEEDS_EMULATOR
def test_a_stack_started_in_its_directory_is_found_and_left_alone_from_any_other(
    tmp_path: Path,
) -> None:
    # The paths in the file are relative (`.dev/...`), as in the shipped temporal-dev.yaml.
    config, ports = _write_config(tmp_path, "emulator", relative=True)
    env = _clean_env()
    home = Keeper(root=tmp_path, config=config, env=env, ports=ports)
    other = tmp_path / "elsewhere" / "deeper"
    other.mkdir(parents=True)
    away = Keeper(root=other, config=config, env=env, ports=ports)
    try:
        home.dev_ok("up", "--no-worker", "--timeout", "90")
        started = {name: pid for name, pid in home.pids().items() if name != "worker"}
        assert all(started.values()), started

        # From another directory: the same stack, its processes found by their pid files.
        _, report = away.status()
        assert report["run_dir"] == str((tmp_path / ".dev" / "run").resolve()), report
        for name, pid in started.items():
            component = report["components"][name]
            assert (component["state"], component["pid"]) == ("running", pid), component
            assert "not started by keeper-dev" not in component["detail"], component
        again = away.dev("up", "--no-worker", "--timeout", "30")
        assert again.returncode == 0, _explain(("up", "--no-worker"), again)
        assert "already in use" not in again.stderr and "Nothing was started" not in again.stderr
        assert again.stdout.count("already running") == len(started), again.stdout
        assert {n: p for n, p in away.pids().items() if n != "worker"} == started
        assert not (other / ".dev").exists()

        away.dev_ok("down")
        assert not _wait_gone(list(started.values())), "processes survived `keeper-dev down`"
        assert not list(home.run_dir.glob("*.pid"))
    finally:
        if home.run_dir.exists():
            home.dev("down", "--timeout", "5")
            _kill_leftovers(home.run_dir)


# -- failure paths that start nothing ------------------------------------------------------


@pytest.mark.e2e
def test_a_port_held_by_another_process_is_named_and_nothing_starts(keeper: Keeper) -> None:
    port = keeper.ports["ui"]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = keeper.dev("up", "--timeout", "20")
    assert result.returncode != 0
    assert str(port) in result.stderr, result.stderr
    assert "temporal UI" in result.stderr and "temporal.ui_port" in result.stderr
    if Path("/proc/net/tcp").exists():  # who holds it, where /proc tells
        assert f"pid {os.getpid()}" in result.stderr
    assert "Nothing was started" in result.stderr
    assert not list(keeper.run_dir.glob("*.pid"))


@pytest.mark.e2e
def test_stale_pid_files_are_reported_and_cleaned(keeper: Keeper) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    keeper.run_dir.mkdir(parents=True)
    record = PidRecord(pid=dead.pid, argv=["gone"], cwd=str(keeper.root), log_file="x.log")
    (keeper.run_dir / "worker.pid").write_text(record.dump())

    code, report = keeper.status()
    assert code == 3
    assert "stale pid file" in report["components"]["worker"]["detail"]

    down = keeper.dev_ok("down")
    assert "stale pid file" in down.stdout
    assert not (keeper.run_dir / "worker.pid").exists()


@pytest.mark.e2e
def test_a_remote_temporal_is_only_checked_never_started(keeper: Keeper) -> None:
    config = yaml.safe_load(keeper.config.read_text())
    config["temporal"]["address"] = "192.0.2.1:7233"  # TEST-NET-1: never answers
    config["tpu"]["endpoint"] = "gcp"
    keeper.config.write_text(yaml.safe_dump(config))

    result = keeper.dev("up", "--timeout", "1")
    assert result.returncode == 1
    assert "not local: not starting a server" in result.stdout
    assert "not reachable" in result.stderr
    assert not (keeper.run_dir / "temporal.pid").exists()
    code, report = keeper.status()
    assert code == 3 and report["components"]["temporal"]["state"] == "external"


# -- in-process: help, command lines, rendering --------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["up"],
        ["down"],
        ["status"],
        ["demo"],
        ["demo", "tpu"],
        ["demo", "runner"],
        ["demo", "reclaim"],
        ["demo", "job"],
        ["emulator"],
        ["emulator", "serve"],
        ["emulator", "state"],
        ["emulator", "scenario"],
        ["emulator", "fault"],
        ["emulator", "advance"],
    ],
)
def test_every_command_has_help(args: list[str]) -> None:
    result = CliRunner().invoke(keeper_dev, [*args, "--help"])
    assert result.exit_code == 0, result.output
    assert len(result.output.split("\n\n", 2)[1]) > 20  # a real description, not just usage


def test_command_lines_follow_the_settings(tmp_path: Path) -> None:
    config, ports = _write_config(tmp_path, "emulator")
    components = plan(load_settings(config, env={}), str(config))
    temporal = components["temporal"].argv
    assert temporal[1:3] == ("server", "start-dev")
    assert ("--port", str(ports["grpc"])) == temporal[temporal.index("--port") :][:2]
    assert ("--ui-port", str(ports["ui"])) == temporal[temporal.index("--ui-port") :][:2]
    assert "SliceName=Keyword" in temporal and "--search-attribute" in temporal
    assert "--db-filename" in temporal
    assert "--scenario-file" not in components["emulator"].argv  # unset in this config
    spur = components["spur"].argv
    assert spur[1:3] == ("-m", "emulators.spur")
    assert ("--controller-port", str(ports["spur"])) == spur[spur.index("--controller-port") :][:2]
    # The agents dial the tap, which forwards to the emulator's controller.
    assert spur[spur.index("--controller-address") + 1] == f"127.0.0.1:{ports['tap']}"
    assert spur[spur.index("--heartbeat-interval") + 1] == "1"
    assert components["tap"].argv[-4:] == ("--config", str(config.resolve()), "reclaim", "tap")
    assert components["worker"].argv[-5:] == (
        "--config",
        str(config.resolve()),
        "worker",
        "--metrics-address",
        f"127.0.0.1:{ports['metrics']}",
    )
    assert run_dir(load_settings(config, env={})) == tmp_path / ".dev" / "run"


def test_state_rendering_is_compact() -> None:
    text = render_state(
        {
            "now": "2026-01-01T00:00:00+00:00",
            "queued_resources": [{"id": "qr-a", "state": "ACTIVE", "deleted_at": None}],
            "nodes": [{"id": "node-a", "state": "READY", "ips": ["127.20.0.1", "127.20.0.2"]}],
            "vms": [
                {"booted_at": "t", "phoned_home_at": "t", "stopped_at": None},
                {"booted_at": "t", "phoned_home_at": None, "stopped_at": None},
            ],
            "calls": {"GetQueuedResource": 3, "CreateQueuedResource": 1},
            "faults": [],
        }
    )
    assert "qr-a" in text and "ACTIVE" in text
    assert "node-a" in text and "READY" in text
    assert "2 total, 2 booted, 1 phoned home" in text
    assert "API calls (4)" in text and "GetQueuedResource" in text


@pytest.mark.parametrize(
    ("name", "started_here", "log", "retry"),
    [
        # The dev server's own pick of its HTTP API port, taken by another process meanwhile.
        ("temporal", True, "panic: runtime error: invalid memory address\n"
         "go.temporal.io/server/service/frontend.NewHTTPAPIServer(0x1e6d4df19b08)", True),
        ("temporal", True, "listen tcp 127.0.0.1:40967: bind: address already in use", True),
        # A bad database or flag repeats: no second start.
        ("temporal", True, "Error: unable to open database file", False),
        ("temporal", False, "address already in use", False),  # not ours to restart
        ("emulator", True, "address already in use", False),
    ],
)  # fmt: skip
def test_only_a_dev_server_that_lost_a_port_race_is_started_again(
    tmp_path: Path, name: str, started_here: bool, log: str, retry: bool
) -> None:
    log_file = tmp_path / f"{name}.log"
    log_file.write_text(log + "\n")
    running = SimpleNamespace(
        component=SimpleNamespace(name=name, log_file=log_file), started_here=started_here
    )
    assert lost_a_port_race(running) is retry  # type: ignore[arg-type]
