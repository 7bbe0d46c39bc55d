"""keeper's metrics: the table's conventions, the docs, alert rules and dashboard that name
them, and a worker's /metrics scraped over real HTTP after real workflows ran."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.runners.models import DeletionOutcome
from keeper.domain.runners.reconcile import ReconcileRequest
from keeper.domain.tpu.models import BootstrapResult
from keeper.domain.tpu.naming import bootstrap_run_workflow_id, bootstrap_workflow_id
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.runtime import metrics as m
from keeper.runtime.settings import SettingsError, load_settings
from keeper.runtime.tpu.client import emulator_client
from keeper.workers.main import build_worker
from keeper.workflows.runners.reconciler import RunnerReconciler
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests import harness
from tests.e2e_support import wait_for_phase
from tests.harness import assert_no_leaks, free_port, slice_request
from tests.metrics_support import metered_client, scrape_until, value
from tests.runners.world import SCOPE, RunnerWorld

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "keeper-alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "keeper-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"

# The SDK metrics the rules and the dashboard may use, as the worker's endpoint names them
# (https://docs.temporal.io/references/sdk-metrics, with counters_total_suffix and seconds);
# the e2e test below checks that a real worker serves every one.
SDK_METRICS = frozenset(
    {
        "temporal_num_pollers",
        "temporal_worker_task_slots_available",
        "temporal_workflow_task_schedule_to_start_latency",
        "temporal_activity_schedule_to_start_latency",
        "temporal_workflow_completed_total",
        "temporal_activity_execution_latency",
        # Prometheus's own: 0 when a target does not answer its scrape.
        "up",
    }
)
_SUFFIXES = ("_bucket", "_sum", "_count")
_NAME = re.compile(r"\b((?:keeper|temporal)_[a-z0-9_]+|up)\b")


def _base(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in _known():
            return name.removesuffix(suffix)
    return name


def _known() -> frozenset[str]:
    return frozenset(metric.name for metric in m.METRICS) | SDK_METRICS


def _expressions() -> Iterator[tuple[str, str]]:
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            yield f"alert {rule['alert']}", rule["expr"]
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']}", target["expr"]


def test_every_metric_follows_prometheus_naming() -> None:
    names = [metric.name for metric in m.METRICS]
    assert len(names) == len(set(names))
    for metric in m.METRICS:
        assert re.fullmatch(r"keeper_[a-z][a-z0-9_]*", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.kind is m.Kind.COUNTER), metric.name
        if metric.unit == "s":
            assert metric.name.endswith("_seconds"), metric.name
        assert set(metric.labels) <= m.LABELS, metric.name
        assert metric.help and metric.help.endswith("."), metric.name
        assert bool(metric.buckets) == (metric.kind is m.Kind.HISTOGRAM), metric.name


def test_emission_refuses_an_undeclared_label() -> None:
    meter = m.prometheus_runtime(f"127.0.0.1:{free_port()}").metric_meter
    with pytest.raises(ValueError, match="takes labels"):
        m.count(meter, m.BOOTSTRAPS, outcome="done", slice="s-1")
    with pytest.raises(ValueError, match="not a declared gauge"):
        m.gauge(meter, m.BOOTSTRAPS, 1, outcome="done", phase="done")


def test_docs_list_exactly_the_table() -> None:
    section = OPERATIONS.read_text().split("## Metrics and logs", 1)[1]
    rows = re.findall(r"^\| `(keeper_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", section, re.M)
    documented = {name: (kind, labels.strip()) for name, kind, labels in rows}
    declared = {
        metric.name: (metric.kind.value, ", ".join(f"`{label}`" for label in metric.labels))
        for metric in m.METRICS
    }
    assert documented == declared


def test_alert_rules_and_dashboard_name_only_existing_metrics() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert {
        "KeeperCompensationStuck",
        "KeeperRunnerDeletionEscalated",
        "KeeperReclaimDrainedNode",
        "KeeperWatchStalled",
        "KeeperWorkerDown",
        "KeeperNoPollers",
        "KeeperTaskQueueBacklog",
    } <= alerts
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
    seen: set[str] = set()
    for where, expr in _expressions():
        names = {_base(name) for name in _NAME.findall(expr)}
        assert names, f"{where}: {expr!r} names no metric"
        assert names <= _known(), f"{where}: unknown metrics {names - _known()}"
        seen |= names
    dashboard = json.loads(DASHBOARD.read_text())
    titles = " ".join(panel["title"].lower() for panel in dashboard["panels"])
    for family in ("tpu", "runner", "reclaim", "watch", "worker"):
        assert family in titles, f"no panel for {family}"
    # Every keeper metric is on the dashboard or behind an alert.
    assert {metric.name for metric in m.METRICS} <= seen


def test_a_taken_metrics_address_is_an_error_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(m.MetricsEndpointError) as err:
            m.prometheus_runtime(address)
    assert str(err.value).startswith(f"worker.metrics_address {address!r}: cannot serve")
    assert "Address already in use" in str(err.value)


def test_the_metrics_address_and_log_format_come_from_their_variables_and_a_bad_one_is_named(
    tmp_path: Path,
) -> None:
    file = tmp_path / "keeper.yaml"
    file.write_text("worker: {}\n")
    assert load_settings(file, env={}).worker.metrics_address == ""
    env = {"KEEPER_METRICS_ADDRESS": "0.0.0.0:9464", "KEEPER_LOG_FORMAT": "JSON"}
    worker = load_settings(file, env=env).worker
    assert (worker.metrics_address, worker.log_format.value) == ("0.0.0.0:9464", "json")
    with pytest.raises(SettingsError, match=r"worker\.metrics_address 'nine' is not HOST:PORT"):
        load_settings(file, env={"KEEPER_METRICS_ADDRESS": "nine"})
    with pytest.raises(SettingsError, match=r"worker\.log_format"):
        load_settings(file, env={"KEEPER_LOG_FORMAT": "xml"})


async def start_bootstrap(
    client: Client, request: SliceRequest, queue: str
) -> WorkflowHandle[Any, BootstrapResult]:
    return await client.start_workflow(
        TpuSliceBootstrap.run,
        request,
        id=bootstrap_workflow_id(request.slice_name),
        task_queue=queue,
        result_type=BootstrapResult,
    )


@pytest.mark.e2e
async def test_worker_serves_keeper_and_sdk_metrics_after_real_workflows(
    dev_env: WorkflowEnvironment, world: RunnerWorld, emu: TpuEmulator
) -> None:
    client, metrics_url = await metered_client(dev_env)
    settings = harness.settings_for_tests()
    emu.set_default_scenario(Scenario(assign_after=0.5, active_after=0.5, ips_after=0.2))
    world.add_runner("r-metrics")
    request = slice_request(poll_interval=timedelta(seconds=1))
    # Held in assign until cancelled: its supervisor compensates.
    held = slice_request(poll_interval=timedelta(seconds=1))
    emu.set_scenario(held.slice_name, Scenario(assign_after=None, delete_duration=0.3))
    # Held in assign until its supervisor is terminated: the phase child compensates alone.
    orphaned = slice_request(poll_interval=timedelta(seconds=1))
    emu.set_scenario(orphaned.slice_name, Scenario(assign_after=None, delete_duration=0.3))
    worker = build_worker(
        client, settings, emulator_client(emu.grpc_target), world.task_queue, world.deps
    )
    async with worker:
        deletion = await world.request(client, "r-metrics", reason="test")
        cancelled = await start_bootstrap(client, held, world.task_queue)
        bootstrap = await start_bootstrap(client, request, world.task_queue)
        deleted = await asyncio.wait_for(deletion.result(), 60)
        await asyncio.wait_for(
            client.execute_workflow(
                RunnerReconciler.run,
                ReconcileRequest(scopes=[SCOPE]),
                id=f"reconcile-{uuid.uuid4().hex[:6]}",
                task_queue=world.task_queue,
            ),
            60,
        )
        await asyncio.wait_for(bootstrap.result(), 60)
        await wait_for_phase(cancelled, Phase.ASSIGN)
        await cancelled.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(cancelled.result(), 60)
        supervisor = await start_bootstrap(client, orphaned, world.task_queue)
        await wait_for_phase(supervisor, Phase.ASSIGN)
        await supervisor.terminate(reason="test: the supervisor is lost")
        child = client.get_workflow_handle(bootstrap_run_workflow_id(orphaned.slice_name))
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(child.result(), 60)
        scraped = await scrape_until(
            metrics_url,
            {
                "keeper_tpu_bootstraps_total": {"outcome": "done"},
                "keeper_compensations_total": {"event": "finished"},
                "keeper_runner_deletions_total": {"outcome": "deleted"},
                "temporal_workflow_completed_total": {},
            },
            at_least={"keeper_compensations_total": 2},
        )
    assert deleted.outcome is DeletionOutcome.DELETED
    assert value(scraped, "keeper_runner_deletions_total", outcome="deleted") == 1
    assert value(scraped, "keeper_runner_records", status="deleted") == 1
    assert value(scraped, "keeper_runner_records", status="running") == 0
    assert value(scraped, "keeper_tpu_bootstraps_total", outcome="done", phase="done") == 1
    bootstraps = value(scraped, "keeper_tpu_bootstraps_total", outcome="cancelled", phase="assign")
    assert bootstraps == 1
    # The cancel's compensation is counted once (by the supervisor, though its child
    # deleted first); the terminated supervisor's by its child, the only one left.
    for event, times in (("started", 2), ("finished", 2), ("stuck", 0)):
        assert value(scraped, "keeper_compensations_total", family="tpu", event=event) == times
    # Both bootstraps that closed went through submit and assign; only the done one went
    # further. A terminated supervisor counts no phases: its timings died with it.
    for phase, times in ((Phase.SUBMIT, 2), (Phase.ASSIGN, 2), (Phase.PROVISION, 1)):
        assert value(scraped, "keeper_tpu_phase_duration_seconds_count", phase=phase.value) == times
    for phase in (Phase.READY, Phase.HEALTH):
        assert value(scraped, "keeper_tpu_phase_duration_seconds_count", phase=phase.value) == 1
    # Each assign waited at least the emulator's 0.5 s; a histogram in ms would show 1000s.
    assign = value(scraped, "keeper_tpu_phase_duration_seconds_sum", phase="assign")
    assert 1.0 < assign < 60
    # The workflow meter's own labels come along; no resource name is a label.
    series = [dict(pairs) for name, pairs in scraped if name == "keeper_tpu_bootstraps_total"]
    assert series and all(s["workflow_type"] == "TpuSliceBootstrap" for s in series)
    assert not any(request.slice_name in str(pairs) for _, pairs in scraped)
    assert value(scraped, "temporal_workflow_completed_total", workflow_type="RunnerDeletion") >= 1
    served = {_base(name) for name, _ in scraped}
    assert SDK_METRICS - {"up"} - served == set()
    assert_no_leaks(emu, frozenset({request.slice_name}))
