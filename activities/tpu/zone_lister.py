"""One ListQueuedResources per project and zone answers every bootstrap waiting there.

A bootstrap waiting for assignment reads its queued resource every poll. Read one by one,
a worker's reads grow with the number of slices it waits for; read as one list of the zone,
they stay at about one list (of a few pages) per poll interval however many slices wait.

The lister belongs to one worker process (one TpuActivities). The rules, per zone:

| the zone's latest list                        | an observer ...                          |
|-----------------------------------------------|------------------------------------------|
| none, or older than the observer's interval   | starts a new list and awaits it          |
| in flight                                     | awaits it (single flight)                |
| done, younger than the observer's interval    | reads its answer from it                 |
| done or failed, older than every interval     | is dropped (memory holds fresh ones only)|

What a list answers:

| the list ...                         | the observer ...                                  |
|--------------------------------------|---------------------------------------------------|
| holds its queued resource            | uses that state, no call of its own               |
| does not hold it                     | reads it with its own Get: a resource created     |
|                                      | after the list, or one the list missed, is never  |
|                                      | taken as gone (only a Get's NotFound says gone)   |
| failed (any API error)               | reads it with its own Get, today's path with its  |
|                                      | errors and RESOURCE_EXHAUSTED backoff; the failed |
|                                      | list is remembered like a good one, so a failing  |
|                                      | list is tried once per interval, not per observer |

Ages are in the server's time of each activity attempt (activity.info().started_time), the
clock the poll interval is counted in; a list's time is that of the attempt that started
it, which is no later than the moment the cloud answered, so ages are never understated.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from google.api_core import exceptions as gexc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListedQr:
    """What an observation needs of a listed queued resource."""

    state: str
    error: str | None


# A zone's queued resources by id (the last segment of the name: the API may spell the
# project of a name by number where keeper spells it by id).
ZoneListing = dict[str, ListedQr]


@dataclass
class _Listing:
    started: float  # server time of the attempt that started the list, seconds
    task: asyncio.Task[ZoneListing | None]  # None: the list failed
    keep_until: float = field(default=0.0)

    def serves(self, now: float, max_age: float) -> bool:
        if not self.task.done():
            return True
        age = now - self.started
        # A list that started no earlier than the observer's own attempt is as fresh as any
        # read the observer could make, whatever its interval.
        return age <= 0 or age < max_age


class ZoneLister:
    """Single-flight, freshness-bounded lists of queued resources, per parent (zone)."""

    def __init__(self, list_zone: Callable[[str], Awaitable[ZoneListing]]) -> None:
        self._list_zone = list_zone
        self._listings: dict[str, _Listing] = {}

    def __len__(self) -> int:
        return len(self._listings)

    async def find(self, parent: str, qr_id: str, now: float, max_age: float) -> ListedQr | None:
        """The queued resource `qr_id` under `parent` as a list no older than `max_age`
        seconds at `now` saw it; None when no such list holds it (read it on its own)."""
        self._drop_stale(now, but=parent)
        listing = self._listings.get(parent)
        if listing is None or not listing.serves(now, max_age):
            listing = _Listing(now, asyncio.create_task(self._list(parent)))
            self._listings[parent] = listing
        listing.keep_until = max(listing.keep_until, listing.started + max_age)
        # Shielded: an observer cancelled mid-list must not cancel the others' list.
        found = await asyncio.shield(listing.task)
        return None if found is None else found.get(qr_id)

    async def _list(self, parent: str) -> ZoneListing | None:
        try:
            return await self._list_zone(parent)
        except gexc.GoogleAPICallError as err:
            log.info("listing queued resources in %s failed (%s); reading each one", parent, err)
            return None

    def _drop_stale(self, now: float, but: str) -> None:
        """Drops other zones' lists older than every interval they served. The caller's own
        zone keeps its list, which the caller either uses or replaces."""
        stale = [
            parent
            for parent, listing in self._listings.items()
            if parent != but
            and listing.task.done()
            and now >= listing.keep_until
            and now > listing.started
        ]
        for parent in stale:
            del self._listings[parent]
