"""Injected API faults: the next N calls of a method fail with a chosen gRPC status."""

from __future__ import annotations

from typing import Literal

import grpc
from pydantic import BaseModel, ConfigDict, Field, field_validator

# The methods the emulator serves (grpc_service.py), the ones a fault can name.
TPU_METHODS = (
    "CreateQueuedResource",
    "GetQueuedResource",
    "ListQueuedResources",
    "DeleteQueuedResource",
    "CreateNode",
    "GetNode",
    "ListNodes",
    "DeleteNode",
)
OPERATIONS_METHODS = ("GetOperation", "ListOperations", "DeleteOperation", "CancelOperation")
FAULT_METHODS = (*TPU_METHODS, *OPERATIONS_METHODS)
# The gRPC status codes a fault can fail a call with: every one but OK.
ERROR_CODES = tuple(name for name in grpc.StatusCode.__members__ if name != "OK")


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # gRPC method name such as "GetQueuedResource", or "*" for every method.
    method: str = Field(min_length=1)
    # Any grpc.StatusCode name except OK, e.g. UNAVAILABLE, RESOURCE_EXHAUSTED.
    code: str
    count: int = Field(default=1, ge=1)
    # Only calls about this QR or node id (a QR's nodes included); None means any call.
    slice: str | None = None
    # "before": the call fails and does nothing. "after": the call takes effect and then
    # the caller sees the error, like a create whose response was lost to a timeout.
    when: Literal["before", "after"] = "before"

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        # A misspelt method would match no call, and the fault would silently never fire.
        if value != "*" and value not in FAULT_METHODS:
            raise ValueError(f"unknown method {value!r}; one of *, {', '.join(FAULT_METHODS)}")
        return value

    @field_validator("code")
    @classmethod
    def _known_code(cls, value: str) -> str:
        name = value.upper()
        if name not in grpc.StatusCode.__members__ or name == "OK":
            raise ValueError(f"unknown or non-error gRPC status code {value!r}")
        return name

    @property
    def status(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.code]

    def matches(self, method: str, resource_ids: set[str]) -> bool:
        if self.method not in ("*", method):
            return False
        return self.slice is None or self.slice in resource_ids
