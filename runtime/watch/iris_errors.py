"""Typed failures of calls to the iris controller, one class per way a call can fail.

Each class says whether Temporal may retry it (`retryable`); the client itself never retries.
`non_retryable_types()` is the list an activity's retry policy passes as
`non_retryable_error_types` (Temporal matches an error's class name, not its ancestry, so the
list names every class). No message carries the bearer token: server text is scrubbed.

| Connect code                          | class                | retryable |
|---------------------------------------|----------------------|-----------|
| not_found                             | IrisNotFound         | no        |
| already_exists                        | IrisAlreadyExists    | no        |
| invalid_argument, failed_precondition,| IrisInvalidArgument  | no        |
| out_of_range                          |                      |           |
| unauthenticated, permission_denied    | IrisAuthError        | no        |
| unimplemented (or HTTP 404, no body)  | IrisUnimplemented    | no        |
| unavailable, resource_exhausted,      | IrisUnavailable      | yes       |
| aborted, canceled, connect errors     |                      |           |
| deadline_exceeded, HTTP timeouts      | IrisTimedOut         | yes       |
| internal, unknown, data_loss          | IrisInternal         | yes       |
| a 200 whose body is not the message   | IrisProtocolError    | no        |
"""

from __future__ import annotations

from typing import ClassVar

from keeper.wire.iris.connect import Code, ErrorDetails

# Server messages are short; a longer one is cut so an error stays one readable line.
MESSAGE_LIMIT = 500
TOKEN_SETTINGS = "KEEPER_IRIS_TOKEN or watch.token_file"


class IrisError(Exception):
    """A call to iris failed. `code` is the Connect code (None for a malformed answer).

    Temporal carries only the class name and the message of an activity's failure, so the
    message tells the whole story: method path, controller, code, the server's words.
    """

    retryable: ClassVar[bool] = False

    def __init__(self, message: str, *, code: Code | None = None) -> None:
        super().__init__(message)
        self.code = code


class IrisUnavailable(IrisError):
    """No usable answer: the controller is down, overloaded, unreachable or restarting."""

    retryable = True


class IrisTimedOut(IrisUnavailable):
    """The deadline passed (the server's or the HTTP client's). A write may have applied."""


class IrisNotFound(IrisError):
    """NOT_FOUND: the job or task is not known to the controller."""


class JobNotFound(IrisNotFound):
    """The job `job_id` is not known (for TerminateJob: already gone, or never there)."""

    def __init__(self, message: str, *, job_id: str, code: Code | None = Code.NOT_FOUND) -> None:
        super().__init__(message, code=code)
        self.job_id = job_id


class IrisAlreadyExists(IrisError):
    """ALREADY_EXISTS: LaunchJob found a job of the same `name`."""

    def __init__(self, message: str, *, name: str, code: Code | None = Code.ALREADY_EXISTS) -> None:
        super().__init__(message, code=code)
        self.name = name


class IrisInvalidArgument(IrisError):
    """The controller refused the request itself."""


class IrisAuthError(IrisError):
    """UNAUTHENTICATED or PERMISSION_DENIED, or the token cannot be loaded."""


class IrisUnimplemented(IrisError):
    """The controller has no such method (a version without it)."""


class IrisInternal(IrisError):
    """A server-side exception. `exception_type` and `detail` come from iris.rpc.ErrorDetails;
    its traceback is kept out of the message and of this object."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        exception_type: str = "",
        detail: str = "",
        code: Code | None = Code.INTERNAL,
    ) -> None:
        super().__init__(message, code=code)
        self.exception_type = exception_type
        self.detail = detail


class IrisProtocolError(IrisError):
    """The answer was not the message the method returns (not JSON, wrong shape)."""


class IrisRemoteFailure(IrisError):
    """The controller answered, but the operation on the worker failed (the response's
    `error` field, e.g. a profile of a task whose worker is gone)."""


CLASS_OF_CODE: dict[Code, type[IrisError]] = {
    Code.NOT_FOUND: IrisNotFound,
    Code.ALREADY_EXISTS: IrisAlreadyExists,
    Code.INVALID_ARGUMENT: IrisInvalidArgument,
    Code.FAILED_PRECONDITION: IrisInvalidArgument,
    Code.OUT_OF_RANGE: IrisInvalidArgument,
    Code.UNAUTHENTICATED: IrisAuthError,
    Code.PERMISSION_DENIED: IrisAuthError,
    Code.UNIMPLEMENTED: IrisUnimplemented,
    Code.UNAVAILABLE: IrisUnavailable,
    Code.RESOURCE_EXHAUSTED: IrisUnavailable,
    Code.ABORTED: IrisUnavailable,
    Code.CANCELED: IrisUnavailable,
    Code.DEADLINE_EXCEEDED: IrisTimedOut,
    Code.INTERNAL: IrisInternal,
    Code.UNKNOWN: IrisInternal,
    Code.DATA_LOSS: IrisInternal,
}


def _all_subclasses(cls: type[IrisError]) -> list[type[IrisError]]:
    found: list[type[IrisError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_all_subclasses(sub)]
    return found


def non_retryable_types() -> list[str]:
    """The names of every IrisError class Temporal must not retry, sorted."""
    classes = [IrisError, *_all_subclasses(IrisError)]
    return sorted({cls.__name__ for cls in classes if not cls.retryable})


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def iris_error(
    code: Code,
    server_message: str,
    *,
    method: str,
    target: str,
    http_status: int,
    details: ErrorDetails | None = None,
    job_id: str = "",
    name: str = "",
    token_present: bool = False,
) -> IrisError:
    """The typed error for a failed call. `server_message` and `details` must already be
    scrubbed of the token."""
    cls = CLASS_OF_CODE.get(code, IrisInternal)
    message = f"{method} at {target}: {code.value} (HTTP {http_status})"
    if server_message.strip():
        message = f"{message}: {_short(server_message)}"
    if cls is IrisNotFound and job_id:
        return JobNotFound(message, job_id=job_id, code=code)
    if cls is IrisAlreadyExists:
        return IrisAlreadyExists(message, name=name, code=code)
    if cls is IrisAuthError:
        how = "with a token" if token_present else "anonymously"
        return IrisAuthError(f"{message} (keeper called {how}; check {TOKEN_SETTINGS})", code=code)
    if cls is IrisInternal:
        exception_type = details.exception_type if details else ""
        detail = _short(details.message) if details else ""
        if exception_type or detail:
            message = f"{message} [{exception_type}: {detail}]"
        return IrisInternal(message, exception_type=exception_type, detail=detail, code=code)
    return cls(message, code=code)
