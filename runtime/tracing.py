"""OpenTelemetry setup shared by the worker and the CLI.

Spans are exported over OTLP only when an endpoint is configured; otherwise no provider is
installed and every span is a no-op, so tracing costs nothing when it is off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from temporalio.client import Interceptor

    from keeper.runtime.settings import TracingSettings

TRACER_NAME = "keeper"
_installed: TracerProvider | None = None


def setup_tracing(
    settings: TracingSettings, exporter: SpanExporter | None = None
) -> list[Interceptor]:
    """Installs a tracer provider when there is somewhere to send spans.

    Returns the Temporal interceptors to pass to `Client.connect`; workers inherit them.
    """
    global _installed
    if exporter is None and not settings.otlp_endpoint:
        return []
    # Imported only when tracing is on: with the SDK's contrib (and its worker), a tenth of
    # a second that every `keeper` command connecting to Temporal would otherwise pay.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from temporalio.contrib.opentelemetry import TracingInterceptor

    if _installed is None:
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint)
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.service_name}))
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _installed = provider
    return [TracingInterceptor()]


def shutdown_tracing() -> None:
    if _installed is not None:
        _installed.shutdown()


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)
