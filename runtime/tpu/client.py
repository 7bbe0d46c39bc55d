"""The real google-cloud-tpu client, pointed at the emulator or at GCP."""

from __future__ import annotations

import grpc
from google.cloud import tpu_v2
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcAsyncIOTransport

from keeper.runtime.settings.tpu import TpuEndpoint, TpuSettings


def emulator_client(target: str) -> tpu_v2.TpuAsyncClient:
    # A transport built on an explicit channel ignores credentials, which is what lets the
    # unmodified client talk to the local emulator.
    channel = grpc.aio.insecure_channel(target)
    return tpu_v2.TpuAsyncClient(transport=TpuGrpcAsyncIOTransport(channel=channel))


def make_tpu_client(settings: TpuSettings) -> tpu_v2.TpuAsyncClient:
    if settings.endpoint is TpuEndpoint.EMULATOR:
        return emulator_client(settings.emulator_address)
    # Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud auth
    # application-default login, or the metadata server on GCE/GKE.
    return tpu_v2.TpuAsyncClient()
