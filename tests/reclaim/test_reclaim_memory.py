"""keeper's reclaim memory on both back ends: epochs and jobs seen, nodes, the holding fence,
change-only evidence bookkeeping, drains owned, idempotent writes and redacted errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

from keeper.domain.reclaim.epoch import Observation, observe
from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport
from keeper.domain.reclaim.jobs import JobState
from keeper.domain.reclaim.models import ControllerView, EpochState, JobView, KnownJob
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.store import StoreUnavailable, open_reclaim_memory
from keeper.store.reclaim import (
    DRAINS_KEPT,
    FORGET_AFTER,
    WEAKLY_RELEASED,
    ReclaimMemory,
    UnknownHolding,
    WorkflowConflict,
)

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
SKEW = timedelta(seconds=2)
S = JobState


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def memory(store_url: str) -> Iterator[ReclaimMemory]:
    mem = open_reclaim_memory(store_url)
    try:
        yield mem
    finally:
        mem.close()


def view(read_at: datetime, *jobs: JobView) -> ControllerView:
    return ControllerView(read_at=read_at, jobs={j.job_id: j for j in jobs})


def job(job_id: int, state: S = S.RUNNING, submit: float = 0.0) -> JobView:
    return JobView(job_id=job_id, state=state, submit_time=at(submit))


def fold(memory: ReclaimMemory, v: ControllerView) -> None:
    obs = observe(v, memory.epoch(), memory.known_jobs([*v.jobs]), SKEW)
    memory.record_observation(obs)


def test_epochs_start_at_one_and_move_on_when_ids_are_reissued(memory: ReclaimMemory) -> None:
    assert memory.epoch() == EpochState()
    fold(memory, view(at(10), job(1, submit=1), job(2, S.COMPLETED, submit=2)))
    assert memory.epoch().high_id == 2 and memory.epoch().high_submit == at(2)
    known = memory.known_jobs()
    assert set(known) == {1, 2} and known[2].finalized and not known[1].finalized
    assert known[1].last_seen.tzinfo is not None and known[1].submit_time == at(1)
    assert memory.known_jobs([2, 99]).keys() == {2}
    # The controller was wiped: id 1 again, submitted later.
    fold(memory, view(at(100), job(1, submit=90)))
    state = memory.epoch()
    assert state.epoch == 2 and state.high_id == 1 and state.started_at == at(100)
    assert "submitted" in state.why
    assert memory.known_jobs().keys() == {1} and memory.known_jobs()[1].epoch == 2


def test_record_observation_is_idempotent_and_never_goes_back(memory: ReclaimMemory) -> None:
    v = view(at(10), job(5, submit=5))
    obs = observe(v, memory.epoch(), {}, SKEW)
    memory.record_observation(obs)
    memory.record_observation(obs)
    assert memory.epoch().high_id == 5 and memory.known_jobs().keys() == {5}
    # An observation computed before the high id rose must not lower it.
    stale = observe(view(at(11), job(3, submit=3)), EpochState(), {}, SKEW)
    memory.record_observation(stale)
    assert memory.epoch().high_id == 5
    fold(memory, view(at(200), job(1, submit=150)))
    assert memory.epoch().epoch == 2
    memory.record_observation(obs)  # from epoch 1: ignored
    assert memory.epoch().epoch == 2 and 5 not in memory.known_jobs()


def test_a_state_change_updates_the_remembered_job(memory: ReclaimMemory) -> None:
    fold(memory, view(at(10), job(7, submit=1)))
    fold(memory, view(at(20), job(7, S.COMPLETED, submit=1)))
    known = memory.known_jobs([7])[7]
    assert known.finalized and known.last_state is S.COMPLETED and known.last_seen == at(20)
    # The first observation, recorded again by a retried activity, brings back nothing older.
    older = observe(view(at(10), job(7, submit=1)), memory.epoch(), {}, SKEW)
    memory.record_observation(older)
    assert memory.known_jobs([7])[7] == known


def test_a_first_observation_of_100000_jobs_is_bulk(memory: ReclaimMemory) -> None:
    # What observe makes of a first view of 100,000 finished jobs, built directly: the test
    # times the write, not the building of the views.
    remember = [
        KnownJob.model_construct(job_id=i, epoch=1, submit_time=at(i / 1000), finalized=True,
                                 last_state=S.COMPLETED, last_seen=at(200))
        for i in range(1, 100_001)
    ]  # fmt: skip
    high = EpochState(high_id=100_000, high_submit=at(100))
    obs = Observation(epoch=high, new_epoch=False, remember=remember)
    started = time.perf_counter()
    memory.record_observation(obs)
    elapsed = time.perf_counter() - started
    assert memory.known_job_count() == 100_000 and memory.epoch().high_id == 100_000
    sample = memory.known_jobs([1, 50_000, 100_000])
    assert sample[50_000].submit_time == at(50) and sample[100_000].finalized
    # Row by row through SQLAlchemy this took over 30 s on a loaded machine; now about 1 s.
    assert elapsed < 10, f"100,000 jobs took {elapsed:.1f}s to record"


def test_a_node_registers_under_its_canonical_id_and_its_last_beat_never_goes_back(
    memory: ReclaimMemory,
) -> None:
    assert memory.node("gpu-node-07") is None and memory.known_nodes() == set()
    node = memory.register_node("gpu-node-07", "GPU-NODE-07.cluster", "10.0.0.7", 6818, "b1", at(0))
    assert node.hostname == "GPU-NODE-07.cluster" and node.last_beat_at is None
    assert memory.touch_node("gpu-node-07", at(30))
    assert not memory.touch_node("nope", at(30))
    memory.touch_node("gpu-node-07", at(10))  # late and out of order: the time never goes back
    again = memory.register_node("gpu-node-07", "gpu-node-07", "10.0.0.8", 6818, "b2", at(40))
    assert again.boot == "b2" and again.address == "10.0.0.8" and again.last_beat_at == at(30)
    assert memory.known_nodes() == {"gpu-node-07"}
    with pytest.raises(ValueError, match="canonical node id"):
        memory.register_node("GPU-NODE-07", "x", "", 6818, "", at(0))
    with pytest.raises(ValueError, match="time zone"):
        memory.touch_node("gpu-node-07", datetime(2026, 1, 1))


def test_sight_keeps_an_open_holding_and_never_closes_an_omitted_one(
    memory: ReclaimMemory,
) -> None:
    first = memory.sight("n1", [10, 11], at(0), epoch=1)
    assert [(h.job_id, h.sighting, h.first_seen, h.epoch) for h in first] == [
        (10, 1, at(0), 1),
        (11, 1, at(0), 1),
    ]
    # Later, in another epoch: the open holdings keep first_seen, epoch and sighting.
    later = memory.sight("n1", [11, 12], at(30), epoch=2)
    assert [(h.job_id, h.sighting, h.first_seen, h.epoch) for h in later] == [
        (11, 1, at(0), 1),
        (12, 1, at(30), 2),
    ]
    # 10 was omitted: still open, untouched.
    assert {h.job_id for h in memory.holdings("n1")} == {10, 11, 12}
    assert memory.sight("n1", [], at(60), epoch=2) == []
    assert memory.sight("n1", [11, 11], at(30), epoch=2) == later[:1]  # again: the same
    assert memory.holdings("n2") == []


def test_a_closed_holding_seen_again_is_the_next_sighting(memory: ReclaimMemory) -> None:
    (h,) = memory.sight("n1", [10], at(0), epoch=1)
    assert memory.close_holding("n1", 10, 1, "released", at(5))
    assert not memory.close_holding("n1", 10, 1, "spared", at(6))  # idempotent: first stays
    assert memory.holding_closed("n1", 10, 1) == (at(5), "released")
    assert memory.holdings("n1") == [] and memory.holdings("n1", open_only=False) == [h]
    (h2,) = memory.sight("n1", [10], at(9), epoch=1)
    assert h2.sighting == 2 and h2.first_seen == at(9) and h2.workflow_id != h.workflow_id
    memory.close_holding("n1", 10, 2, "released", at(10))
    assert memory.sight("n1", [10], at(11), epoch=1)[0].sighting == 3
    with pytest.raises(UnknownHolding, match="job 10 on node 'n1' \\(sighting 9\\)"):
        memory.close_holding("n1", 10, 9, "released", at(12))


def test_workflows_attach_once_and_are_listed_for_the_intake(memory: ReclaimMemory) -> None:
    a, b = memory.sight("n1", [1, 2], at(0), epoch=1)
    memory.attach_workflow("n1", 1, 1, a.workflow_id)
    memory.attach_workflow("n1", 1, 1, a.workflow_id)  # a retried activity
    with pytest.raises(WorkflowConflict, match=a.workflow_id):
        memory.attach_workflow("n1", 1, 1, "reclaim-other")
    assert memory.open_workflows_of("n1") == [(a, a.workflow_id)]
    memory.close_holding("n1", 1, 1, "released", at(3))
    assert memory.open_workflows_of("n1") == []
    assert memory.holding("n1", 2, 1) == b and memory.holding("n1", 2, 2) is None


def test_forget_prunes_only_unwatched_holdings_no_beat_listed(memory: ReclaimMemory) -> None:
    memory.sight("n1", [1, 2, 3], at(0), epoch=1)
    memory.attach_workflow("n1", 2, 1, "reclaim-n1-2-e1.1")
    memory.sight("n1", [3], at(100), epoch=1)
    assert memory.forget(at(50)) == 1  # job 1: no workflow, last listed at 0
    assert {h.job_id for h in memory.holdings("n1")} == {2, 3}
    assert memory.forget(at(50)) == 0
    assert timedelta(hours=1) <= FORGET_AFTER


def test_identical_evidence_is_recorded_once(memory: ReclaimMemory) -> None:
    memory.sight("n1", [1], at(0), epoch=1)
    assert memory.last_signalled("n1", 1, 1) is None
    absent = BeatReport(evidence=BeatEvidence.ABSENT, at=at(30), boot="b1")
    changes = [
        memory.set_last_signalled("n1", 1, 1, absent.model_copy(update={"at": at(30 + i)}))
        for i in range(50)
    ]
    assert changes == [True] + [False] * 49
    assert memory.last_signalled("n1", 1, 1) == absent
    assert memory.set_last_signalled("n1", 1, 1, absent.model_copy(update={"boot": "b2"}))
    held = BeatReport(evidence=BeatEvidence.HELD, at=at(90))
    assert memory.set_last_signalled("n1", 1, 1, held)
    memory.close_holding("n1", 1, 1, "released", at(100))
    assert not memory.set_last_signalled("n1", 1, 1, absent)


def test_the_release_tally_folds_every_report_and_reads_back(memory: ReclaimMemory) -> None:
    memory.sight("n1", [1], at(0), epoch=1)
    assert memory.tally("n1", 1, 1) == memory.tally("n9", 1, 1) == type(memory.tally("n1", 1, 1))()
    policy = ReclaimPolicy()
    for i, evidence in enumerate([BeatEvidence.HELD, BeatEvidence.ABSENT, BeatEvidence.ABSENT]):
        memory.add_evidence("n1", 1, 1, BeatReport(evidence=evidence, at=at(30 * (i + 1))))
    tally = memory.tally("n1", 1, 1)
    assert tally.absent_in_a_row == 2 and tally.released(policy)
    memory.add_evidence("n1", 1, 1, BeatReport(evidence=BeatEvidence.HELD, at=at(120)))
    assert not memory.tally("n1", 1, 1).released(policy)
    # Held again is no change: the stored tally (and its time) stays.
    again = memory.add_evidence("n1", 1, 1, BeatReport(evidence=BeatEvidence.HELD, at=at(150)))
    assert again.held_at == at(120) == memory.tally("n1", 1, 1).held_at
    done = memory.add_evidence("n1", 1, 1, BeatReport(evidence=BeatEvidence.DONE, at=at(160)))
    assert done.release(policy) is not None and done.release(policy).by is BeatEvidence.DONE
    with pytest.raises(UnknownHolding):
        memory.add_evidence("n1", 2, 1, BeatReport(evidence=BeatEvidence.HELD, at=at(1)))
    assert memory.last_listed("n1", 1, 1) == at(0) and memory.last_listed("n1", 2, 1) is None


def test_a_send_is_claimed_once_under_its_key(memory: ReclaimMemory) -> None:
    memory.sight("n1", [1], at(0), epoch=1)
    key = "reclaim-n1-1-e1.1/run-a/4"
    assert memory.claim_send(key, "n1", 1, 1, 0, at(1)) is None  # claimed: send it
    earlier = memory.claim_send(key, "n1", 1, 1, 0, at(40))  # the retried attempt
    assert earlier is not None and earlier.claimed_at == at(1) and earlier.answer is None
    memory.answer_send(key, "timed-out", at(41))
    memory.answer_send(key, "delivered", at(42))  # the first answer stays
    assert memory.claim_send("reclaim-n1-1-e1.1/run-a/7", "n1", 1, 1, 9, at(50)) is None
    sends = memory.sends("n1", 1, 1)
    assert [(s.signal, s.answer) for s in sends] == [(0, "timed-out"), (9, None)]
    assert memory.sends("n1", 1, 2) == []


def test_a_weak_release_reopens_the_same_holding_when_listed_again(
    memory: ReclaimMemory,
) -> None:
    (h,) = memory.sight("n1", [1], at(0), epoch=1)
    memory.attach_workflow("n1", 1, 1, h.workflow_id)
    memory.add_evidence("n1", 1, 1, BeatReport(evidence=BeatEvidence.IDLE, at=at(30)))
    memory.close_holding("n1", 1, 1, WEAKLY_RELEASED, at(200))
    assert memory.holdings("n1") == []
    # Listed again, later and in another epoch: the same holding, its fence kept.
    (again,) = memory.sight("n1", [1], at(300), epoch=2)
    assert again == h and memory.holdings("n1") == [h]
    assert memory.open_workflows_of("n1") == []  # watched afresh, by the next stale verdict
    assert memory.tally("n1", 1, 1).idle_in_a_row == 0  # the evidence starts over
    # A strong release is a new sighting.
    memory.close_holding("n1", 1, 1, "released", at(400))
    assert memory.sight("n1", [1], at(500), epoch=2)[0].sighting == 2


def test_a_weak_release_older_than_the_memory_forgets_is_a_new_sighting(
    memory: ReclaimMemory,
) -> None:
    memory.sight("n1", [1], at(0), epoch=1)
    memory.close_holding("n1", 1, 1, WEAKLY_RELEASED, at(10))
    late = at(10) + FORGET_AFTER + timedelta(seconds=1)
    (h,) = memory.sight("n1", [1], late, epoch=1)
    assert h.sighting == 2 and h.first_seen == late


def test_the_last_full_read_only_moves_forward(memory: ReclaimMemory) -> None:
    assert memory.last_full_read() is None
    memory.record_full_read(at(60))
    memory.record_full_read(at(30))  # a slower reader that began earlier
    assert memory.last_full_read() == at(60)
    memory.record_full_read(at(90))
    assert memory.last_full_read() == at(90)


def test_watched_nodes_are_those_with_an_open_watched_holding(memory: ReclaimMemory) -> None:
    memory.sight("n1", [1, 2], at(0), epoch=1)
    memory.sight("n2", [1], at(0), epoch=1)
    assert memory.watched_nodes() == set()
    memory.attach_workflow("n1", 2, 1, "reclaim-n1-2-e1.1")
    memory.attach_workflow("n2", 1, 1, "reclaim-n2-1-e1.1")
    memory.close_holding("n2", 1, 1, "released", at(5))
    assert memory.watched_nodes() == {"n1"}


def test_a_node_stays_drained_while_any_keeper_drain_is_open(memory: ReclaimMemory) -> None:
    memory.record_drain("n1", "wf-a", "stale job 1", at(0))
    memory.record_drain("n1", "wf-a", "stale job 1 again", at(5))  # retried: harmless
    memory.record_drain("n1", "wf-b", "stale job 2", at(10))
    memory.record_drain("n2", "wf-c", "stale job 3", at(10))
    assert [(d.workflow_id, d.reason, d.drained_at) for d in memory.drains("n1")] == [
        ("wf-a", "stale job 1", at(0)),
        ("wf-b", "stale job 2", at(10)),
    ]
    assert len(memory.drains()) == 3
    assert memory.clear_drain("n1", "wf-a", at(20)) == ["wf-b"]
    assert memory.clear_drain("n1", "wf-a", at(21)) == ["wf-b"]
    assert memory.node_drain_holders("n1") == ["wf-b"]
    assert memory.clear_drain("n1", "wf-b", at(22)) == []
    assert memory.node_drain_holders("n1") == [] and memory.drains("n1") == []
    memory.record_drain("n1", "wf-a", "stale again", at(30))
    assert memory.node_drain_holders("n1") == ["wf-a"]


def test_a_run_chain_that_lifted_its_drain_cannot_open_it_again(memory: ReclaimMemory) -> None:
    # The chain's undrain came first (a cancel does not wait for a drain still on its way):
    # that chain's late drain opens nothing; another chain of the same workflow id still can.
    assert memory.clear_drain("n1", "wf-a", at(0), chain="run-1") == []
    assert memory.drain_fenced("n1", "wf-a", "run-1")
    assert memory.record_drain("n1", "wf-a", "late", at(1), chain="run-1") is False
    assert memory.drains("n1") == []
    assert not memory.drain_fenced("n1", "wf-a", "run-2")
    assert memory.record_drain("n1", "wf-a", "new chain", at(2), chain="run-2") is True
    assert memory.node_drain_holders("n1") == ["wf-a"]
    # Fenced after it opened (the undrain ran while the drain's call was in flight).
    assert memory.clear_drain("n1", "wf-a", at(3), chain="run-2") == []
    assert memory.clear_drain("n1", "wf-a", at(4), chain="run-2") == []  # again: harmless
    assert memory.drain_fenced("n1", "wf-a", "run-2")
    # The lifted drains with a fence, for the intake's late-drain lift: cleared since `since`.
    assert [(d.node_id, d.workflow_id, d.reason) for d in memory.fenced_drains(at(3))] == [
        ("n1", "wf-a", "new chain")
    ]
    assert memory.fenced_drains(at(5)) == []
    # A call recorded before chains existed is never fenced.
    assert memory.record_drain("n1", "wf-a", "old call", at(5)) is True
    assert not memory.drain_fenced("n1", "wf-a", "")
    assert memory.fenced_drains(at(0)) == []  # open again: not a lifted drain


def test_lifted_drains_and_their_fences_are_forgotten_once_old_and_open_ones_never(
    memory: ReclaimMemory,
) -> None:
    week = DRAINS_KEPT.total_seconds()
    # Old: wf-a lifted (fenced) at 10; wf-b still drains since 0. Recent: wf-c lifted at `week`.
    memory.record_drain("n1", "wf-a", "stale job 1", at(0), chain="run-1")
    memory.clear_drain("n1", "wf-a", at(10), chain="run-1")
    memory.record_drain("n2", "wf-b", "stale job 2", at(0), chain="run-1")
    memory.record_drain("n3", "wf-c", "stale job 3", at(week), chain="run-1")
    memory.clear_drain("n3", "wf-c", at(week + 10), chain="run-1")
    # Pruned a week after wf-a's lift: its drain row and its fence (2 rows), nothing else.
    assert memory.forget_drains(at(week + 20) - DRAINS_KEPT) == 2
    assert memory.forget_drains(at(week + 20) - DRAINS_KEPT) == 0  # again: nothing left
    assert not memory.drain_fenced("n1", "wf-a", "run-1")
    assert [d.workflow_id for d in memory.drains()] == ["wf-b"]  # open: kept, however old
    assert memory.drain_fenced("n3", "wf-c", "run-1")  # recent: still refuses a late drain
    assert memory.record_drain("n3", "wf-c", "late", at(week + 30), chain="run-1") is False
    assert [d.workflow_id for d in memory.fenced_drains(at(week))] == ["wf-c"]
    # A week is far past the window in which the intake looks for a drain that landed late.
    assert timedelta(hours=1) * 24 < DRAINS_KEPT


def test_a_drain_reopened_while_the_intake_forgets_it_is_recorded_open(
    memory: ReclaimMemory,
) -> None:
    """A new run chain drains again a node whose lifted drain the intake forgets between the
    drain's read and its write (a concurrent forget_drains, committed first): the drain is
    recorded open all the same, so no undrain of another reclaim lifts it unseen."""
    memory.record_drain("n1", "wf-a", "first", at(0), chain="run-1")
    memory.clear_drain("n1", "wf-a", at(1), chain="run-1")
    pruned: list[str] = []

    def forget_first(
        conn: Any, cursor: Any, statement: str, *rest: Any
    ) -> None:  # the prune, landing just before the reopen's write
        if statement.lstrip().upper().startswith("UPDATE RECLAIM_DRAINS") and not pruned:
            pruned.append(statement)
            cursor.execute("DELETE FROM reclaim_drains WHERE workflow_id = 'wf-a'")

    event.listen(memory.engine, "before_cursor_execute", forget_first)
    try:
        assert memory.record_drain("n1", "wf-a", "again", at(2), chain="run-2") is True
    finally:
        event.remove(memory.engine, "before_cursor_execute", forget_first)
    assert pruned, "the reopen never wrote"
    assert [(d.workflow_id, d.reason) for d in memory.drains("n1")] == [("wf-a", "again")]


def test_the_memory_is_durable_across_opens(store_url: str) -> None:
    mem = open_reclaim_memory(store_url)
    mem.sight("n1", [4], at(0), epoch=1)
    mem.register_node("n1", "n1", "", 0, "", at(0))
    mem.close()
    again = open_reclaim_memory(store_url, create=False)
    try:
        assert [h.job_id for h in again.holdings()] == [4] and again.known_nodes() == {"n1"}
    finally:
        again.close()


def test_errors_name_the_url_without_its_password(tmp_path) -> None:
    url = "postgresql://keeper:s3cr3t-pw@127.0.0.1:1/reclaim?connect_timeout=1"
    with pytest.raises(StoreUnavailable) as info:
        open_reclaim_memory(url)
    assert "s3cr3t-pw" not in str(info.value) and "***" in str(info.value)
    assert "reclaim memory" in str(info.value)
    with pytest.raises(StoreUnavailable, match="reclaim memory url"):
        open_reclaim_memory("mysql://u:s3cr3t-pw@h/db")
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(StoreUnavailable, match="reclaim_epoch"):
        open_reclaim_memory(missing, create=False)


def test_a_detached_holding_keeps_its_fence_and_can_be_watched_again(tmp_path) -> None:
    from datetime import UTC, datetime

    from keeper.store.reclaim import open_reclaim_memory

    memory = open_reclaim_memory(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        at = datetime(2026, 12, 1, 9, tzinfo=UTC)
        memory.register_node("gpu-node-07", "gpu-node-07", "10.0.0.7", 6818, "", at)
        (held,) = memory.sight("gpu-node-07", [42], at, 1)
        memory.attach_workflow("gpu-node-07", 42, held.sighting, held.workflow_id)
        assert not memory.detach_workflow("gpu-node-07", 42, held.sighting, "someone-else")
        assert memory.detach_workflow("gpu-node-07", 42, held.sighting, held.workflow_id)
        assert memory.open_workflows_of("gpu-node-07") == []
        (again,) = memory.sight("gpu-node-07", [42], datetime(2026, 12, 1, 10, tzinfo=UTC), 1)
        assert again == held  # same first sighting and epoch
        memory.attach_workflow("gpu-node-07", 42, held.sighting, held.workflow_id)
        assert memory.open_workflows_of("gpu-node-07") == [(held, held.workflow_id)]
    finally:
        memory.close()
