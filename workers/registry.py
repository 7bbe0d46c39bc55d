"""Everything one keeper worker serves: each workflow family adds its entries here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud import tpu_v2
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.worker import Interceptor

from activities.health import HealthActivities, HealthProber
from activities.reconciler import ReconcilerActivities
from activities.runners import GitHubActivities, ProviderActivities, RunnerStoreActivities
from activities.sweeper import SweeperActivities
from activities.tpu import TpuActivities
from runtime.runner_deps import RunnerDeps
from runtime.settings import Settings
from workers.input_guard import InputGuard, InputHelp
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

_PLACE = {"project": "my-project", "zone": "us-central2-b"}
# What a workflow started with no input (or several) tells its caller, by workflow type.
# Every entry of WORKFLOWS has one, and each example is a valid input (tests/test_inputs.py).
INPUT_HELP: dict[str, InputHelp] = {
    "TpuSliceBootstrap": InputHelp(
        example={
            "slice_name": "train-a",
            **_PLACE,
            "accelerator_type": "v4-32",
            "runtime_version": "tpu-ubuntu2204-base",
            "capacity": "on-demand",
        }
    ),
    "TpuSliceBootstrapRun": InputHelp(
        note="TpuSliceBootstrap starts this phase workflow itself; start TpuSliceBootstrap."
    ),
    "TpuSliceTeardown": InputHelp(
        example={"slice_name": "train-a", **_PLACE, "reason": "job finished"}
    ),
    "TpuSweeper": InputHelp(example={**_PLACE, "dry_run": True}),
    "RunnerDeletion": InputHelp(example={"runner": "r-1"}),
    "RunnerReconciler": InputHelp(
        note="The runner-reconciler schedule starts it with the worker's settings.",
        example={"scopes": ["org:my-org"]},
    ),
}
# The Replayer needs the same two as the worker, or a history it replays could diverge.
WORKFLOW_INTERCEPTORS: list[Interceptor] = [InputGuard(INPUT_HELP)]
# A run input that does not validate fails its workflow at once instead of its first task
# (forever), for every workflow, including one whose definition forgets to say so.
WORKFLOW_FAILURE_EXCEPTION_TYPES: list[type[BaseException]] = [ValidationError]


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
        compensation_stuck_after=settings.bootstrap.compensation_stuck_after,
    )
    health = HealthActivities(
        HealthProber(concurrency=settings.health.concurrency, timeout=settings.health.timeout)
    )
    sweeper = SweeperActivities(
        tpu,
        client,
        delete_timeout=settings.sweeper.delete_timeout,
        max_concurrent_deletes=settings.sweeper.max_concurrent_deletes,
    )
    store = RunnerStoreActivities(runners.store)
    github = GitHubActivities(runners.github)
    provider = ProviderActivities(runners.provider, runners.leases)
    reconciler = ReconcilerActivities(
        runners.store, runners.github, runners.provider, client, runners.leases
    )
    return [
        tpu.create_slice,
        tpu.observe_slice,
        tpu.delete_slice,
        tpu.compensation_policy,
        health.check_health,
        sweeper.find_sweep_candidates,
        sweeper.survey_owned_resources,
        store.advance_lane,
        store.finish_deleted,
        store.record_leak,
        github.remove_registration,
        github.deregister,
        provider.delete_instance,
        provider.provider_delete,
        reconciler.reconcile_pass,
    ]
