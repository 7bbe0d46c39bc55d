"""Everything one keeper worker serves: each workflow family adds its entries here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud import tpu_v2
from temporalio.client import Client

from activities.health import HealthActivities, HealthProber
from activities.reconciler import ReconcilerActivities
from activities.runners import GitHubActivities, ProviderActivities, RunnerStoreActivities
from activities.sweeper import SweeperActivities
from activities.tpu import TpuActivities
from runtime.runner_deps import RunnerDeps
from runtime.settings import Settings
from workflows.runner_deletion import RunnerDeletion
from workflows.runner_reconciler import RunnerReconciler
from workflows.tpu_bootstrap import TpuSliceBootstrap
from workflows.tpu_bootstrap_run import TpuSliceBootstrapRun
from workflows.tpu_sweeper import TpuSweeper
from workflows.tpu_teardown import TpuSliceTeardown

WORKFLOWS: list[type] = [
    TpuSliceBootstrap,
    TpuSliceBootstrapRun,
    TpuSliceTeardown,
    TpuSweeper,
    RunnerDeletion,
    RunnerReconciler,
]


def build_activities(
    settings: Settings,
    client: Client,
    tpu_client: tpu_v2.TpuAsyncClient,
    runners: RunnerDeps,
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
    store = RunnerStoreActivities(runners.store)
    github = GitHubActivities(runners.github)
    provider = ProviderActivities(runners.provider)
    reconciler = ReconcilerActivities(runners.store, runners.github, runners.provider, client)
    return [
        tpu.create_slice,
        tpu.observe_slice,
        tpu.delete_slice,
        health.check_health,
        sweeper.find_sweep_candidates,
        store.advance_lane,
        store.finish_deleted,
        store.record_leak,
        github.remove_registration,
        provider.delete_instance,
        reconciler.reconcile_pass,
    ]
