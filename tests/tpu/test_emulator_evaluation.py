"""The TPU emulator's evaluation order: only the records a transition touched are evaluated
again, and the world ends the same, transition for transition, as a rescan of every record
after each transition leaves it (the rule the emulator's docstring states).

Each example creates queued resources at chosen instants under chosen scenarios (node ids
drawn from a small pool, so two slices race for one node name; FAILED and SUSPENDED
forced at chosen times; ties at one instant), evaluates at chosen points, and compares
every transition the two worlds logged, in order.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from google.cloud.tpu_v2.types import cloud_tpu
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.clock import EmulatorClock as Clock
from emulators.tpu.records import NodeRecord, QrRecord
from emulators.tpu.scenario import Scenario, ScenarioBook, Terminal
from emulators.tpu.state import World, _Event

PARENT = "projects/p/locations/us-central2-b"
START = 1_800_000_000.0


class FrozenClock(Clock):
    """Emulator time that moves only when the test moves it."""

    def __init__(self) -> None:
        super().__init__()
        self.at = START

    def now(self) -> float:
        return self.at


class RescanWorld(World):
    """The reference: after each transition, every record's events are computed again."""

    def evaluate(self) -> float:
        now = self.clock.now()
        for _ in range(100_000):
            seq = itertools.count()
            due: list[_Event] = []
            for qr in list(self.qrs.values()):
                due.extend(self._qr_events(qr, seq))
            for node in list(self.nodes.values()):
                due.extend(self._node_events(node, seq))
            ready = [event for event in due if event.due <= now]
            if not ready:
                break
            event = min(ready)
            event.apply(event.due)
        records: list[QrRecord | NodeRecord] = [*self.qrs.values(), *self.nodes.values()]
        for record in records:
            record.evaluated_until = now
        return now


class Transitions(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def transitions() -> Iterator[list[str]]:
    handler = Transitions()
    logger = logging.getLogger("emulators.tpu")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


maybe_seconds = st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0]))
terminals = st.one_of(
    st.none(),
    st.builds(
        Terminal,
        state=st.sampled_from(["FAILED", "SUSPENDED"]),
        after=st.sampled_from([0.0, 0.1, 1.0, 1.5]),
    ),
)
scenarios = st.builds(
    Scenario,
    assign_after=maybe_seconds,
    active_after=maybe_seconds,
    # No IPs: an address comes from a process-wide pool that the two worlds would share.
    ips_after=st.none(),
    terminal=terminals,
)
slices = st.tuples(
    st.sampled_from([0.0, 0.0, 0.05, 0.1, 0.5, 1.0]),  # seconds after the previous create
    st.integers(min_value=0, max_value=3),  # node id, from a pool of four
    scenarios,
    st.booleans(),  # evaluate right after this create
)


def qr_request(index: int, node: str) -> cloud_tpu.CreateQueuedResourceRequest:
    """Queued resource `qr<index>` asking for one v4-8 node named `node`."""
    spec = cloud_tpu.QueuedResource(
        tpu=cloud_tpu.QueuedResource.Tpu(
            node_spec=[
                cloud_tpu.QueuedResource.Tpu.NodeSpec(
                    parent=PARENT,
                    node_id=node,
                    node=cloud_tpu.Node(accelerator_type="v4-8", runtime_version="v"),
                )
            ]
        )
    )
    return cloud_tpu.CreateQueuedResourceRequest(
        parent=PARENT, queued_resource_id=f"qr{index}", queued_resource=spec
    )


def play(world_type: type[World], plan: list[tuple[float, int, Scenario, bool]]) -> list[str]:
    clock = FrozenClock()
    book = ScenarioBook(Scenario())
    world = world_type(clock, book, "127.99", 8080, "/health")
    with transitions() as lines:
        for index, (gap, node, scenario, evaluate) in enumerate(plan):
            clock.at += gap
            book.set(f"qr{index}", scenario)
            try:
                world.create_qr(qr_request(index, f"node{node}"))
            except Exception as err:  # a node id a live slice holds: refused, as it should
                lines.append(f"create qr{index} refused: {err}")
            if evaluate:
                world.evaluate()
        for step in (0.1, 1.0, 10.0):
            clock.at += step
            world.evaluate()
    return lines


@settings(max_examples=300, deadline=None)
@given(st.lists(slices, min_size=1, max_size=8))
def test_evaluation_applies_the_transitions_a_full_rescan_would_in_its_order(
    plan: list[tuple[float, int, Scenario, bool]],
) -> None:
    assert play(World, plan) == play(RescanWorld, plan)


def test_two_slices_due_at_one_instant_race_for_a_node_name_in_creation_order() -> None:
    # Both created at one instant, both assigned at once: the first created provisions the
    # node, the second fails with the name taken, whichever world plays it.
    now = Scenario(assign_after=0.0, active_after=None, ips_after=None)
    plan = [(0.0, 1, now, False), (0.0, 2, now, False), (0.0, 1, now, False)]
    lines = play(World, plan)
    assert lines == play(RescanWorld, plan)
    assert any("qr0: WAITING_FOR_RESOURCES -> PROVISIONING" in line for line in lines)
    assert "create qr2 refused" not in " ".join(lines)
    assert any("qr2: WAITING_FOR_RESOURCES -> FAILED" in line for line in lines)


def test_a_burst_of_transitions_touches_each_record_once_per_transition() -> None:
    # 2,000 slices queued at one instant: a rescan per transition computes the events of
    # every record 2,000 times over; the emulator, those of the one it moved.
    clock = FrozenClock()
    world = World(clock, ScenarioBook(Scenario(assign_after=None)), "127.99", 8080, "/health")
    calls = 0
    computed = world._qr_events

    def counted(qr: QrRecord, seq: itertools.count[int]) -> list[_Event]:
        nonlocal calls
        calls += 1
        return computed(qr, seq)

    world._qr_events = counted  # type: ignore[method-assign]
    for index in range(2000):
        world.create_qr(qr_request(index, f"n{index}"))
    clock.at += 1.0
    world.evaluate()
    assert {qr.state for qr in world.qrs.values()} == {"WAITING_FOR_RESOURCES"}
    # One computation per record to start, one per transition after it: 4,000, where a
    # rescan per transition needs 2,001 x 2,000.
    assert calls == 4000
