"""Long-running operations as google.longrunning.Operation messages.

Operations are finished by the state machine at the transition that completes them; the
response is packed at that moment, so a later delete cannot change what a create returned.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from google.cloud.tpu_v2.types import cloud_tpu
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, message
from google.rpc import status_pb2

from emulators.clock import to_datetime


@dataclass
class OpRecord:
    name: str
    verb: str
    target: str
    created_at: float
    done: bool = False
    ended_at: float | None = None
    response: any_pb2.Any | None = None
    error: status_pb2.Status | None = None
    cancel_requested: bool = False
    request_id: str | None = field(default=None)

    def finish(self, at: float, response: message.Message | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.ended_at = at
        packed = any_pb2.Any()
        packed.Pack(response if response is not None else empty_pb2.Empty())
        self.response = packed

    def fail(self, at: float, code: int, text: str) -> None:
        if self.done:
            return
        self.done = True
        self.ended_at = at
        self.error = status_pb2.Status(code=code, message=text)

    def to_pb(self) -> operations_pb2.Operation:
        meta = cloud_tpu.OperationMetadata(
            create_time=to_datetime(self.created_at),
            target=self.target,
            verb=self.verb,
            cancel_requested=self.cancel_requested,
            api_version="v2",
        )
        if self.ended_at is not None:
            meta.end_time = to_datetime(self.ended_at)
        op = operations_pb2.Operation(name=self.name, done=self.done)
        op.metadata.Pack(cloud_tpu.OperationMetadata.pb(meta))
        if self.error is not None:
            op.error.CopyFrom(self.error)
        elif self.response is not None:
            op.response.CopyFrom(self.response)
        return op


class OperationStore(dict[str, OpRecord]):
    """Operations by name."""

    def __init__(self) -> None:
        super().__init__()
        self._seq = itertools.count(1)

    def new(self, location: str, verb: str, target: str, at: float) -> OpRecord:
        name = f"{location}/operations/operation-{next(self._seq)}-{uuid.uuid4().hex[:12]}"
        op = self[name] = OpRecord(name=name, verb=verb, target=target, created_at=at)
        return op

    def under(self, prefix: str) -> list[OpRecord]:
        return [op for name, op in self.items() if name.startswith(prefix)]
