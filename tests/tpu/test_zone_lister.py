"""The zone lister on its own: single flight, freshness, failures, memory."""

from __future__ import annotations

import asyncio

import pytest
from google.api_core import exceptions as gexc

from keeper.activities.tpu.zone_lister import ListedQr, ZoneLister, ZoneListing

ZONE_A = "projects/p/locations/a"
ZONE_B = "projects/p/locations/b"
WAITING = ListedQr(state="WAITING_FOR_RESOURCES", error=None)


class FakeZones:
    """Counts lists per zone; a list can be held open until `release`."""

    def __init__(self, held: bool = False) -> None:
        self.listings: dict[str, ZoneListing] = {ZONE_A: {"a1": WAITING}, ZONE_B: {"b1": WAITING}}
        self.calls: list[str] = []
        self.fail: Exception | None = None
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        if not held:
            self.release.set()

    async def list_zone(self, parent: str) -> ZoneListing:
        self.calls.append(parent)
        self.started.set()
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return dict(self.listings[parent])


async def test_concurrent_observers_share_one_list_in_flight() -> None:
    zones = FakeZones(held=True)
    lister = ZoneLister(zones.list_zone)
    finds = [asyncio.create_task(lister.find(ZONE_A, "a1", 100.0, 30.0)) for _ in range(50)]
    await zones.started.wait()
    zones.release.set()
    assert await asyncio.gather(*finds) == [WAITING] * 50
    assert zones.calls == [ZONE_A]


async def test_a_list_serves_until_it_is_as_old_as_the_interval() -> None:
    zones = FakeZones()
    lister = ZoneLister(zones.list_zone)
    assert await lister.find(ZONE_A, "a1", 100.0, 30.0) == WAITING
    assert await lister.find(ZONE_A, "a1", 129.9, 30.0) == WAITING
    assert len(zones.calls) == 1
    # An observer with a shorter interval does not take the same list.
    assert await lister.find(ZONE_A, "a1", 110.0, 5.0) == WAITING
    assert len(zones.calls) == 2
    # The new list started at 110, so 139.9 is within 30 s of it.
    assert await lister.find(ZONE_A, "a1", 139.9, 30.0) == WAITING
    assert len(zones.calls) == 2
    assert await lister.find(ZONE_A, "a1", 140.0, 30.0) == WAITING
    assert len(zones.calls) == 3


async def test_with_no_interval_only_a_list_no_older_than_the_attempt_serves() -> None:
    zones = FakeZones()
    lister = ZoneLister(zones.list_zone)
    await lister.find(ZONE_A, "a1", 100.0, 0.0)
    await lister.find(ZONE_A, "a1", 100.0, 0.0)  # the same server time
    await lister.find(ZONE_A, "a1", 99.0, 0.0)  # an attempt that started earlier
    assert len(zones.calls) == 1
    await lister.find(ZONE_A, "a1", 100.5, 0.0)
    assert len(zones.calls) == 2


async def test_a_resource_missing_from_the_list_is_not_answered() -> None:
    zones = FakeZones()
    lister = ZoneLister(zones.list_zone)
    assert await lister.find(ZONE_A, "a1", 100.0, 30.0) == WAITING
    zones.listings[ZONE_A]["late"] = WAITING  # created after the list
    assert await lister.find(ZONE_A, "late", 101.0, 30.0) is None
    assert await lister.find(ZONE_A, "b1", 101.0, 30.0) is None  # another zone's
    assert len(zones.calls) == 1


async def test_zones_are_listed_apart() -> None:
    zones = FakeZones()
    lister = ZoneLister(zones.list_zone)
    assert await lister.find(ZONE_A, "a1", 100.0, 30.0) == WAITING
    assert await lister.find(ZONE_B, "b1", 100.0, 30.0) == WAITING
    assert await lister.find(ZONE_B, "a1", 100.0, 30.0) is None
    assert zones.calls == [ZONE_A, ZONE_B]


@pytest.mark.parametrize(
    "error",
    [gexc.ResourceExhausted("quota"), gexc.ServiceUnavailable("down"), gexc.Forbidden("no")],
)
async def test_a_failed_list_answers_nothing_and_is_tried_once_per_interval(
    error: Exception,
) -> None:
    zones = FakeZones(held=True)
    zones.fail = error
    lister = ZoneLister(zones.list_zone)
    finds = [asyncio.create_task(lister.find(ZONE_A, "a1", 100.0, 30.0)) for _ in range(5)]
    await zones.started.wait()
    zones.release.set()
    assert await asyncio.gather(*finds) == [None] * 5
    assert await lister.find(ZONE_A, "a1", 120.0, 30.0) is None
    assert len(zones.calls) == 1
    zones.fail = None
    assert await lister.find(ZONE_A, "a1", 130.0, 30.0) == WAITING
    assert len(zones.calls) == 2


async def test_an_unexpected_error_reaches_every_waiting_observer() -> None:
    zones = FakeZones()
    zones.fail = RuntimeError("bug")
    lister = ZoneLister(zones.list_zone)
    with pytest.raises(RuntimeError, match="bug"):
        await lister.find(ZONE_A, "a1", 100.0, 30.0)


async def test_a_cancelled_observer_leaves_the_list_to_the_others() -> None:
    zones = FakeZones(held=True)
    lister = ZoneLister(zones.list_zone)
    first = asyncio.create_task(lister.find(ZONE_A, "a1", 100.0, 30.0))
    second = asyncio.create_task(lister.find(ZONE_A, "a1", 100.0, 30.0))
    await zones.started.wait()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    zones.release.set()
    assert await second == WAITING
    assert zones.calls == [ZONE_A]


async def test_stale_lists_are_dropped() -> None:
    zones = FakeZones()
    lister = ZoneLister(zones.list_zone)
    await lister.find(ZONE_A, "a1", 100.0, 30.0)
    await lister.find(ZONE_B, "b1", 100.0, 30.0)
    assert len(lister) == 2
    # Zone A is no longer polled: its list goes once it is older than any interval it served.
    await lister.find(ZONE_B, "b1", 131.0, 30.0)
    assert len(lister) == 1
    for now in range(200, 2000, 30):
        await lister.find(ZONE_B, "b1", float(now), 30.0)
    assert len(lister) == 1
