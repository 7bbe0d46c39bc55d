"""One way to reach Temporal: the dev server, a self-hosted cluster or Temporal Cloud."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import Runtime

from keeper.runtime.sdk_logs import default_runtime
from keeper.runtime.settings import TemporalSettings
from keeper.runtime.waiting import WaitAwareFailureConverter

# Pydantic models as payloads; an expected wait's failure without its stack trace.
DATA_CONVERTER = dataclasses.replace(
    pydantic_data_converter, failure_converter_class=WaitAwareFailureConverter
)


def connect_options(settings: TemporalSettings) -> dict[str, Any]:
    """`Client.connect` keywords for these settings, TLS as envconfig decides it: an API key
    turns it on with the system roots, a TLS section uses its files, `disabled` turns it
    off (as the temporal CLI does)."""
    profile = ClientConfigProfile(
        address=settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        tls=settings.tls,
        grpc_meta={k: v.get_secret_value() for k, v in settings.rpc_metadata.items()},
    )
    options: dict[str, Any] = dict(profile.to_client_connect_config())
    options.setdefault("tls", False)
    return options


async def connect(
    settings: TemporalSettings,
    interceptors: Sequence[Interceptor] = (),
    runtime: Runtime | None = None,
) -> Client:
    """`runtime` is the worker's, serving its metrics; None is `default_runtime()`."""
    return await Client.connect(
        **connect_options(settings),
        data_converter=DATA_CONVERTER,
        interceptors=interceptors,
        runtime=runtime or default_runtime(),
    )
