"""At most one provider process per instance, across every worker host.

A provider call that lost its worker (crash, SIGKILL, a host cut off) may still be running
when Temporal retries it elsewhere. Each call therefore holds a lease on the instance id in
the runner store for as long as its process can live: the call's timeout plus a margin
(runners.provider.lease_margin) for the kill, the reap and clock skew between hosts. The
lease is taken before the process starts and given back after it ends; a retry that finds
it held answers "an earlier attempt may still be running until <time>" instead of
starting a second process, and an expired lease is taken over.

    async with leases.hold(instance_id, runs_for=timedelta(seconds=timeout_s)):
        ...run the provider...
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from keeper.domain.runners.provider import DEFAULT_LEASE_MARGIN

if TYPE_CHECKING:
    from keeper.store import LeaseResult, RunnerStore

log = logging.getLogger("keeper.leases")

_HOLDER_LIMIT = 255  # the column's width


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LeaseHeld(Exception):
    """Another call holds the instance's lease; its process may still be running."""

    def __init__(self, key: str, holder: str, expires_at: datetime) -> None:
        self.key = key
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(
            f"an earlier attempt may still be running until {rfc3339(expires_at)} "
            f"(lease on {key} held by {holder}); keeper tries again after that"
        )


@dataclass(frozen=True)
class InstanceLeases:
    """Leases on provider instance ids in the runner store, which every worker host shares."""

    store: RunnerStore
    margin: timedelta = DEFAULT_LEASE_MARGIN

    def holder(self, what: str = "") -> str:
        """A holder name unique to one call, saying where it runs and for what."""
        name = f"{socket.gethostname()} pid {os.getpid()}"
        if what:
            name += f" {what}"
        suffix = f" #{uuid.uuid4().hex[:8]}"
        return name[: _HOLDER_LIMIT - len(suffix)] + suffix

    @contextlib.asynccontextmanager
    async def hold(
        self, key: str, *, runs_for: timedelta, what: str = ""
    ) -> AsyncIterator[LeaseResult]:
        """Holds the lease on `key` while the body runs; raises LeaseHeld (before the
        body starts) when another call holds it unexpired."""
        holder = self.holder(what)
        taken = await asyncio.to_thread(
            self.store.acquire_lease, key, holder=holder, ttl=runs_for + self.margin
        )
        if not taken.acquired:
            raise LeaseHeld(key, taken.holder, taken.expires_at)
        try:
            yield taken
        finally:
            # Shielded, so a second cancel does not leave the lease to run out by itself.
            release = asyncio.ensure_future(
                asyncio.to_thread(self.store.release_lease, key, holder=holder)
            )
            try:
                await asyncio.shield(release)
            except asyncio.CancelledError:
                release.add_done_callback(_log_release_failure)
                raise
            except Exception as err:  # it expires by itself; the call's own answer matters
                log.warning(
                    "lease %s: release by %s failed (%s); it expires by itself", key, holder, err
                )


def held_by(
    leases: InstanceLeases | None, key: str, *, runs_for: timedelta, what: str = ""
) -> contextlib.AbstractAsyncContextManager[object]:
    """`leases.hold(...)`, or nothing to hold when no store keeps leases (some tests)."""
    if leases is None:
        return contextlib.nullcontext()
    return leases.hold(key, runs_for=runs_for, what=what)


def _log_release_failure(release: asyncio.Future[bool]) -> None:
    if not release.cancelled() and release.exception() is not None:
        log.warning("lease release failed (%s); it expires by itself", release.exception())
