"""Typed failures of calls to spur, built from a gRPC status without the token in them."""

from __future__ import annotations

import grpc

from keeper.runtime.reclaim.credentials import SpurToken

# spur's details are short; a longer one is cut so an error stays one readable line.
DETAILS_LIMIT = 500


class SpurError(Exception):
    """A call to spur failed. `code` is the gRPC status (None when no call was made)."""

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class SpurUnavailable(SpurError):
    """No answer from a controller that could serve the call: not reachable, not the leader
    and no leader named, or still redirected after the hop limit. Safe to retry."""


class SpurTimedOut(SpurUnavailable):
    """The deadline passed. A write may or may not have been applied."""


class SpurRedirectLoop(SpurUnavailable):
    """The leader redirects pointed back to a controller already tried."""


class SpurDenied(SpurError):
    """UNAUTHENTICATED or PERMISSION_DENIED: the token is missing, invalid or not allowed."""


class SpurRejected(SpurError):
    """The controller refused the request itself (INVALID_ARGUMENT, FAILED_PRECONDITION…)."""


class SpurNotFound(SpurRejected):
    """NOT_FOUND: the named job or node is not known to the controller."""


_REJECTED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


def details_of(exc: grpc.aio.AioRpcError, token: SpurToken | None) -> str:
    details = exc.details() or ""
    if token is not None:
        details = token.scrub(details)
    return details[:DETAILS_LIMIT]


def spur_error(
    exc: grpc.aio.AioRpcError, *, what: str, target: str, token: SpurToken | None
) -> SpurError:
    """The typed error for a failed call `what` to `target`."""
    code = exc.code()
    details = details_of(exc, token)
    message = f"{what} at {target}: {code.name}: {details}"
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return SpurTimedOut(message, code=code)
    if code is grpc.StatusCode.UNAVAILABLE:
        return SpurUnavailable(message, code=code)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        if token is None or not token.present:
            hint = "keeper called anonymously; set the spur token (KEEPER_SPUR_TOKEN or a file)"
        else:
            hint = f"check the token in {token.setting}"
        return SpurDenied(f"{message} ({hint})", code=code)
    if code is grpc.StatusCode.NOT_FOUND:
        return SpurNotFound(message, code=code)
    if code in _REJECTED:
        return SpurRejected(message, code=code)
    return SpurError(message, code=code)
