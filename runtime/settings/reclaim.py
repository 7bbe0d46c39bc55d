"""The job-reclaim family's settings: spur's controller, the tap and intake, the memory, timing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from keeper.domain.common.durations import HumanDuration
from keeper.domain.reclaim.identity import NodeNameError, canonical_node
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.steps import Mode
from keeper.runtime.settings.base import Section, checked_host_port, checked_store_url


class ReclaimSettings(Section):
    """Job reclaim beside a spur controller (docs/reclaim.md)."""

    # observe: every decision is made and shown (UI, `keeper reclaim list`) and nothing is
    # cancelled or drained; act: keeper cancels, kills and drains. Start in observe.
    mode: Mode = Mode.OBSERVE
    # The real controller: what the tap forwards to and what keeper reads and drains.
    # Unset: emulator.host:emulator.spur_controller_port, the dev stack's spur emulator.
    controller_address: str = "127.0.0.1:6817"
    # Where the tap listens: the agents' controller address (spurd --controller).
    tap_address: str = "127.0.0.1:6819"
    # The HTTP intake (POST /report) served beside the tap.
    intake_address: str = "127.0.0.1:6820"
    # Where `keeper reclaim tap` serves Prometheus metrics (/metrics: its counters,
    # keeper_reclaim_tap_*), e.g. "0.0.0.0:9466". Off ("") unless set, like the worker's.
    metrics_address: str = ""
    # The bearer token for the controller and agents: KEEPER_SPUR_TOKEN wins over this file;
    # it never enters a workflow payload. Unset and no variable: calls go anonymous.
    token_file: Path | None = None
    # keeper's reclaim memory (holdings first seen, jobs seen, epochs, drains it owns):
    # sqlite:///path or postgresql://user@host:5432/db.
    store_url: str = "sqlite:///.dev/reclaim.db"
    call_timeout: HumanDuration = Field(default=timedelta(seconds=10), gt=timedelta(0))
    # spur's own controller-to-agent cancel deadline is 5 s.
    cancel_timeout: HumanDuration = Field(default=timedelta(seconds=5), gt=timedelta(0))
    # Node names that differ by more than case or domain: name -> the node it is
    # (domain/reclaim/identity.py has the rule for the rest).
    node_aliases: dict[str, str] = Field(default_factory=dict)
    # The timing rules (domain/reclaim/policy.py).
    timing: ReclaimPolicy = Field(default_factory=ReclaimPolicy)
    # How often the intake reads every job (the watermark and the epoch need the whole job
    # map); in between it reads only the jobs a batch reports.
    full_read_interval: HumanDuration = Field(default=timedelta(seconds=60), gt=timedelta(0))
    # How long the intake gathers heartbeats before one controller read decides them all.
    batch_window: HumanDuration = Field(default=timedelta(milliseconds=200), gt=timedelta(0))

    @field_validator("mode", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        # KEEPER_RECLAIM_MODE=ACT means act.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("node_aliases")
    @classmethod
    def _aliases_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, node in value.items():
            try:
                canonical_node(name)
                canonical_node(node)
            except NodeNameError as err:
                raise ValueError(f"{name}: {err}") from None
        return value

    @field_validator("controller_address", "tap_address", "intake_address")
    @classmethod
    def _host_port(cls, value: str, info: ValidationInfo) -> str:
        # The tap and the intake may listen on port 0 (any free port); keeper dials the
        # controller, which needs a real one.
        least = 1 if info.field_name == "controller_address" else 0
        return checked_host_port(value, f"reclaim.{info.field_name}", least)

    @field_validator("metrics_address")
    @classmethod
    def _metrics_host_port(cls, value: str) -> str:
        # "" serves nothing; port 0 takes any free one.
        return value and checked_host_port(value, "reclaim.metrics_address", 0)

    @field_validator("store_url")
    @classmethod
    def _usable_store(cls, value: str) -> str:
        # The message shows the URL with its password hidden.
        return checked_store_url(value, "reclaim memory")

    @field_validator("token_file")
    @classmethod
    def _token_file_named(cls, value: Path | None) -> Path | None:
        if value is not None and str(value) in ("", "."):
            raise ValueError("reclaim.token_file is empty; name the file, or leave it unset")
        return value
