"""The job-watch family's settings: the iris controller, the launch store, the runbook's rules."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator

from keeper.domain.common.durations import HumanDuration
from keeper.domain.watch.cadence import CadencePolicy
from keeper.domain.watch.escalation import EscalationPolicy
from keeper.domain.watch.liveness_models import LivenessPolicy
from keeper.domain.watch.policy import WatchPolicy
from keeper.runtime.settings.base import Section, checked_store_url


class WatchSettings(Section):
    """Job watch beside an iris controller (docs/watch.md)."""

    # The iris controller's Connect endpoint. Unset: http://emulator.host:emulator.iris_port,
    # the dev stack's iris emulator.
    controller_url: str = "http://127.0.0.1:10000"
    # The bearer token (an iris JWT or API key): KEEPER_IRIS_TOKEN wins over this file; it
    # never enters a workflow payload. Unset and no variable: calls go anonymous.
    token_file: Path | None = None
    call_timeout: HumanDuration = Field(default=timedelta(seconds=30), gt=timedelta(0))
    # keeper's launch store: the full request of a job `keeper job run` launched with
    # secrets, for an approved restart (its watch's history holds it redacted). The CLI
    # writes it and the worker reads it: give both the same URL. sqlite:///path or
    # postgresql://user@host:5432/db.
    store_url: str = "sqlite:///.dev/watch.db"
    # The delta probe: two reads of utime+stime this far apart.
    probe_gap: HumanDuration = Field(default=timedelta(seconds=3), gt=timedelta(0))
    # Worker tasks whose CPU counters each check reads, beside the coordinator's.
    cpu_sample_workers: int = Field(default=4, ge=0, le=64)
    # Log lines read from each of the coordinator and the workers per check.
    log_lines_per_check: int = Field(default=5000, ge=100, le=100_000)
    # A run continues as new after this many history events, or when Temporal suggests it.
    history_events_limit: int = Field(default=2000, ge=200, le=40_000)
    # The runbook's rules (domain/watch/cadence.py, liveness_models.py, escalation.py).
    cadence: CadencePolicy = Field(default_factory=CadencePolicy)
    liveness: LivenessPolicy = Field(default_factory=LivenessPolicy)
    escalation: EscalationPolicy = Field(default_factory=EscalationPolicy)

    def policy(self) -> WatchPolicy:
        """What each watch run receives from the worker (domain/watch/policy.py)."""
        return WatchPolicy(
            cadence=self.cadence,
            liveness=self.liveness,
            escalation=self.escalation,
            probe_gap=self.probe_gap,
            history_events_limit=self.history_events_limit,
        )

    @field_validator("controller_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or any(c.isspace() for c in value):
            raise ValueError(
                f"watch.controller_url {value!r} is not an http(s) URL "
                "(e.g. https://iris.example.com)"
            )
        return value.rstrip("/")

    @field_validator("token_file")
    @classmethod
    def _file_named(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is not None and str(value) in ("", "."):
            raise ValueError(f"watch.{info.field_name} is empty; name the file, or leave it unset")
        return value

    @field_validator("store_url")
    @classmethod
    def _usable_launch_store(cls, value: str) -> str:
        return checked_store_url(value, "launch store")
