"""Per-slice behaviour of the emulated cloud: how long each phase takes and what goes wrong.

Scenarios are looked up live by QR id (or node id for nodes created without a queued
resource), falling back to a default. Looking them up on every evaluation, rather than
snapshotting at create time, lets the demo flip a VM to unhealthy on a running slice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import grpc
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

# Terminal states a scenario may force on a queued resource.
TerminalState = Literal["FAILED", "SUSPENDING", "SUSPENDED", "DELETING"]


class Terminal(BaseModel):
    """Force a queued resource into a state it never leaves on its own."""

    model_config = ConfigDict(extra="forbid")

    state: TerminalState
    # Seconds counted from the QR's create time.
    after: float = Field(default=0.0, ge=0)
    message: str = ""
    # google.rpc.Code carried in failed_data.error for FAILED; a name or a number.
    code: int | str = 13

    @field_validator("code")
    @classmethod
    def _code_is_known(cls, value: int | str) -> int | str:
        status_code(value)
        return value


def status_code(value: int | str) -> int:
    """google.rpc.Code number for a grpc.StatusCode name or number; ValueError otherwise."""
    if isinstance(value, int):
        if any(code.value[0] == value for code in grpc.StatusCode):
            return value
        raise ValueError(f"unknown status code {value}")
    try:
        return grpc.StatusCode[value.upper()].value[0]
    except KeyError:
        raise ValueError(f"unknown status code {value!r}") from None


class Scenario(BaseModel):
    """Timings in seconds of emulator time; None means "never"."""

    model_config = ConfigDict(extra="forbid")

    # From create until capacity is assigned (PROVISIONING). Late fulfilment is simply a
    # large value, e.g. 4200.
    assign_after: float | None = Field(default=1.0, ge=0)
    # From PROVISIONING until ACTIVE (for a plain node: from create until READY).
    active_after: float | None = Field(default=1.0, ge=0)
    # From ACTIVE/READY until the VMs get their IPs and boot.
    ips_after: float | None = Field(default=0.5, ge=0)
    # Slice-wide VM indices that never get an IP.
    vms_without_ip: list[int] = Field(default_factory=list)
    # VMs per node; None means domain.tpu.topology.vms_per_node(accelerator_type).
    vm_count: int | None = Field(default=None, ge=1)
    # From IP assignment until the VM listens on its health port and phones home.
    health_after: float = Field(default=0.0, ge=0)
    unhealthy_vms: list[int] = Field(default_factory=list)
    unreachable_vms: list[int] = Field(default_factory=list)
    phone_home: bool = True
    terminal: Terminal | None = None
    # How long a deleted QR or node stays in DELETING before it is gone.
    delete_duration: float = Field(default=0.5, ge=0)


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: Scenario | None = None
    slices: dict[str, Scenario] = Field(default_factory=dict)


def load_scenario_file(path: str | Path) -> ScenarioFile:
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return ScenarioFile.model_validate(raw)


class ScenarioBook:
    """Scenarios keyed by QR id or node id, with a default for everything else."""

    def __init__(self, default: Scenario, by_id: dict[str, Scenario] | None = None) -> None:
        self._initial_default = default
        self._initial_by_id = dict(by_id or {})
        self.default = default
        self.by_id: dict[str, Scenario] = dict(self._initial_by_id)

    def get(self, *ids: str | None) -> Scenario:
        for key in ids:
            if key is not None and key in self.by_id:
                return self.by_id[key]
        return self.default

    def set(self, key: str, scenario: Scenario) -> None:
        self.by_id[key] = scenario

    def remove(self, key: str) -> bool:
        return self.by_id.pop(key, None) is not None

    def reset(self) -> None:
        self.default = self._initial_default
        self.by_id = dict(self._initial_by_id)

    def to_json(self) -> dict:
        return {
            "default": self.default.model_dump(mode="json"),
            "slices": {k: v.model_dump(mode="json") for k, v in self.by_id.items()},
        }
