"""The runner store on both back ends: compare-and-set, the lane's one owner, the audited
recovery path, live counts, leaks, reconciler marks and instance leases."""

from __future__ import annotations

import concurrent.futures
import logging
from datetime import timedelta

import pytest

from keeper.domain.runners.models import RunnerRecord, deletion_workflow_id
from keeper.domain.runners.status import AgentStatus, InstanceStatus, InvalidTransition
from keeper.store import (
    LaneWriteRefused,
    RunnerExists,
    RunnerStore,
    StoreUnavailable,
    UnknownRunner,
    open_store,
)

S = InstanceStatus


def add(store: RunnerStore, name: str, status: S = S.RUNNING, scale_set: str = "set-a"):
    return store.add(
        RunnerRecord(
            name=name, scale_set=scale_set, provider_id=f"i-{name}", instance_status=status
        )
    )


def test_a_record_is_added_once_at_version_1_and_an_unknown_name_reads_none_or_is_refused(
    runner_store: RunnerStore,
) -> None:
    rec = add(runner_store, "r1")
    assert rec.version == 1 and rec.created_at.tzinfo is not None
    assert runner_store.get("r1") == rec
    assert runner_store.get("nope") is None
    with pytest.raises(UnknownRunner, match="nope"):
        runner_store.require("nope")
    with pytest.raises(RunnerExists):
        add(runner_store, "r1")
    assert [r.name for r in runner_store.list()] == ["r1"]


def test_cas_refuses_stale_version_and_wrong_status(runner_store: RunnerStore) -> None:
    rec = add(runner_store, "r1")
    ok = runner_store.compare_and_set("r1", expect=S.RUNNING, version=1, to=S.STOPPED, actor="t")
    assert ok.ok and ok.record and ok.record.version == 2
    stale = runner_store.compare_and_set("r1", expect=S.STOPPED, version=1, to=S.RUNNING, actor="t")
    assert not stale.ok and stale.record and stale.record.instance_status is S.STOPPED
    wrong = runner_store.compare_and_set("r1", expect=S.RUNNING, version=2, to=S.STOPPED, actor="t")
    assert not wrong.ok
    assert runner_store.get("r1").version == rec.version + 1  # type: ignore[union-attr]


def test_invalid_transition_is_refused_before_any_write(runner_store: RunnerStore) -> None:
    add(runner_store, "r1", S.PENDING_CREATE)
    with pytest.raises(InvalidTransition, match="pending_create -> stopped"):
        runner_store.compare_and_set(
            "r1", expect=S.PENDING_CREATE, version=1, to=S.STOPPED, actor="t"
        )
    assert runner_store.get("r1").version == 1  # type: ignore[union-attr]


def test_only_the_deletion_workflow_writes_the_lane(runner_store: RunnerStore) -> None:
    add(runner_store, "r1")
    with pytest.raises(LaneWriteRefused, match="runner-delete-r1"):
        runner_store.compare_and_set(
            "r1", expect=S.RUNNING, version=1, to=S.PENDING_DELETE, actor="agent"
        )
    with pytest.raises(LaneWriteRefused):
        runner_store.advance_lane(
            "r1", expect=S.RUNNING, version=1, to=S.PENDING_DELETE, owner="runner-delete-r2"
        )
    with pytest.raises(LaneWriteRefused):
        add(runner_store, "r2", S.DELETING)
    owner = deletion_workflow_id("r1")
    res = runner_store.advance_lane(
        "r1", expect=S.RUNNING, version=1, to=S.PENDING_DELETE, owner=owner
    )
    assert res.ok


def test_lane_is_forward_only(runner_store: RunnerStore) -> None:
    add(runner_store, "r1")
    owner = deletion_workflow_id("r1")
    v = 1
    for cur, nxt in ((S.RUNNING, S.PENDING_DELETE), (S.PENDING_DELETE, S.DELETING)):
        res = runner_store.advance_lane("r1", expect=cur, version=v, to=nxt, owner=owner)
        assert res.ok and res.record
        v = res.record.version
    with pytest.raises(InvalidTransition):
        runner_store.advance_lane(
            "r1", expect=S.DELETING, version=v, to=S.PENDING_DELETE, owner=owner
        )
    done = runner_store.advance_lane("r1", expect=S.DELETING, version=v, to=S.DELETED, owner=owner)
    assert done.ok and done.record and done.record.deleted_at is not None
    # A tombstone takes no agent reports (a late job-completed message changes nothing).
    late = runner_store.set_agent_status("r1", status=AgentStatus.IDLE, version=done.record.version)
    assert not late.ok and late.record and late.record.instance_status is S.DELETED
    assert [r.name for r in runner_store.list()] == []
    assert [r.name for r in runner_store.list(include_deleted=True)] == ["r1"]


def test_recovery_path_is_audited_and_logged(
    runner_store: RunnerStore, caplog: pytest.LogCaptureFixture
) -> None:
    add(runner_store, "r1")
    with pytest.raises(ValueError, match="reason"):
        runner_store.recover_to_deleted("r1", actor="x", reason="")
    with caplog.at_level(logging.WARNING, logger="keeper.store"):
        rec = runner_store.recover_to_deleted(
            "r1", actor="runner-delete-r1", reason="provider confirmed gone"
        )
    assert rec.instance_status is S.DELETED
    entries = runner_store.audit("r1")
    assert [(e.to_status, e.forced) for e in entries] == [("running", False), ("deleted", True)]
    assert entries[-1].reason == "provider confirmed gone"
    assert "forced write: runner r1" in caplog.text
    # Idempotent: a second recovery writes nothing more.
    runner_store.recover_to_deleted("r1", actor="x", reason="again")
    assert len(runner_store.audit("r1")) == 2


def test_live_count_never_includes_the_lane(runner_store: RunnerStore) -> None:
    for i, status in enumerate([S.PENDING_CREATE, S.CREATING, S.RUNNING, S.STOPPED, S.ERROR]):
        add(runner_store, f"live{i}", status)
    add(runner_store, "other", S.RUNNING, scale_set="set-b")
    for name in ("lane1", "lane2", "lane3"):
        add(runner_store, name)
    owner = deletion_workflow_id
    runner_store.advance_lane(
        "lane1", expect=S.RUNNING, version=1, to=S.PENDING_DELETE, owner=owner("lane1")
    )
    runner_store.advance_lane(
        "lane2", expect=S.RUNNING, version=1, to=S.PENDING_FORCE_DELETE, owner=owner("lane2")
    )
    runner_store.advance_lane(
        "lane3", expect=S.RUNNING, version=1, to=S.PENDING_DELETE, owner=owner("lane3")
    )
    runner_store.advance_lane(
        "lane3", expect=S.PENDING_DELETE, version=2, to=S.DELETING, owner=owner("lane3")
    )
    assert runner_store.live_runner_count("set-a") == 5
    assert runner_store.live_runner_count("set-b") == 1
    counts = runner_store.status_counts()["set-a"]
    assert counts[S.PENDING_DELETE] == 1 and counts[S.DELETING] == 1


def test_tombstone_is_replaced_by_a_new_runner_with_a_higher_version(
    runner_store: RunnerStore,
) -> None:
    add(runner_store, "r1")
    runner_store.recover_to_deleted("r1", actor="t", reason="test")
    again = add(runner_store, "r1")
    assert again.instance_status is S.RUNNING and again.version == 3


def test_concurrent_cas_has_exactly_one_winner(runner_store: RunnerStore) -> None:
    add(runner_store, "r1")

    def attempt(_: int) -> bool:
        return runner_store.compare_and_set(
            "r1", expect=S.RUNNING, version=1, to=S.STOPPED, actor="t"
        ).ok

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(attempt, range(16)))
    assert wins.count(True) == 1


def test_a_leak_is_kept_once_per_instance_until_resolved_and_a_mark_counts_passes_in_a_row(
    runner_store: RunnerStore,
) -> None:
    runner_store.record_leak(provider_id="i-9", runner="r9", scale_set="s", reason="forced")
    runner_store.record_leak(provider_id="i-9", runner="r9", scale_set="s", reason="forced again")
    assert [(leak.provider_id, leak.reason) for leak in runner_store.leaks()] == [
        ("i-9", "forced again")
    ]
    runner_store.resolve_leak("i-9")
    assert runner_store.leaks() == []
    assert runner_store.mark_pass("orphan", {"a", "b"}) == {"a": 1, "b": 1}
    assert runner_store.mark_pass("orphan", {"a", "c"}) == {"a": 2, "c": 1}
    assert runner_store.mark_pass("other", {"a"}) == {"a": 1}
    runner_store.clear_mark("orphan", "a")
    assert runner_store.mark_pass("orphan", {"a", "c"}) == {"a": 1, "c": 2}


def test_bad_urls_name_the_fix(tmp_path) -> None:
    with pytest.raises(StoreUnavailable, match="sqlite:///"):
        open_store("mysql://x@y/z")


def test_sqlite_runs_in_wal_mode(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    store.close()


def test_a_lease_has_one_holder_until_released_and_its_holder_cannot_take_it_again(
    runner_store: RunnerStore,
) -> None:
    minute = timedelta(minutes=1)
    first = runner_store.acquire_lease("i-1", holder="host-a #1", ttl=minute)
    assert first.acquired and first.holder == "host-a #1"
    held = runner_store.acquire_lease("i-1", holder="host-b #2", ttl=minute)
    assert not held.acquired and held.holder == "host-a #1"
    assert abs((held.expires_at - first.expires_at).total_seconds()) < 0.01
    # Not re-entrant: a holder name stands for one call, never for a host.
    assert not runner_store.acquire_lease("i-1", holder="host-a #1", ttl=minute).acquired
    assert runner_store.acquire_lease("i-2", holder="host-b #2", ttl=minute).acquired
    assert not runner_store.release_lease("i-1", holder="host-b #2")
    assert runner_store.release_lease("i-1", holder="host-a #1")
    assert runner_store.lease("i-1") is None


def test_an_expired_lease_is_taken_over_and_its_late_release_changes_nothing(
    runner_store: RunnerStore,
) -> None:
    runner_store.acquire_lease("i-1", holder="lost #1", ttl=timedelta(0))
    taken = runner_store.acquire_lease("i-1", holder="retry #2", ttl=timedelta(minutes=1))
    assert taken.acquired and taken.taken_over_from == "lost #1"
    assert not runner_store.release_lease("i-1", holder="lost #1")  # the straggler ends late
    assert runner_store.lease("i-1").holder == "retry #2"  # type: ignore[union-attr]


def test_concurrent_lease_takers_have_exactly_one_winner(runner_store: RunnerStore) -> None:
    runner_store.acquire_lease("i-1", holder="lost", ttl=timedelta(0))

    def attempt(n: int) -> bool:
        return runner_store.acquire_lease("i-1", holder=f"t{n}", ttl=timedelta(minutes=1)).acquired

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(attempt, range(16)))
    assert wins.count(True) == 1
