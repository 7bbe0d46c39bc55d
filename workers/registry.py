"""Everything one keeper worker serves: each workflow family adds its entries here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud import tpu_v2
from temporalio.client import Client

from activities.health import HealthActivities, HealthProber
from activities.sweeper import SweeperActivities
from activities.tpu import TpuActivities
from runtime.settings import Settings
from workflows.tpu_bootstrap import TpuSliceBootstrap
from workflows.tpu_bootstrap_run import TpuSliceBootstrapRun
from workflows.tpu_sweeper import TpuSweeper
from workflows.tpu_teardown import TpuSliceTeardown

WORKFLOWS: list[type] = [TpuSliceBootstrap, TpuSliceBootstrapRun, TpuSliceTeardown, TpuSweeper]


def build_activities(
    settings: Settings, client: Client, tpu_client: tpu_v2.TpuAsyncClient
) -> list[Callable[..., Any]]:
    tpu = TpuActivities(
        tpu_client,
        call_timeout=settings.tpu.call_timeout,
        max_backoff=settings.bootstrap.max_backoff,
    )
    health = HealthActivities(
        HealthProber(concurrency=settings.health.concurrency, timeout=settings.health.timeout)
    )
    sweeper = SweeperActivities(tpu, client)
    return [
        tpu.create_slice,
        tpu.observe_slice,
        tpu.delete_slice,
        health.check_health,
        sweeper.find_sweep_candidates,
    ]
