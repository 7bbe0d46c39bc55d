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
from google.protobuf import any_pb2, message
from google.rpc import status_pb2

from emulators.tpu.clock import to_datetime


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
        packed.Pack(response if response is not None else _empty())
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


def _empty() -> message.Message:
    from google.protobuf import empty_pb2

    return empty_pb2.Empty()


class OperationStore:
    def __init__(self) -> None:
        self._ops: dict[str, OpRecord] = {}
        self._seq = itertools.count(1)

    def new(self, location: str, verb: str, target: str, at: float) -> OpRecord:
        name = f"{location}/operations/operation-{next(self._seq)}-{uuid.uuid4().hex[:12]}"
        op = OpRecord(name=name, verb=verb, target=target, created_at=at)
        self._ops[name] = op
        return op

    def get(self, name: str) -> OpRecord | None:
        return self._ops.get(name)

    def list(self, prefix: str) -> list[OpRecord]:
        return [op for name, op in self._ops.items() if name.startswith(prefix)]

    def delete(self, name: str) -> bool:
        return self._ops.pop(name, None) is not None

    def __len__(self) -> int:
        return len(self._ops)
