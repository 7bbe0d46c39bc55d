"""The `keeper` CLI's conventions (docs/cli.md), checked on the real command in a subprocess:
exit codes, data on stdout and diagnostics on stderr, the JSON error document, --version,
shell completion, the global --address/--namespace flags, and --help of every command. The
checkout's `keeper-dev` (dev/) keeps the same conventions, checked here beside keeper's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from dev.main import keeper_dev as keeper_dev_group
from dev.main import run as run_dev
from emulators.tpu import TpuEmulator
from emulators.tpu.faults import FAULT_METHODS
from emulators.tpu.grpc_service import TpuService
from keeper.cli.main import cli, run
from keeper.runtime.settings import CONFIG_ENV, ENV_OVERRIDES, package_build_id
from tests.e2e_support import REPO, interruptible_module

# Several subprocesses at once: each spends most of its time importing keeper.
PARALLEL = 4
TIMEOUT = 120
# The two commands, as `python -m` runs them: the operator's and the checkout's.
KEEPER = "keeper.cli.main"
KEEPER_DEV = "dev"
PROGRAMS = {KEEPER: "keeper", KEEPER_DEV: "keeper-dev"}


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any keeper or Temporal settings, plus `extra`."""
    drop = {*ENV_OVERRIDES, CONFIG_ENV}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def keeper(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO, module: str = KEEPER
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def keeper_dev(
    *args: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    return keeper(*args, env=env, cwd=cwd, module=KEEPER_DEV)


def keepers(
    commands: list[list[str]], env: dict[str, str] | None = None, module: str = KEEPER
) -> list[Any]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda args: keeper(*args, env=env, module=module), commands))


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"`{PROGRAMS[result.args[2]]} {' '.join(result.args[3:])}` exited {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Settings that point at ports nothing listens on: no command reaches a real server."""
    path = tmp_path / "keeper.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "temporal": {
                    "address": f"127.0.0.1:{free_port()}",
                    "namespace": "from-file",
                    "db_file": str(tmp_path / ".dev/temporal.db"),
                },
                "emulator": {"control_port": free_port(), "grpc_port": free_port()},
                "worker": {"log_dir": str(tmp_path / ".dev/logs")},
                "runners": {"store_url": f"sqlite:///{tmp_path / 'runners.db'}"},
            }
        )
    )
    return path


def error_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The error document on stdout: the one JSON value there, nothing else."""
    document = json.loads(result.stdout)
    assert set(document) == {"error"}, explain(result)
    error = document["error"]
    assert error["message"] and error["exit_code"] == result.returncode, explain(result)
    return dict(error)


# -- --version -----------------------------------------------------------------------------


def test_version_names_the_package_and_the_build_id_in_text_and_json() -> None:
    text, as_json, built, global_json = keepers(
        [
            ["--version"],
            ["--version", "--json"],
            ["--version", "-o", "json"],
            ["--json", "--version"],
        ]
    )
    version = metadata.version("keeper-temporal")
    assert text.returncode == 0, explain(text)
    assert text.stdout.startswith(f"keeper {version} (build {package_build_id()}")
    assert text.stderr == ""
    for result in (as_json, built, global_json):
        assert result.returncode == 0, explain(result)
        about = json.loads(result.stdout)
        assert about["version"] == version
        assert about["build_id"] == package_build_id()
        assert about["deployment_name"] == "keeper"

    # The build id is the worker's: KEEPER_BUILD_ID sets it for both.
    release = keeper("--version", "--json", env=clean_env(KEEPER_BUILD_ID="release-42"))
    assert json.loads(release.stdout)["build_id"] == "release-42", explain(release)


def test_version_still_answers_when_the_settings_do_not_hold(tmp_path: Path) -> None:
    # The file names a build, so --version parses the settings to show it: they do not hold.
    broken = tmp_path / "broken.yaml"
    broken.write_text("temporal: {adress: typo}\nworker: {build_id: release-7}\n")
    result = keeper("--config", str(broken), "--version")
    assert result.returncode == 0, explain(result)
    assert result.stdout.startswith(f"keeper {metadata.version('keeper-temporal')} "), explain(
        result
    )
    assert "temporal.adress" in result.stderr  # the problem is a diagnostic, not the data
    # Not the build the file names, which no worker of these settings runs as: the package's.
    assert f"(build {package_build_id()}, deployment keeper;" in result.stdout, explain(result)


def test_version_names_the_packages_build_when_the_settings_name_none(tmp_path: Path) -> None:
    # Nothing sets the build id or the deployment: every worker of this package polls as its
    # own build, whatever else the settings say, so --version does not parse them
    # (runtime/settings_file.py) and has no problem of theirs to report.
    broken = tmp_path / "broken.yaml"
    broken.write_text("temporal: {adress: typo}\nworker: {deployment_name: keeper}\n")
    result = keeper("--config", str(broken), "--version", "--json")
    assert result.returncode == 0 and result.stderr == "", explain(result)
    about = json.loads(result.stdout)
    assert (about["build_id"], about["deployment_name"]) == (package_build_id(), "keeper")
    # A deployment of its own is a setting to parse and show.
    named = tmp_path / "named.yaml"
    named.write_text("worker: {deployment_name: keeper-canary}\n")
    result = keeper("--config", str(named), "--version", "--json")
    assert json.loads(result.stdout)["deployment_name"] == "keeper-canary", explain(result)


# -- shell completion ----------------------------------------------------------------------


def test_completion_prints_each_shells_script() -> None:
    bash, zsh, fish, as_json = keepers(
        [
            ["completion", "bash"],
            ["completion", "zsh"],
            ["completion", "fish"],
            ["completion", "bash", "--json"],
        ]
    )
    for result in (bash, zsh, fish, as_json):
        assert result.returncode == 0 and result.stderr == "", explain(result)
    assert "complete -o nosort -F _keeper_completion keeper" in bash.stdout
    assert zsh.stdout.startswith("#compdef keeper")
    assert "_KEEPER_COMPLETE=zsh_complete" in zsh.stdout
    assert "_KEEPER_COMPLETE=fish_complete" in fish.stdout and "complete " in fish.stdout
    assert json.loads(as_json.stdout) == {"shell": "bash", "script": bash.stdout}

    unknown = keeper("completion", "tcsh")
    assert unknown.returncode == 2 and unknown.stdout == "", explain(unknown)
    assert "bash, zsh, fish" in unknown.stderr.replace("'", "")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_and_values_through_keeper_on_path(
    tmp_path: Path,
) -> None:
    # `keeper` on PATH, as the docs ask: the script calls it for the candidates.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "keeper"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cli.main "$@"\n')
    shim.chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def complete(*words: str) -> list[str]:
        script = (
            "source <(keeper completion bash)\n"
            f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
            "_keeper_completion keeper\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n'
        )
        done = subprocess.run(
            ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert "--address" in complete("keeper", "--a")
    # The operator's commands only: the checkout's tooling is keeper-dev's.
    assert complete("keeper", "''") == ["admin", "completion", "job", "reclaim", "runner", "tpu",
                                        "worker"]  # fmt: skip


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_keeper_devs_commands_through_clicks_variable(
    tmp_path: Path,
) -> None:
    # keeper-dev has no `completion` command: click's own variable asks it for the script.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "keeper-dev"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m dev "$@"\n')
    shim.chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def complete(*words: str) -> list[str]:
        script = (
            'eval "$(_KEEPER_DEV_COMPLETE=bash_source keeper-dev)"\n'
            f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
            "_keeper_dev_completion keeper-dev\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n'
        )
        done = subprocess.run(
            ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert complete("keeper-dev", "''") == ["demo", "down", "emulator", "status", "up"]
    assert complete("keeper-dev", "demo", "''") == ["job", "reclaim", "runner", "tpu"]
    assert complete("keeper-dev", "emulator", "fault", "GetQ") == ["GetQueuedResource"]
    assert "--address" in complete("keeper-dev", "--a")


# -- usage errors: exit 2, before any command code runs ------------------------------------

USAGE_ERRORS = [
    # (command line, what the error names, whether the JSON test repeats it with --json)
    (["nosuchcommand"], "nosuchcommand", True),
    (["--address", "no-port", "worker", "--check"], "--address", True),
    (["--namespace", " ", "worker", "--check"], "--namespace", False),
    (["tpu", "bootstrap"], "SLICE_NAME", True),
    (["tpu", "status", "train-a", "--no-such-option"], "--no-such-option", True),
    (["tpu", "bootstrap", "train-a", "--capacity", "free"], "--capacity", False),
    (["runner", "delete"], "NAME", True),
    (["runner", "list", "--no-such-option"], "--no-such-option", False),
    (["worker", "--check", "--family", "nope"], "--family", True),
    (["completion"], "SHELL", False),
]
DEV_USAGE_ERRORS = [
    (["nosuchcommand"], "nosuchcommand", True),
    (["emulator", "fault", "BadMethod", "UNAVAILABLE"], "GetQueuedResource", True),
    (["emulator", "fault", "GetNode", "NOT_A_CODE"], "RESOURCE_EXHAUSTED", False),
    (["emulator", "fault", "GetNode", "UNAVAILABLE", "--count", "0"], "--count", False),
    (["emulator", "advance", "soon"], "SECONDS", False),
    (["emulator", "advance", "--", "-5s"], "SECONDS", False),
    (["emulator", "scenario", "Bad_Slice", "--inline", "{}"], "SLICE_ID", False),
    (["emulator", "scenario", "s1"], "--file or --inline", False),
    (["emulator", "scenario", "s1", "--inline", "{not json"], "--inline", False),
    (["emulator", "scenario", "s1", "--inline", '{"no_such_field": 1}'], "no_such_field", True),
    (["up", "--timeout", "0"], "--timeout", True),
    (["demo", "tpu", "--name", "Bad_Slice"], "--name", True),
    (["demo", "runner", "--count", "0"], "--count", False),
    (["demo", "job", "--timeout", "1"], "--timeout", False),
]
# Each case as the command it belongs to runs it.
BOTH_USAGE_ERRORS = [(KEEPER, *case) for case in USAGE_ERRORS] + [
    (KEEPER_DEV, *case) for case in DEV_USAGE_ERRORS
]


def keepers_each(lines: list[tuple[str, list[str]]]) -> list[Any]:
    """Each (module, args) command line, several at once."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(lambda line: keeper(*line[1], module=line[0]), lines))


def test_usage_errors_exit_2_with_the_usage_on_stderr_and_nothing_on_stdout(config: Path) -> None:
    results = keepers_each(
        [(module, ["--config", str(config), *args]) for module, args, _, _ in BOTH_USAGE_ERRORS]
    )
    for (module, _, names, _), result in zip(BOTH_USAGE_ERRORS, results, strict=True):
        assert result.returncode == 2, explain(result)
        assert result.stdout == "", explain(result)
        assert f"Usage: {PROGRAMS[module]} " in result.stderr, explain(result)
        assert "Error:" in result.stderr, explain(result)
        assert names in result.stderr, explain(result)


def test_usage_errors_under_json_are_an_error_document_on_stdout(config: Path) -> None:
    cases = [(module, args, names) for module, args, names, also in BOTH_USAGE_ERRORS if also]
    # Global --json, so commands of every group answer alike, whatever their own options.
    results = keepers_each(
        [(module, ["--config", str(config), "--json", *args]) for module, args, _ in cases]
    )
    for (_, _, names), result in zip(cases, results, strict=True):
        assert result.returncode == 2, explain(result)
        error = error_of(result)
        assert error["usage"] is True, explain(result)
        assert names in error["message"], explain(result)
        assert "Error:" in result.stderr, explain(result)  # the text goes to stderr too

    # A command's own --json / -o json asks for the same document.
    fault, advance, worker = keepers_each(
        [
            (KEEPER_DEV, ["--config", str(config), "emulator", "fault", "BadMethod",
                          "UNAVAILABLE", "--json"]),
            (KEEPER_DEV, ["--config", str(config), "emulator", "advance", "soon", "-o", "json"]),
            (KEEPER, ["--config", str(config), "worker", "--json"]),
        ]
    )  # fmt: skip
    assert error_of(fault)["param"] == "METHOD"
    assert error_of(advance)["param"] == "SECONDS"
    assert error_of(worker)["param"] == "--json" and "--check" in error_of(worker)["message"]


def test_the_fault_methods_are_the_ones_the_emulator_serves() -> None:
    # A fault naming a method the emulator does not serve would never fire.
    service = TpuService(world=None, faults=None, calls=None, refresh=lambda: None)  # type: ignore[arg-type]
    served = set()
    for handler in service.handlers():
        served |= set(handler._method_handlers)  # type: ignore[attr-defined]
    assert {name.rsplit("/", 1)[1] for name in served} == set(FAULT_METHODS)


# -- operation failures: exit 1 ------------------------------------------------------------


def test_a_failed_operation_exits_1_with_a_hint_and_its_error_document(config: Path) -> None:
    text, as_json = keepers(
        [
            ["--config", str(config), "emulator", "state"],
            ["--config", str(config), "emulator", "state", "--json"],
        ],
        module=KEEPER_DEV,
    )
    assert text.returncode == 1 and text.stdout == "", explain(text)
    assert "not running" in text.stderr and "keeper-dev up" in text.stderr, explain(text)
    error = error_of(as_json)
    assert "not running" in error["message"] and "keeper-dev up" in error["hint"]
    assert "usage" not in error


def test_a_bad_request_is_one_usage_error_naming_every_parameter_at_fault(config: Path) -> None:
    several, across = keepers(
        [
            ["--config", str(config), "tpu", "bootstrap", "Upper", "-a", "v4-7", "-c", "spot",
             "--node-count", "0", "--json"],
            ["--config", str(config), "tpu", "bootstrap", "ok", "-a", "v4-8", "-c", "reserved",
             "--json"],
        ]
    )  # fmt: skip
    # Every problem at once, in the shape of every usage error: `param` the first, `params`
    # them all, the message one line naming each.
    assert several.returncode == 2, explain(several)
    error = error_of(several)
    assert error["usage"] is True and error["command"] == "keeper tpu bootstrap", error
    assert error["param"] == "SLICE_NAME", error
    assert error["params"] == ["SLICE_NAME", "--accelerator-type", "--node-count"], error
    assert "\n" not in error["message"], error
    assert all(f"{param}: " in error["message"] for param in error["params"]), error
    assert "Usage: keeper tpu bootstrap" in several.stderr, explain(several)
    # A check across options names them as flags, not as the request's fields.
    error = error_of(across)
    assert (error["param"], error["params"]) == ("--reservation", ["--reservation"]), error
    assert "--reservation is required when --capacity is 'reserved'" in error["message"]
    assert "reservation_name" not in error["message"], error


def test_an_unreachable_temporal_is_a_failure_with_a_hint_and_its_address(config: Path) -> None:
    closed = f"127.0.0.1:{free_port()}"
    flagged, configured, text = keepers(
        [
            ["--config", str(config), "--address", closed, "tpu", "status", "train-a", "--json"],
            ["--config", str(config), "tpu", "list", "--json"],
            ["--config", str(config), "tpu", "list"],
        ]
    )
    error = error_of(flagged)
    assert error["exit_code"] == 1 and error["address"] == closed, error
    assert error["namespace"] == "from-file", error
    # The hint is a field of its own, not the message's last line.
    assert "\n" not in error["message"] and f"cannot reach Temporal at {closed}" in error["message"]
    # The address given is what to check, not the local stack's port base.
    assert error["hint"].startswith("Check --address"), error
    assert "KEEPER_DEV_PORT_BASE" not in error["hint"], error
    error = error_of(configured)
    assert "keeper-dev up" in error["hint"] and "KEEPER_DEV_PORT_BASE" in error["hint"], error
    assert text.returncode == 1 and text.stdout == "", explain(text)
    assert error["hint"] in text.stderr, explain(text)


def test_nothing_answering_names_the_port_base_the_stack_here_was_started_on(
    config: Path, tmp_path: Path
) -> None:
    # What `keeper-dev up --port-base 23000` records in the run dir beside the database.
    run_dir = tmp_path / ".dev" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "stack.json").write_text(
        json.dumps({"config_file": None, "port_base": 23000, "cwd": str(tmp_path)})
    )
    temporal = keeper("--config", str(config), "tpu", "list", "--json")
    emulator = keeper_dev("--config", str(config), "emulator", "state", "--json")
    for result in (temporal, emulator):
        hint = error_of(result)["hint"]
        assert "keeper-dev up" in hint, explain(result)
        assert "port base 23000" in hint and "KEEPER_DEV_PORT_BASE=23000" in hint, explain(result)


def test_an_address_that_contradicts_the_port_base_is_the_one_to_fix(tmp_path: Path) -> None:
    config = tmp_path / "keeper.yaml"
    config.write_text(yaml.safe_dump({"temporal": {"db_file": str(tmp_path / "t.db")}}))
    base = {"KEEPER_DEV_PORT_BASE": "23000"}
    args = ["--config", str(config), "tpu", "status", "train-a", "--json"]
    by_flag, by_variable = (
        keeper("--address", "127.0.0.1:1", *args, env=clean_env(**base)),
        keeper(*args, env=clean_env(**base, TEMPORAL_ADDRESS="127.0.0.1:1")),
    )
    error = error_of(by_flag)
    assert "temporal.address gives port 1 (--address)" in error["message"], error
    assert error["hint"] == "Fix --address and retry.", error
    error = error_of(by_variable)
    assert "temporal.address gives port 1 (TEMPORAL_ADDRESS)" in error["message"], error
    assert error["hint"] == "Fix the variable TEMPORAL_ADDRESS and retry.", error


def test_bad_settings_exit_1_naming_the_field_and_where_to_fix_it(
    config: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("temporal:\n  adress: 127.0.0.1:7233\n")
    from_file, as_json, no_file = keepers(
        [
            ["--config", str(broken), "worker", "--check"],
            ["--config", str(broken), "worker", "--check", "--json"],
            ["--config", str(tmp_path / "missing.yaml"), "tpu", "list"],
        ]
    )
    from_variable = keeper(
        "--config", str(config), "worker", "--check", env=clean_env(KEEPER_TASK_QUEUE="x" * 201)
    )
    assert from_file.returncode == 1 and from_file.stdout == "", explain(from_file)
    assert "temporal.adress" in from_file.stderr and f"Fix {broken}" in from_file.stderr
    error = error_of(as_json)
    assert "temporal.adress" in error["message"] and error["config_file"] == str(broken)
    assert error["hint"].startswith(f"Fix {broken}")

    assert no_file.returncode == 1, explain(no_file)
    assert "no such config file" in no_file.stderr and "--config" in no_file.stderr

    # The file is fine; the variable on top of it is not, and is named as what to fix.
    assert from_variable.returncode == 1, explain(from_variable)
    assert "temporal.task_queue" in from_variable.stderr, explain(from_variable)
    assert "Fix the variable KEEPER_TASK_QUEUE" in from_variable.stderr, explain(from_variable)


def test_system_exit_with_a_message_and_an_unexpected_error_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @cli.command("raise-for-test", hidden=True)
    @click.argument("what")
    def raiser(what: str) -> None:
        if what == "message":
            raise SystemExit("the operation failed, in words")
        if what == "code":
            raise SystemExit(3)
        raise RuntimeError("unexpected")

    try:
        assert run(["raise-for-test", "message"]) == 1
        assert capsys.readouterr().err.strip() == "Error: the operation failed, in words"
        assert run(["--json", "raise-for-test", "message"]) == 1
        captured = capsys.readouterr()
        error = json.loads(captured.out)["error"]
        assert error["message"] == "the operation failed, in words"
        assert run(["raise-for-test", "code"]) == 3
        assert run(["raise-for-test", "bug"]) == 1
        err = capsys.readouterr().err
        assert "Traceback" in err and "internal error: RuntimeError: unexpected" in err
    finally:
        cli.commands.pop("raise-for-test")


@contextlib.contextmanager
def frontend_gone_after_connect() -> Iterator[str]:
    """A Temporal frontend that answers the connect, then UNAVAILABLE to every call: what a
    command sees of a server that goes down once it connected. The SDK retries each call
    for about 10 s and logs every retry."""
    import grpc
    from temporalio.api.workflowservice.v1 import GetSystemInfoResponse

    def unavailable(request: bytes, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAVAILABLE, "the server is down")

    class Frontend(grpc.GenericRpcHandler):
        def service(self, details: Any) -> Any:
            if details.method.endswith("/GetSystemInfo"):
                return grpc.unary_unary_rpc_method_handler(
                    lambda request, context: GetSystemInfoResponse().SerializeToString()
                )
            return grpc.unary_unary_rpc_method_handler(unavailable)

    server = grpc.server(ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers([Frontend()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_the_sdks_own_log_lines_stay_off_stdout_when_the_server_goes_away(
    config: Path,
) -> None:
    with frontend_gone_after_connect() as address:
        result = keeper("--config", str(config), "--address", address, "tpu", "status", "s1",
                        "--json")  # fmt: skip
    # stdout holds the error document and nothing else: `keeper ... --json | jq` reads it.
    error = error_of(result)
    assert "Temporal stopped answering (UNAVAILABLE)" in error["message"], explain(result)
    assert "keeper-dev status" in error["hint"]
    # The retries the SDK logged are diagnostics, in Python's logging on stderr.
    assert "temporalio_client::retry" in result.stderr, explain(result)
    assert "retried" in result.stderr and "Traceback" not in result.stderr, explain(result)


# -- data on stdout, diagnostics on stderr -------------------------------------------------


def test_dev_status_and_down_reports_are_the_data_and_unhealthy_is_exit_3(
    config: Path, tmp_path: Path
) -> None:
    text, as_json, output_json = [
        keeper_dev("--config", str(config), "status", *extra, cwd=tmp_path)
        for extra in ([], ["--json"], ["-o", "json"])
    ]
    assert text.returncode == 3, explain(text)
    assert "temporal" in text.stdout and "Temporal UI:" in text.stdout
    assert "Not everything is healthy" in text.stderr and "Not everything" not in text.stdout
    for result in (as_json, output_json):
        assert result.returncode == 3, explain(result)
        report = json.loads(result.stdout)
        assert report["healthy"] is False and report["ui_url"].startswith("http://")
        assert report["components"]["temporal"]["state"] == "stopped"

    # `down` with --json: its progress on stderr, the report after it on stdout.
    down = keeper_dev("--config", str(config), "down", "--json", cwd=tmp_path)
    assert down.returncode == 0, explain(down)
    assert "Stopping the dev stack" in down.stderr
    after = json.loads(down.stdout)
    assert {c["state"] for c in after["components"].values()} <= {"stopped", "disabled"}


def test_worker_check_prints_the_plan_without_a_server(config: Path) -> None:
    text, as_json, tpu_only, global_json, own_text = keepers(
        [
            ["--config", str(config), "worker", "--check"],
            ["--config", str(config), "worker", "--check", "--json"],
            ["--config", str(config), "worker", "--check", "-o", "json", "--family", "tpu"],
            ["--config", str(config), "-o", "json", "worker", "--check"],
            ["--config", str(config), "--json", "worker", "--check", "-o", "text"],
        ]
    )
    # The global -o json asks the command for JSON; the command's own -o text beats it.
    assert json.loads(global_json.stdout)["status"] == "ok", explain(global_json)
    assert own_text.stdout == text.stdout, explain(own_text)
    assert text.returncode == 0 and text.stderr == "", explain(text)
    assert "keeper-tpu" in text.stdout and "keeper-runners" in text.stdout
    plan = json.loads(as_json.stdout)
    assert plan["status"] == "ok" and plan["namespace"] == "from-file"
    queues = {family["name"]: family["task_queue"] for family in plan["families"]}
    assert queues == {
        "tpu": "keeper-tpu",
        "runners": "keeper-runners",
        "reclaim": "keeper-reclaim",
        "watch": "keeper-watch",
    }
    assert plan["legacy_task_queue"] == "keeper"
    tpu = json.loads(tpu_only.stdout)
    assert [family["name"] for family in tpu["families"]] == ["tpu"]
    assert "TpuSliceBootstrap" in tpu["families"][0]["workflows"]
    assert tpu["legacy_task_queue"] is None


async def keeper_async(*args: str, env: dict[str, str] | None = None, module: str = KEEPER) -> Any:
    """keeper (or keeper-dev) in a subprocess without blocking the loop an in-process server
    runs on."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args,
        cwd=REPO, env=env or clean_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT)
    return subprocess.CompletedProcess(
        ["python", "-m", module, *args], process.returncode, out.decode(), err.decode()
    )


async def test_emulator_commands_print_data_on_stdout_and_json_on_request(
    emu: TpuEmulator, tmp_path: Path
) -> None:
    host, port = emu.control_url.removeprefix("http://").rsplit(":", 1)
    path = tmp_path / "keeper.yaml"
    path.write_text(yaml.safe_dump({"emulator": {"host": host, "control_port": int(port)}}))
    config = ["--config", str(path)]

    async def keeper_dev_async(*args: str) -> Any:
        return await keeper_async(*args, module=KEEPER_DEV)

    added = await keeper_dev_async(*config, "emulator", "fault", "getnode", "unavailable", "--json")
    assert added.returncode == 0 and added.stderr == "", explain(added)
    fault = json.loads(added.stdout)["fault"]  # the names as the emulator spells them
    assert (fault["method"], fault["code"], fault["count"]) == ("GetNode", "UNAVAILABLE", 1)
    assert [f["method"] for f in emu.state()["faults"]] == ["GetNode"]

    text = await keeper_dev_async(*config, "emulator", "fault", "GetQueuedResource", "ABORTED")
    assert text.returncode == 0 and text.stderr == "", explain(text)
    assert text.stdout == "fault added: the next 1 call(s) of GetQueuedResource fail with ABORTED\n"

    state = await keeper_dev_async(*config, "emulator", "state", "-o", "json")
    assert state.returncode == 0, explain(state)
    assert len(json.loads(state.stdout)["faults"]) == 2

    scenario = await keeper_dev_async(
        *config, "emulator", "scenario", "conv-a", "--inline", '{"assign_after": 5}', "--json"
    )
    assert scenario.returncode == 0, explain(scenario)
    accepted = json.loads(scenario.stdout)
    assert accepted["slice_id"] == "conv-a" and accepted["scenario"]["assign_after"] == 5

    before = emu.state()["now"]
    advanced = await keeper_dev_async(*config, "emulator", "advance", "90s", "--json")
    assert advanced.returncode == 0, explain(advanced)
    moved = json.loads(advanced.stdout)
    assert moved["advanced_by"] == 90.0 and moved["now"].endswith("Z")
    assert moved["now"] != before


# -- the global --address and --namespace --------------------------------------------------


def test_address_and_namespace_flags_beat_the_variables_and_the_file(config: Path) -> None:
    from_env = clean_env(TEMPORAL_ADDRESS="127.0.0.1:7001", TEMPORAL_NAMESPACE="from-env")
    flags = ["--address", "127.0.0.1:7002", "--namespace", "from-flag"]
    plans = keepers(
        [
            ["--config", str(config), "worker", "--check", "--json"],
            ["--config", str(config), *flags, "worker", "--check", "--json"],
        ],
        env=from_env,
    )
    seen = [json.loads(result.stdout) for result in plans]
    assert (seen[0]["address"], seen[0]["namespace"]) == ("127.0.0.1:7001", "from-env")
    assert (seen[1]["address"], seen[1]["namespace"]) == ("127.0.0.1:7002", "from-flag")

    # A command that connects dials the flag's address (nothing listens there).
    closed = f"127.0.0.1:{free_port()}"
    status = keeper(
        "--config", str(config), "--address", closed, "tpu", "status", "train-a", env=from_env
    )
    assert status.returncode == 1, explain(status)
    assert closed in status.stderr and "7001" not in status.stderr, explain(status)


# -- interrupted: 130 ----------------------------------------------------------------------


def test_ctrl_c_exits_130(tmp_path: Path) -> None:
    path = tmp_path / "keeper.yaml"
    # A remote Temporal that never answers (TEST-NET-1): `keeper-dev up` waits for it.
    path.write_text(
        yaml.safe_dump(
            {
                "temporal": {"address": "192.0.2.1:7233", "db_file": str(tmp_path / "t.db")},
                "tpu": {"endpoint": "gcp"},
                "worker": {"log_dir": str(tmp_path / "logs")},
                "runners": {"github": {"api_url": "https://github.invalid"}},
            }
        )
    )
    process = subprocess.Popen(
        interruptible_module(KEEPER_DEV, "--config", str(path), "up", "--timeout", "60"),
        cwd=tmp_path,
        env=clean_env(PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with _killed_at_exit(process):
        assert process.stdout is not None
        for line in process.stdout:  # waits for the line, however long the start takes
            if "not starting a server" in line:
                break
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Interrupted" in err


@contextlib.contextmanager
def _killed_at_exit(process: subprocess.Popen[str]) -> Iterator[None]:
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- --help of every command and group -----------------------------------------------------


def subcommands(group: click.Group) -> dict[str, click.Command]:
    """A group's subcommands through click's API: `keeper`'s are imported as they are asked
    for (cli/lazy.py), so its `commands` holds only those loaded so far."""
    context = click.Context(group)
    found = {name: group.get_command(context, name) for name in group.list_commands(context)}
    return {name: command for name, command in found.items() if command is not None}


def _commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[Any]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(subcommands(command).items()):
            if not sub.hidden:
                yield from _commands(sub, (*path, name))


# Options of `keeper tpu` that have no help text yet (cli/tpu/commands.py): listed so
# that no new one goes unnoticed, and checked to still lack it, so the list only shrinks.
UNDOCUMENTED: dict[tuple[str, ...], set[str]] = {}


# Help is as wide as COLUMNS says, on a pipe or not: the same for both ways of running it.
HELP_COLUMNS = "80"


def keeper_in_process(*args: str, module: str = KEEPER) -> subprocess.CompletedProcess[str]:
    """`keeper ARGS` (`keeper-dev ARGS`) through the same entry point (cli.main.run, dev.main.run)
    in this process, without keeper's or Temporal's variables: for output that does not depend
    on the process, such as --help, where a subprocess per command would spend its time
    importing keeper."""
    drop = {*ENV_OVERRIDES, CONFIG_ENV}
    env: dict[str, str | None] = {k: None for k in os.environ if k in drop}
    env["COLUMNS"] = HELP_COLUMNS
    with CliRunner().isolation(env=env) as (out, err, _):
        # The runner forces 80 columns; the real command sizes its help from COLUMNS.
        click.formatting.FORCED_WIDTH = None
        code = (run if module == KEEPER else run_dev)(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    argv = [sys.executable, "-m", module, *args]
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


@pytest.mark.parametrize(
    ("module", "group", "sample", "at_least"),
    [
        (KEEPER, cli, [[], ["tpu", "bootstrap"], ["runner", "delete"]], 20),
        (KEEPER_DEV, keeper_dev_group, [[], ["up"], ["demo", "reclaim"]], 15),
    ],
    ids=["keeper", "keeper-dev"],
)
def test_every_command_and_group_has_help_documenting_each_option(
    module: str, group: click.Group, sample: list[list[str]], at_least: int
) -> None:
    commands = list(_commands(group))
    assert len(commands) > at_least
    results = [keeper_in_process(*path, "--help", module=module) for path, _ in commands]
    # The in-process help is what the real command prints: checked on a few subprocesses.
    sampled = keepers(
        [[*path, "--help"] for path in sample], clean_env(COLUMNS=HELP_COLUMNS), module=module
    )
    for path, result in zip(sample, sampled, strict=True):
        assert result.returncode == 0, explain(result)
        assert result.stdout == keeper_in_process(*path, "--help", module=module).stdout
    program = PROGRAMS[module]
    for (path, command), result in zip(commands, results, strict=True):
        assert result.returncode == 0 and result.stderr == "", explain(result)
        usage, description = result.stdout.split("\n\n", 2)[:2]
        assert usage.startswith(f"Usage: {program} {' '.join(path)}".rstrip()), explain(result)
        assert len(description.strip()) > 20, explain(result)  # a description, not only usage
        lacking = UNDOCUMENTED.get(path, set())
        for param in command.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            for opt in param.opts:
                assert opt in result.stdout, f"{program} {' '.join(path)} --help lacks {opt}"
            if param.opts[0] in lacking:
                assert not param.help, f"{param.opts[0]} now has help: drop it from UNDOCUMENTED"
            else:
                assert param.help, f"{program} {' '.join(path)} {param.opts[0]} has no help text"
        if isinstance(command, click.Group):
            for name, sub in subcommands(command).items():
                if not sub.hidden:
                    assert f"  {name}" in result.stdout, f"{path} --help does not list {name}"


@pytest.mark.parametrize(
    ("module", "groups"),
    [(KEEPER, [[], ["tpu"]]), (KEEPER_DEV, [[], ["demo"], ["emulator"]])],
    ids=["keeper", "keeper-dev"],
)
def test_bare_groups_show_their_help_and_exit_0(module: str, groups: list[list[str]]) -> None:
    for result, path in zip(keepers(groups, module=module), groups, strict=True):
        assert result.returncode == 0, explain(result)
        usage = f"Usage: {PROGRAMS[module]} {' '.join(path)}".rstrip()
        assert result.stdout.startswith(usage), explain(result)
        assert result.stderr == ""
