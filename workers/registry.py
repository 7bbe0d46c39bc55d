"""Everything keeper's workflow families serve, combined: what the replayer and a worker
that serves every family on one task queue (the tests, the benchmarks) register."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud import tpu_v2
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.worker import Interceptor

from keeper.runtime.reclaim.deps import ReclaimDeps
from keeper.runtime.runners.deps import RunnerDeps
from keeper.runtime.settings import Settings
from keeper.runtime.watch.deps import WatchDeps
from keeper.workers.alerts import distinct_activities
from keeper.workers.families import FAMILIES
from keeper.workers.families.tpu import TpuDeps
from keeper.workers.input_guard import InputGuard, InputHelp

WORKFLOWS: list[type] = [wf for family in FAMILIES.values() for wf in family.workflows]

# What a workflow started with no input (or several) tells its caller, by workflow type.
# Every entry of WORKFLOWS has one, and each example is a valid input (tests/common/test_inputs.py).
INPUT_HELP: dict[str, InputHelp] = {
    name: help for family in FAMILIES.values() for name, help in family.input_help.items()
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
    reclaim: ReclaimDeps | None = None,
    watch: WatchDeps | None = None,
) -> list[Callable[..., Any]]:
    """Every family's activities on clients the caller opened (tests and benchmarks); the
    reclaim and watch families' only when their clients are given."""
    return distinct_activities(
        [
            *FAMILIES["tpu"].activities(settings, client, TpuDeps(tpu_client)),
            *FAMILIES["runners"].activities(settings, client, runners),
            *(FAMILIES["reclaim"].activities(settings, client, reclaim) if reclaim else []),
            *(FAMILIES["watch"].activities(settings, client, watch) if watch else []),
        ]
    )
