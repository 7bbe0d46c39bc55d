"""The input of a TPU slice bootstrap, validated before anything is created."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from keeper.domain.common.durations import HumanDuration
from keeper.domain.tpu.naming import (
    LABEL_KEY_RE,
    LABEL_RE,
    RESERVED_LABEL_PREFIX,
    SLICE_NAME_PATTERN,
)
from keeper.domain.tpu.topology import ACCELERATOR_RE, topology_problem, vms_per_node

ZONE_PATTERN = r"^[a-z]+-[a-z]+[0-9]+-[a-z]$"
PROJECT_PATTERN = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"

Duration = Annotated[HumanDuration, Field(gt=timedelta(0))]


class Capacity(StrEnum):
    """Where the chips come from. Only the first three go through the queued-resource API."""

    RESERVED = "reserved"
    SPOT = "spot"
    GUARANTEED = "guaranteed"
    ON_DEMAND = "on-demand"
    PREEMPTIBLE = "preemptible"

    @property
    def queued(self) -> bool:
        return self in (Capacity.RESERVED, Capacity.SPOT, Capacity.GUARANTEED)


class DeadlineOverrides(BaseModel):
    """Per-phase budgets. Unset ones take the defaults in `keeper.domain.tpu.phases`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    assign: Duration | None = None
    provision: Duration | None = None
    ready: Duration | None = None
    health: Duration | None = None


# A request's poll_interval, and bootstrap.poll_interval's, the default for it.
MIN_POLL_INTERVAL = timedelta(seconds=1)
MAX_POLL_INTERVAL = timedelta(minutes=10)


class SliceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slice_name: str = Field(pattern=SLICE_NAME_PATTERN, description="Also the QR and node id.")
    project: str = Field(pattern=PROJECT_PATTERN)
    zone: str = Field(pattern=ZONE_PATTERN)
    accelerator_type: str = Field(pattern=ACCELERATOR_RE.pattern)
    runtime_version: str = Field(min_length=1, max_length=128)
    capacity: Capacity
    reservation_name: str | None = Field(
        default=None,
        pattern=r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="Reservation id in the slice's project and zone; required for reserved.",
    )
    guaranteed_min_duration: Duration | None = None
    # Counts and ports are strict: a quoted "2" from outside is reported, not taken as 2.
    node_count: int = Field(
        default=1, ge=1, le=64, strict=True, description=">1 asks for a multislice."
    )
    vms_per_node: int | None = Field(
        default=None, ge=1, le=4096, strict=True, description="Overrides the accelerator-type rule."
    )
    health_port: int = Field(default=8080, ge=1, le=65535, strict=True)
    health_path: str = Field(default="/health", pattern=r"^/[\x21-\x7e]*$")
    labels: dict[str, str] = Field(default_factory=dict, max_length=48)
    deadlines: DeadlineOverrides = Field(default_factory=DeadlineOverrides)
    poll_interval: HumanDuration = Field(
        default=timedelta(seconds=30),
        ge=MIN_POLL_INTERVAL,
        le=MAX_POLL_INTERVAL,
        description="Time between cloud reads while waiting; bounds API calls per hour.",
    )

    @field_validator("labels")
    @classmethod
    def _labels_are_gcp_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not LABEL_KEY_RE.match(key):
                raise ValueError(f"label key {key!r} must match {LABEL_KEY_RE.pattern}")
            if key.startswith(RESERVED_LABEL_PREFIX):
                raise ValueError(f"label key {key!r}: the 'keeper-' prefix is reserved")
            if not LABEL_RE.match(value):
                raise ValueError(f"label {key!r} value {value!r} must match {LABEL_RE.pattern}")
        return labels

    @field_validator("accelerator_type")
    @classmethod
    def _accelerator_fits_its_topology(cls, accelerator_type: str) -> str:
        problem = topology_problem(accelerator_type)
        if problem is not None:
            raise ValueError(problem)
        return accelerator_type

    @model_validator(mode="after")
    def _capacity_fits(self) -> Self:
        if self.capacity is Capacity.RESERVED and not self.reservation_name:
            raise ValueError("reservation_name is required when capacity is 'reserved'")
        if self.capacity is not Capacity.RESERVED and self.reservation_name:
            raise ValueError("reservation_name is only valid with capacity 'reserved'")
        if self.guaranteed_min_duration and self.capacity is not Capacity.GUARANTEED:
            raise ValueError("guaranteed_min_duration is only valid with capacity 'guaranteed'")
        if self.node_count > 1 and not self.capacity.queued:
            raise ValueError("node_count > 1 (multislice) needs queued capacity")
        return self

    @property
    def expected_vms_per_node(self) -> int:
        return self.vms_per_node or vms_per_node(self.accelerator_type)

    @property
    def expected_vms(self) -> int:
        return self.expected_vms_per_node * self.node_count
