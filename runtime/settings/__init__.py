"""keeper's deployment settings: `temporal-dev.yaml`, then the environment on top.

The Temporal connection is the temporal CLI's: a profile of its TOML file and the variables it
reads (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_PROFILE,
TEMPORAL_CONFIG_FILE), resolved by `temporalio.envconfig` on top of the file's `temporal:`
section (runtime/temporal_env.py), so one shell configures both `temporal` and `keeper`.
Everything else has a KEEPER_* variable. The local stack's ports follow `dev.port_base`
(runtime/dev_ports.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import yaml
from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from keeper.domain.common.durations import HumanDuration
from keeper.domain.common.secret_text import header_secret_problem
from keeper.runtime import dev_ports, temporal_env
from keeper.runtime.settings.base import (
    Section,
    SettingsConflict,
    SettingsError,
    checked_host_port,
)
from keeper.runtime.settings.reclaim import ReclaimSettings
from keeper.runtime.settings.runners import RunnerSettings
from keeper.runtime.settings.tpu import (
    BootstrapSettings,
    HealthSettings,
    SweeperSettings,
    TpuEndpoint,
    TpuSettings,
)
from keeper.runtime.settings.watch import WatchSettings

# Known before the settings are parsed (runtime/settings_file.py); importable from here too.
from keeper.runtime.settings_file import (
    BUILD_ID_ENV,
    DEFAULT_DEPLOYMENT,
    config_path,
    package_build_id,
)
from keeper.runtime.settings_file import CONFIG_ENV as CONFIG_ENV
from keeper.runtime.settings_file import DEFAULT_CONFIG_FILE as DEFAULT_CONFIG_FILE
from keeper.runtime.settings_file import DISTRIBUTION as DISTRIBUTION

if TYPE_CHECKING:
    from temporalio.envconfig import ClientConfigTLS
else:
    # Only envconfig makes one (runtime/temporal_env.py), and only when a profile or a
    # TEMPORAL_* variable is set: the settings do not import the SDK for a type.
    ClientConfigTLS = Any


# The workflow families a worker can serve, each on its own task queue (workers/families/).
FAMILY_NAMES = ("tpu", "runners", "reclaim", "watch")


class TemporalSettings(Section):
    # A profile and the TEMPORAL_* variables override both (runtime/temporal_env.py).
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    # The temporal CLI profile to connect with (TEMPORAL_PROFILE wins), and the TOML file
    # that holds it (TEMPORAL_CONFIG_FILE wins; unset: the temporal CLI's own file).
    profile: str | None = None
    profile_file: Path | None = None
    # The stem of every family's task queue (keeper-tpu, keeper-runners). Workflows started
    # before the families had queues of their own ran on the stem itself, which a worker
    # serving every family drains (docs/operations.md#task-queues).
    task_queue: str = Field(default="keeper", min_length=1, max_length=200)
    ui_port: int = 8233
    ui_url: str | None = None  # for real clusters; the dev server's is derived from ui_port
    db_file: Path = Path(".dev/temporal.db")
    # The credentials come from the profile or the environment only, never from this file.
    api_key: SecretStr | None = None
    # As envconfig resolved it; kept out of reprs and dumps, since it may carry a client key.
    tls: ClientConfigTLS | None = Field(default=None, repr=False, exclude=True)
    rpc_metadata: dict[str, SecretStr] = Field(default_factory=dict, repr=False)

    @field_validator("tls")
    @classmethod
    def _envconfig_tls(cls, value: Any) -> Any:
        # The type check ClientConfigTLS stands for, made only when there is a value (and
        # so envconfig was loaded to make it).
        if value is not None:
            from temporalio.envconfig import ClientConfigTLS as Tls

            if not isinstance(value, Tls):
                raise ValueError(
                    f"expected envconfig's ClientConfigTLS, not {type(value).__name__}"
                )
        return value

    @field_validator("api_key")
    @classmethod
    def _sendable_key(cls, value: SecretStr | None) -> SecretStr | None:
        # gRPC would refuse it on every call, quoting it; say so once, without it.
        problem = header_secret_problem(value.get_secret_value()) if value else None
        if problem:
            raise ValueError(f"TEMPORAL_API_KEY {problem}; set it to the API key alone")
        return value

    @property
    def ui_base(self) -> str:
        if self.ui_url:
            return self.ui_url.rstrip("/")
        host = self.address.rsplit(":", 1)[0]
        return f"http://{host}:{self.ui_port}"

    def family_queue(self, family: str) -> str:
        """The task queue of one workflow family: its workflows and activities run there."""
        if family not in FAMILY_NAMES:
            raise ValueError(
                f"unknown workflow family {family!r}; one of {', '.join(FAMILY_NAMES)}"
            )
        return f"{self.task_queue}-{family}"

    def workflow_url(self, workflow_id: str, run_id: str | None = None) -> str:
        """The workflow in the Temporal UI. With its run: that run's User Metadata tab, where
        keeper's workflows keep what an operator needs (the phase, the deadline, the failing
        VMs, the command to run next: workflow.set_current_details). The UI (2.x; the
        temporal CLI's dev server serves 2.54) names that route
        /namespaces/NS/workflows/ID/RUN/user-metadata and has no route to it without the
        run: a bare workflow link opens the latest run's timeline, which is what this gives
        when the run is not known. The id is one path segment: a watch id's slashes are
        escaped, or the UI would read what follows the first one as the run."""
        url = f"{self.ui_base}/namespaces/{quote(self.namespace, safe='')}/workflows/"
        url += quote(workflow_id, safe="")
        return f"{url}/{quote(run_id, safe='')}/user-metadata" if run_id else url


class DevSettings(Section):
    # Moves every port of the local stack at once, for a second stack on one host:
    # base+0 Temporal gRPC ... base+5 VM health, base+6..9 spur emulator and reclaim tap,
    # base+10 iris emulator, base+11 the worker's metrics (runtime/dev_ports.py).
    port_base: int | None = Field(
        default=None, ge=dev_ports.PORT_BASE_MIN, le=dev_ports.PORT_BASE_MAX
    )
    # Where the dev stack's worker serves Prometheus metrics (/metrics), the port base's
    # base+11; "" serves none. Only `keeper-dev up` reads it: a worker run on its own serves
    # metrics at worker.metrics_address, which, set, wins here too.
    metrics_address: str = "127.0.0.1:9464"

    @field_validator("metrics_address")
    @classmethod
    def _metrics_host_port(cls, value: str) -> str:
        return value and checked_host_port(value, "dev.metrics_address")


class EmulatorSettings(Section):
    host: str = "127.0.0.1"
    grpc_port: int = 8470
    control_port: int = 8471
    ip_prefix: str = "127.20"
    vm_health_port: int = 8080
    github_port: int = 8472
    scenario_file: Path | None = Path("emulators/scenarios/demo.yaml")
    # The spur emulator (emulators/spur) the dev stack runs for job reclaim: its controller
    # (spur's own port; reclaim.controller_address follows it when unset), its control API,
    # and its agents, gpu-node-01 .. NN on free ports, which dial reclaim.tap_address.
    spur_controller_port: int = 6817
    spur_control_port: int = 6821
    spur_agents: int = Field(default=3, ge=1, le=64)
    # spurd beats every 30 s; the dev stack's agents beat faster so the demo is quick.
    spur_heartbeat_interval: HumanDuration = Field(default=timedelta(seconds=2), gt=timedelta(0))
    # spurd's SIGTERM -> SIGKILL delay is 5 s.
    spur_kill_grace: HumanDuration = Field(default=timedelta(seconds=1), ge=timedelta(0))
    # The iris emulator (emulators/iris) the dev stack runs for job watch: its Connect
    # endpoint and control API share this port (iris's own); watch.controller_url follows it.
    iris_port: int = 10000


class TracingSettings(Section):
    otlp_endpoint: str | None = None
    service_name: str = "keeper"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class WorkerSettings(Section):
    log_dir: Path = Path(".dev/logs")
    graceful_shutdown: HumanDuration = timedelta(seconds=30)
    # Workflows kept in memory between tasks. Below the number in flight (a burst of runner
    # deletions), every task of an evicted workflow replays its history first.
    max_cached_workflows: int = Field(default=5000, ge=0)
    # A Worker Deployment version (docs/operations.md#rollouts). Off only for the test
    # suite and for clusters without Worker Deployments.
    versioned: bool = True
    deployment_name: str = Field(default=DEFAULT_DEPLOYMENT, min_length=1, max_length=255)
    # Each release needs a build id of its own, such as the image tag: workers of one build
    # id must run one code.
    build_id: str = Field(default_factory=package_build_id, min_length=1, max_length=255)
    # The families this worker serves (`keeper worker --family`); a family left out opens
    # none of its clients and creates none of its schedules.
    families: list[str] = Field(default_factory=lambda: list(FAMILY_NAMES), min_length=1)
    # Activity slots of the TPU family's worker; the runner family's are sized by
    # runners.max_concurrent_deletions, since each in-flight deletion may hold one.
    tpu_activity_slots: int = Field(default=100, ge=1, le=10000)
    # The TPU family's cache, below the others': its runs wait in assign for hours with no
    # task to run (the poll is an activity's retries), so a cached one only holds memory,
    # about 0.2 MiB each, and an evicted one replays a history of a few dozen events at its
    # next task. docs/operations.md#scaling has the figures.
    tpu_max_cached_workflows: int = Field(default=1000, ge=0)
    # Where the worker serves Prometheus metrics (/metrics): the SDK's temporal_* and
    # keeper's keeper_* (runtime/metrics.py), e.g. "0.0.0.0:9464". Off ("") unless set, so
    # several workers on one host (the dev stack, the tests) never fight over a port.
    metrics_address: str = ""
    # The worker's log lines on stderr: text for a terminal, json (one object a line, with
    # the workflow and run ids) for a log pipeline.
    log_format: LogFormat = LogFormat.TEXT
    # HOST:PORT of the worker's health endpoint (GET /healthz, /readyz; runtime/health.py),
    # e.g. 0.0.0.0:9465 in a container; "" serves none.
    health_address: str = ""

    @field_validator("families", mode="before")
    @classmethod
    def _split_families(cls, value: Any) -> Any:
        # KEEPER_WORKER_FAMILIES=tpu,runners
        return (
            [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
        )

    @field_validator("families")
    @classmethod
    def _known_families(cls, value: list[str]) -> list[str]:
        unknown = [f for f in value if f not in FAMILY_NAMES]
        if unknown:
            known = ", ".join(FAMILY_NAMES)
            raise ValueError(f"unknown workflow family {', '.join(unknown)}; choose from {known}")
        return list(dict.fromkeys(value))

    @field_validator("metrics_address", "health_address")
    @classmethod
    def _host_port(cls, value: str, info: ValidationInfo) -> str:
        # "" serves nothing.
        return value and checked_host_port(value, f"worker.{info.field_name}")

    @field_validator("log_format", mode="before")
    @classmethod
    def _format_any_case(cls, value: Any) -> Any:
        # KEEPER_LOG_FORMAT=JSON means json.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("deployment_name")
    @classmethod
    def _no_dot(cls, value: str) -> str:
        if "." in value:
            raise ValueError(
                "must not contain '.': Temporal writes a version as <deployment>.<build id>; "
                "choose a name without dots"
            )
        return value


class AlertSettings(Section):
    """The one alert channel of every family: a Slack-compatible incoming webhook."""

    # KEEPER_ALERT_WEBHOOK_URL wins over this file; with neither, an alert is only logged.
    # The URL is a secret: it never enters a workflow's history.
    webhook_url_file: Path | None = None
    # One post's HTTP deadline; the alert activity retries a few times, then gives up.
    timeout: HumanDuration = Field(default=timedelta(seconds=10), gt=timedelta(0))

    @field_validator("webhook_url_file")
    @classmethod
    def _file_named(cls, value: Path | None) -> Path | None:
        if value is not None and str(value) in ("", "."):
            raise ValueError("alerts.webhook_url_file is empty; name the file, or leave it unset")
        return value


class Settings(Section):
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    tpu: TpuSettings = Field(default_factory=TpuSettings)
    bootstrap: BootstrapSettings = Field(default_factory=BootstrapSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    emulator: EmulatorSettings = Field(default_factory=EmulatorSettings)
    sweeper: SweeperSettings = Field(default_factory=SweeperSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    runners: RunnerSettings = Field(default_factory=RunnerSettings)
    reclaim: ReclaimSettings = Field(default_factory=ReclaimSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)
    dev: DevSettings = Field(default_factory=DevSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)

    @model_validator(mode="after")
    def _derive_stack_addresses(self, info: ValidationInfo) -> Settings:
        sources = (info.context or {}).get("sources", {})
        dev_ports.derive(self, sources)
        return self

    def default_health_port(self) -> int:
        """The health port a request gets when it names none: the emulator's VMs answer on
        emulator.vm_health_port, real VMs on the request's default."""
        if self.tpu.endpoint is TpuEndpoint.EMULATOR:
            return self.emulator.vm_health_port
        from keeper.domain.tpu.slice_request import SliceRequest

        default = SliceRequest.model_fields["health_port"].default
        assert isinstance(default, int)
        return default


# Environment variable -> dotted settings path. Later entries win, so a KEEPER_* variable
# beats the generic OpenTelemetry one. The TEMPORAL_* variables are envconfig's
# (runtime/temporal_env.py).
ENV_OVERRIDES: dict[str, str] = {
    "KEEPER_TASK_QUEUE": "temporal.task_queue",
    "KEEPER_UI_URL": "temporal.ui_url",
    "KEEPER_TPU_ENDPOINT": "tpu.endpoint",
    "KEEPER_TPU_EMULATOR_ADDRESS": "tpu.emulator_address",
    "KEEPER_TPU_PROJECT": "tpu.project",
    "KEEPER_TPU_ZONE": "tpu.zone",
    "KEEPER_POLL_INTERVAL": "bootstrap.poll_interval",
    "KEEPER_RUNNER_STORE_URL": "runners.store_url",
    "KEEPER_GITHUB_API_URL": "runners.github.api_url",
    "KEEPER_GITHUB_TOKEN_FILE": "runners.github.token_file",
    "KEEPER_PROVIDER_EXECUTABLE": "runners.provider.executable",
    "KEEPER_PROVIDER_CONFIG_FILE": "runners.provider.config_file",
    "KEEPER_RECLAIM_MODE": "reclaim.mode",
    "KEEPER_SPUR_CONTROLLER": "reclaim.controller_address",
    "KEEPER_SPUR_TOKEN_FILE": "reclaim.token_file",
    "KEEPER_RECLAIM_STORE_URL": "reclaim.store_url",
    "KEEPER_RECLAIM_METRICS_ADDRESS": "reclaim.metrics_address",
    "KEEPER_IRIS_CONTROLLER": "watch.controller_url",
    "KEEPER_WATCH_STORE_URL": "watch.store_url",
    "KEEPER_IRIS_TOKEN_FILE": "watch.token_file",
    BUILD_ID_ENV: "worker.build_id",
    "KEEPER_WORKER_VERSIONED": "worker.versioned",
    "KEEPER_WORKER_FAMILIES": "worker.families",
    "KEEPER_METRICS_ADDRESS": "worker.metrics_address",
    "KEEPER_LOG_FORMAT": "worker.log_format",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "tracing.otlp_endpoint",
    "KEEPER_OTLP_ENDPOINT": "tracing.otlp_endpoint",
    dev_ports.PORT_BASE_ENV: "dev.port_base",
    "KEEPER_ALERT_WEBHOOK_URL_FILE": "alerts.webhook_url_file",
    "KEEPER_HEALTH_ADDRESS": "worker.health_address",
}


# What keeper read before 1.0 and reads no longer -> what took its place. Set, it is refused by
# name rather than ignored: an alert URL nobody reads would lose every alert quietly.
RETIRED: dict[str, str] = {
    "KEEPER_WATCH_WEBHOOK_URL": "KEEPER_ALERT_WEBHOOK_URL",
    "KEEPER_WATCH_WEBHOOK_URL_FILE": "KEEPER_ALERT_WEBHOOK_URL_FILE",
    "watch.webhook_url_file": "alerts.webhook_url_file",
}


def _retired_in(tree: dict[str, Any], env: Mapping[str, str], file: Path) -> None:
    for old, new in RETIRED.items():
        section, _, key = old.partition(".")
        if key:
            found = isinstance(tree.get(section), dict) and key in tree[section]
            where = f"{file}: {old}"
        else:
            found = bool(env.get(old))
            where = old
        if found:
            raise SettingsError(
                f"{where} was retired in keeper 1.0: the one alert channel reads {new}; "
                "move the value there"
            )


def _set_path(tree: dict[str, Any], dotted: str, value: str) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise SettingsError(f"{dotted}: expected a mapping in the config file")
    node[leaf] = value


def _with_connection(
    tree: dict[str, Any], env: Mapping[str, str], file: Path, sources: dict[str, str]
) -> None:
    """Puts the profile's and the TEMPORAL_* variables' values over the file's `temporal:`."""
    section = tree.get("temporal") or {}
    if not isinstance(section, dict):
        raise SettingsError(f"{file}: temporal: expected a mapping")
    for key, variables in temporal_env.CREDENTIAL_KEYS.items():
        if key in section:
            # Never quoted: the value may be a secret.
            raise SettingsError(
                f"{file}: temporal.{key}: keeper reads Temporal credentials from a temporal "
                f"CLI profile ({temporal_env.PROFILE_FILE_ENV}, {temporal_env.PROFILE_ENV}) "
                f"or the environment ({variables}), not from its settings file; move it there"
            )
    try:
        connection = temporal_env.resolve(section, env)
    except temporal_env.ProfileError as err:
        raise SettingsError(str(err)) from None
    tree["temporal"] = {**section, **connection.values}
    sources.update({f"temporal.{k}": v for k, v in connection.sources.items()})


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"])
    if where:
        return f"{where}: {error['msg']}"
    # A check across sections (dev_ports) names its settings itself.
    cause = error.get("ctx", {}).get("error")
    return str(cause) if cause is not None else str(error["msg"])


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    file = config_path(path, env)
    tree: dict[str, Any] = {}
    if file.exists():
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as err:
            raise SettingsError(f"{file}: not valid YAML: {err}") from err
        if not isinstance(loaded, dict):
            raise SettingsError(f"{file}: the top level must be a mapping")
        tree = loaded
    elif path is not None:
        raise SettingsError(f"{file}: no such config file")
    _retired_in(tree, env, file)
    sources: dict[str, str] = {}
    for var, dotted in ENV_OVERRIDES.items():
        if env.get(var):
            _set_path(tree, dotted, env[var])
            sources[dotted] = var
    _with_connection(tree, env, file, sources)
    try:
        return Settings.model_validate(tree, context={"sources": sources})
    except ValidationError as err:
        errors = err.errors()
        problems = "; ".join(_problem(e) for e in errors)
        conflict = any(
            isinstance(e.get("ctx", {}).get("error"), dev_ports.PortConflict) for e in errors
        )
        # Not chained: pydantic quotes each input, and one may be a secret.
        raise (SettingsConflict if conflict else SettingsError)(f"{file}: {problems}") from None
