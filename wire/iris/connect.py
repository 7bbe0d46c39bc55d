"""The Connect protocol around the iris messages: method paths, headers, and the error body.

A unary Connect call is `POST <base>/<package>.<Service>/<Method>` with the JSON request as
body; a success is HTTP 200 with the JSON response, a failure a non-200 status whose body
is `{"code": "not_found", "message": ..., "details": [{"type": ..., "value": <base64>}]}`.
iris wraps server exceptions with the detail `iris.rpc.ErrorDetails`; its `value` is the
binary protobuf encoding, which this module reads and writes for the four fields it has.
"""

from __future__ import annotations

import base64
import binascii
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from keeper.wire.iris.codec import Int64, WireMessage, number

CONTROLLER_SERVICE = "iris.cluster.ControllerService"
LOG_SERVICE = "iris.logging.LogService"
FINELOG_LOG_SERVICE = "finelog.logging.LogService"


def controller_path(method: str) -> str:
    return f"/{CONTROLLER_SERVICE}/{method}"


LAUNCH_JOB = controller_path("LaunchJob")
GET_JOB_STATUS = controller_path("GetJobStatus")
GET_JOB_STATE = controller_path("GetJobState")
TERMINATE_JOB = controller_path("TerminateJob")
LIST_JOBS = controller_path("ListJobs")
GET_TASK_STATUS = controller_path("GetTaskStatus")
LIST_TASKS = controller_path("ListTasks")
GET_TASK_LOGS = controller_path("GetTaskLogs")  # deprecated; absent from the newest
PROFILE_TASK = controller_path("ProfileTask")
EXEC_IN_CONTAINER = controller_path("ExecInContainer")
FETCH_LOGS = f"/{LOG_SERVICE}/FetchLogs"
FINELOG_FETCH_LOGS = f"/{FINELOG_LOG_SERVICE}/FetchLogs"
# The newest controller serves no LogService itself: its endpoint proxy forwards to the log
# server registered as the endpoint `/system/log-server` (a `/` in the name becomes `.`).
LOG_SERVER_PROXY = "/proxy/system.log-server"
PROXIED_FETCH_LOGS = f"{LOG_SERVER_PROXY}{FINELOG_FETCH_LOGS}"

CONTENT_TYPE = "application/json"
PROTOCOL_VERSION_HEADER = "Connect-Protocol-Version"
PROTOCOL_VERSION = "1"
TIMEOUT_HEADER = "Connect-Timeout-Ms"


class Code(StrEnum):
    """Connect error codes, as they appear in the error body (snake_case gRPC names)."""

    CANCELED = "canceled"
    UNKNOWN = "unknown"
    INVALID_ARGUMENT = "invalid_argument"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    FAILED_PRECONDITION = "failed_precondition"
    ABORTED = "aborted"
    OUT_OF_RANGE = "out_of_range"
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"
    DATA_LOSS = "data_loss"
    UNAUTHENTICATED = "unauthenticated"

    @classmethod
    def parse(cls, value: object) -> Code:
        text = str(value).strip().lower()
        try:
            return cls(text)
        except ValueError:
            return cls.UNKNOWN


# The HTTP status a server sends with each code (Connect protocol specification).
HTTP_STATUS: dict[Code, int] = {
    Code.CANCELED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}

# The code a client infers when the body is not a Connect error (a proxy's page, or a
# server without the route: a 404 there means the method does not exist).
CODE_OF_HTTP_STATUS: dict[int, Code] = {
    400: Code.INTERNAL,
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.UNIMPLEMENTED,
    429: Code.UNAVAILABLE,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.UNAVAILABLE,
}


def code_of_http_status(status: int) -> Code:
    return CODE_OF_HTTP_STATUS.get(status, Code.UNKNOWN)


ERROR_DETAILS_TYPE = "iris.rpc.ErrorDetails"


class ErrorDetails(WireMessage):
    """iris.rpc.ErrorDetails, the detail iris attaches to errors its handlers wrap."""

    exception_type: str = number(1, "")
    message: str = number(2, "")
    traceback: str = number(3, "")  # the full Python traceback: never shown to a user
    timestamp_ms: Int64 = number(4, 0)

    def encode(self) -> bytes:
        """The binary protobuf encoding (a Connect detail's value)."""
        out = bytearray()
        for field, text in ((1, self.exception_type), (2, self.message), (3, self.traceback)):
            if text:
                data = text.encode("utf-8")
                out += _varint(field << 3 | 2) + _varint(len(data)) + data
        if self.timestamp_ms:
            out += _varint(4 << 3) + _varint(self.timestamp_ms & 0xFFFF_FFFF_FFFF_FFFF)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> ErrorDetails:
        """Read the binary encoding; unknown fields are skipped. Raises ValueError."""
        values: dict[str, Any] = {}
        names = {1: "exception_type", 2: "message", 3: "traceback"}
        pos = 0
        while pos < len(data):
            key, pos = _read_varint(data, pos)
            field, wire_type = key >> 3, key & 7
            if wire_type == 0:
                value, pos = _read_varint(data, pos)
                if field == 4:
                    values["timestamp_ms"] = value - (1 << 64) if value >= 1 << 63 else value
            elif wire_type == 2:
                size, pos = _read_varint(data, pos)
                if pos + size > len(data):
                    raise ValueError("truncated field")
                if field in names:
                    values[names[field]] = data[pos : pos + size].decode("utf-8", "replace")
                pos += size
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            else:
                raise ValueError(f"unsupported wire type {wire_type}")
        if pos > len(data):
            raise ValueError("truncated field")
        return cls(**values)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


class ErrorDetail(BaseModel):
    """One entry of a Connect error's `details`: a protobuf Any, value base64 without
    padding; `debug` is an optional JSON rendering some servers add."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str = ""
    value: str = ""
    debug: dict[str, Any] | None = None

    @classmethod
    def of(cls, details: ErrorDetails) -> ErrorDetail:
        value = base64.b64encode(details.encode()).decode("ascii").rstrip("=")
        return cls(type=ERROR_DETAILS_TYPE, value=value)

    def error_details(self) -> ErrorDetails | None:
        """The iris.rpc.ErrorDetails this carries, or None (another type, or unreadable)."""
        if self.type.rsplit("/", 1)[-1] != ERROR_DETAILS_TYPE:
            return None
        if self.debug:
            try:
                return ErrorDetails.model_validate(self.debug)
            except ValueError:
                pass
        text = self.value.strip().replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
            return ErrorDetails.decode(raw)
        except (binascii.Error, ValueError):
            return None


class ConnectErrorBody(BaseModel):
    """The JSON body of a failed Connect unary call."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    code: str = Code.UNKNOWN.value
    message: str = ""
    details: list[ErrorDetail] = Field(default_factory=list)

    @property
    def connect_code(self) -> Code:
        return Code.parse(self.code)

    def error_details(self) -> ErrorDetails | None:
        for detail in self.details:
            found = detail.error_details()
            if found is not None:
                return found
        return None

    @classmethod
    def of(cls, code: Code, message: str, details: ErrorDetails | None = None) -> ConnectErrorBody:
        return cls(
            code=code.value,
            message=message,
            details=[ErrorDetail.of(details)] if details is not None else [],
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code}
        if self.message:
            body["message"] = self.message
        if self.details:
            body["details"] = [
                detail.model_dump(mode="json", exclude_none=True) for detail in self.details
            ]
        return body
