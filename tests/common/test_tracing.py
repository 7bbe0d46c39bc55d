"""Spans cover workflows, activities, TPU API calls and health rounds."""

from __future__ import annotations

from datetime import timedelta

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from emulators.tpu import Scenario, TpuEmulator
from keeper.domain.tpu.models import BootstrapResult
from keeper.domain.tpu.naming import bootstrap_workflow_id
from keeper.runtime.settings import TracingSettings
from keeper.runtime.tracing import setup_tracing, shutdown_tracing
from keeper.workflows.tpu.bootstrap import TpuSliceBootstrap
from tests.harness import running_worker, slice_request


def test_tracing_is_off_without_an_endpoint():
    assert setup_tracing(TracingSettings()) == []


async def test_a_bootstrap_is_traced_end_to_end(dev_env, emu: TpuEmulator):
    emu.set_default_scenario(Scenario(assign_after=0.3, active_after=0.3, ips_after=0.1))
    exporter = InMemorySpanExporter()
    interceptors = setup_tracing(TracingSettings(), exporter=exporter)
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
        interceptors=interceptors,
    )
    request = slice_request(poll_interval=timedelta(seconds=1))
    async with running_worker(client, emu) as worker:
        await client.execute_workflow(
            TpuSliceBootstrap.run,
            request,
            id=bootstrap_workflow_id(request.slice_name),
            task_queue=worker.task_queue,
            result_type=BootstrapResult,
        )
    shutdown_tracing()
    names = {span.name for span in exporter.get_finished_spans()}
    assert "StartWorkflow:TpuSliceBootstrap" in names
    assert "RunWorkflow:TpuSliceBootstrap" in names
    assert "RunWorkflow:TpuSliceBootstrapRun" in names
    assert "RunActivity:tpu.create_slice" in names
    assert "tpu.ListQueuedResources" in names
    assert "tpu.Create" in names
    assert "health.round" in names
