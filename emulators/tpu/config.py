"""Settings of one emulator instance."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from emulators.tpu.scenario import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
_PREFIX_RE = re.compile(r"^127(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){0,2}$")


class EmulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    # 0 picks a free port; the chosen one is on TpuEmulator.grpc_target / control_url.
    grpc_port: int = Field(default=0, ge=0, le=65535)
    control_port: int = Field(default=0, ge=0, le=65535)
    # Loopback prefix of 1-3 octets the VM addresses are carved from ("127.20" ->
    # 127.20.x.y). Distinct prefixes keep emulators (or processes) apart.
    ip_prefix: str = "127.20"
    # Used when a node's metadata has no keeper-health-port.
    vm_health_port: int = Field(default=8080, ge=1, le=65535)
    # Path answered by a VM's health endpoint (metadata keeper-health-path overrides).
    vm_health_path: str = "/healthz"
    # Where VMs phone home; None means this emulator's own control API /register.
    registration_url: str | None = None
    # YAML with `default:` and `slices:`; a relative path that does not exist under the
    # working directory is looked up from the repository root (where the demo file lives).
    scenario_file: str | Path | None = None
    # Used unless the scenario file has its own `default:`.
    default_scenario: Scenario = Field(default_factory=Scenario)
    # Background evaluation period, so VMs boot with nobody reading.
    tick_seconds: float = Field(default=0.2, gt=0)
    # The most items one List page holds: a page_size above it, or none, gets this many,
    # and the rest follows behind next_page_token. Cloud TPU does not publish its cap.
    max_page_size: int = Field(default=1000, ge=1)
    # At most this many VMs phone home at once (each opens its own connection).
    phone_home_concurrency: int = Field(default=32, ge=1)

    @field_validator("ip_prefix")
    @classmethod
    def _loopback_prefix(cls, value: str) -> str:
        value = value.rstrip(".")
        if not _PREFIX_RE.match(value):
            raise ValueError("ip_prefix must be 1-3 octets starting with 127, e.g. '127.20'")
        return value

    def scenario_path(self) -> Path | None:
        if self.scenario_file is None:
            return None
        path = Path(self.scenario_file)
        if not path.is_absolute() and not path.exists():
            from_repo = REPO_ROOT / path
            if from_repo.exists():
                return from_repo
        return path

    @field_validator("vm_health_path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("vm_health_path must start with '/'")
        return value
