"""One way to reach Temporal: the dev server, a self-hosted cluster or Temporal Cloud."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import TLSConfig

from runtime.settings import TemporalSettings


def tls_config(settings: TemporalSettings) -> TLSConfig | bool:
    tls = settings.tls
    # As with the temporal CLI, naming any TLS file or an API key turns TLS on.
    wants_tls = tls.enabled or any((tls.ca_cert, tls.client_cert, tls.server_name))
    if not wants_tls and settings.api_key is None:
        return False
    if not (tls.ca_cert or tls.client_cert or tls.server_name):
        # API keys on Temporal Cloud need TLS with the system roots and nothing else.
        return True
    return TLSConfig(
        server_root_ca_cert=tls.ca_cert.read_bytes() if tls.ca_cert else None,
        client_cert=tls.client_cert.read_bytes() if tls.client_cert else None,
        client_private_key=tls.client_key.read_bytes() if tls.client_key else None,
        domain=tls.server_name,
    )


async def connect(settings: TemporalSettings, interceptors: Sequence[Interceptor] = ()) -> Client:
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        tls=tls_config(settings),
        data_converter=pydantic_data_converter,
        interceptors=interceptors,
    )
