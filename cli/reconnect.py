"""How a command that follows a workflow rides out a Temporal server restart."""

from __future__ import annotations

from temporalio.service import RPCError, RPCStatusCode

RECONNECT_FIRST = 0.5
RECONNECT_MAX = 10.0
# What a lost server looks like to a call that was in flight or is made meanwhile.
_TRANSIENT = {
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.UNKNOWN,
    RPCStatusCode.CANCELLED,
    RPCStatusCode.INTERNAL,
}


def is_transient(err: BaseException) -> bool:
    """A lost or restarting server, as opposed to an answer."""
    return isinstance(err, RPCError) and err.status in _TRANSIENT
