"""Injected API faults: the next N calls of a method fail with a chosen gRPC status."""

from __future__ import annotations

from typing import Any, Literal

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


class FaultBook:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        self._faults.append(fault)

    def clear(self) -> None:
        self._faults.clear()

    def take(self, method: str, resource_ids: set[str]) -> Fault | None:
        """Consume one use of the first fault matching this call, if any."""
        for fault in self._faults:
            if fault.method not in ("*", method):
                continue
            if fault.slice is not None and fault.slice not in resource_ids:
                continue
            fault.count -= 1
            if fault.count == 0:
                self._faults.remove(fault)
            return fault
        return None

    def to_json(self) -> list[dict[str, Any]]:
        return [fault.model_dump() for fault in self._faults]
