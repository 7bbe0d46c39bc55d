"""The TPU family's settings: the Cloud TPU endpoint, bootstrap budgets, health, the sweeper."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pydantic import Field

from keeper.domain.common.durations import HumanDuration
from keeper.domain.tpu.phases import DEFAULT_DEADLINES, Phase
from keeper.domain.tpu.slice_request import MAX_POLL_INTERVAL, MIN_POLL_INTERVAL
from keeper.runtime.settings.base import SCHEDULE_MIN_INTERVAL, Section


class TpuEndpoint(StrEnum):
    EMULATOR = "emulator"
    GCP = "gcp"


class TpuSettings(Section):
    endpoint: TpuEndpoint = TpuEndpoint.EMULATOR
    # Unset: emulator.host:emulator.grpc_port, where the dev stack's emulator serves.
    emulator_address: str = "127.0.0.1:8470"
    project: str = "keeper-dev"
    zone: str = "us-central2-b"
    call_timeout: HumanDuration = Field(default=timedelta(seconds=30), gt=timedelta(0))


class HealthSettings(Section):
    # Probes in flight per worker; unset, derived from the open-file limit the worker raises
    # at start (domain/tpu/health_round.py). A value caps that bound, and a round over more
    # VMs than the bound goes in waves, each costing up to one timeout.
    concurrency: int | None = Field(default=None, ge=1)
    timeout: HumanDuration = Field(default=timedelta(seconds=2), gt=timedelta(0))


class BootstrapSettings(Section):
    # The phase budgets' defaults are domain/tpu/phases.py's; a value here that differs
    # becomes an explicit override for every bootstrap the CLI starts.
    assign: HumanDuration = DEFAULT_DEADLINES[Phase.ASSIGN]
    provision: HumanDuration = DEFAULT_DEADLINES[Phase.PROVISION]
    ready: HumanDuration = DEFAULT_DEADLINES[Phase.READY]
    health: HumanDuration = DEFAULT_DEADLINES[Phase.HEALTH]
    # A request's bounds, so --check catches what the first bootstrap would refuse.
    poll_interval: HumanDuration = Field(
        default=timedelta(seconds=30), ge=MIN_POLL_INTERVAL, le=MAX_POLL_INTERVAL
    )
    max_backoff: HumanDuration = Field(default=timedelta(minutes=5), gt=timedelta(0))
    # A compensation still deleting after this long is reported as stuck (it goes on).
    compensation_stuck_after: HumanDuration = Field(default=timedelta(minutes=15), gt=timedelta(0))


class SweeperSettings(Section):
    interval: HumanDuration = Field(default=timedelta(minutes=10), ge=SCHEDULE_MIN_INTERVAL)
    # Each orphan's deletion in a pass; one that does not finish is reported and retried
    # by the next pass, so it cannot hold up the others.
    delete_timeout: HumanDuration = Field(default=timedelta(minutes=10), gt=timedelta(0))
    max_concurrent_deletes: int = Field(default=8, ge=1, le=100)
