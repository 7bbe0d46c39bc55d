"""Table tests for the runbook's escalation rules (domain/watch/escalation.py), with the
reference's real cases: 3,000 workers idling 12 h behind one shard, and a dead coordinator
with 2,359 KILLED worker attempts."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from keeper.domain.watch.escalation import (
    PROPOSALS,
    Escalation,
    EscalationKind,
    EscalationPolicy,
    EscalationState,
    Proposal,
    Sample,
    observe,
)
from keeper.domain.watch.names import JobPhase
from keeper.domain.watch.progress import StageProgress, parse_progress
from keeper.domain.watch.threads import ThreadState

K = EscalationKind
T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
POLICY = EscalationPolicy()
ATTEMPT = "tok-3f2a9b1c-p0-a0"


def _progress(line: str) -> StageProgress:
    progress = parse_progress(line)
    assert progress is not None
    return progress


TAIL = _progress(
    "[exec-1] [stage3-Reduce → Write] 4999/5000 complete, 1 in-flight, 0 queued, "
    "3000/3000 workers alive, 0 dead"
)


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _run(samples: Iterable[Sample], policy: EscalationPolicy = POLICY):
    """Every tick's escalations, and the state after the last."""
    state = EscalationState()
    ticks: list[list[Escalation]] = []
    for sample in samples:
        state, raised = observe(policy, state, sample)
        ticks.append(raised)
    return state, ticks


def _sample(minutes: float, **kw: Any) -> Sample:
    return Sample(at=_at(minutes), attempt=kw.pop("attempt", ATTEMPT), **kw)


def _kinds(raised: list[Escalation]) -> list[EscalationKind]:
    return [e.kind for e in raised]


def test_the_12h_straggler_raises_stragglers_once_per_episode() -> None:
    # A check every 10 minutes for 12 hours, the same line every time.
    samples = [_sample(m, progress=TAIL) for m in range(0, 12 * 60 + 1, 10)]
    _, ticks = _run(samples)
    assert [_kinds(t) for t in ticks[:2]] == [[], []]  # 0 and 10 minutes
    assert _kinds(ticks[2]) == [K.STRAGGLERS]  # 20 minutes: straggler_after
    # The stuck_stage episode of the same stage is hidden behind the more specific one.
    assert all(_kinds(t) == [K.STRAGGLERS] for t in ticks[2:])
    assert [t[0].first for t in ticks[2:5]] == [True, False, False]
    assert len({t[0].key for t in ticks[2:]}) == 1
    last = ticks[-1][0]
    # The runbook: stragglers are escalated to debug, not restarted (a restart reruns every
    # shard, to stall behind the same one again).
    assert last.proposal is Proposal.NONE
    assert "1 straggler shard(s)" in last.summary and "2999 of 3000 workers idle" in last.summary
    assert "12h00m" in last.summary
    assert last.evidence == (TAIL.line(),)


# (case, progress line, straggling)
TAILS: list[tuple[str, str, bool]] = [
    ("one shard of 5000", TAIL.line(), True),
    ("50 in flight of 5000 is still few (1%)",
     "[s] 4950/5000 complete, 50 in-flight, 0 queued, 3000/3000 workers alive, 0 dead", True),
    ("51 in flight of 5000 is not",
     "[s] 4949/5000 complete, 51 in-flight, 0 queued, 3000/3000 workers alive, 0 dead", False),
    ("a small stage: 2 in flight is few",
     "[s] 8/10 complete, 2 in-flight, 0 queued, 20/20 workers alive, 0 dead", True),
    ("queued work is not a tail",
     "[s] 4999/5000 complete, 1 in-flight, 1 queued, 3000/3000 workers alive, 0 dead", False),
    ("most workers busy is not a tail",
     "[s] 8/10 complete, 2 in-flight, 0 queued, 3/3 workers alive, 0 dead", False),
    ("a complete stage is not",
     "[s] 5000/5000 complete, 0 in-flight, 0 queued, 3000/3000 workers alive, 0 dead", False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "line", "straggling"), TAILS, ids=[r[0] for r in TAILS])
def test_a_stage_straggles_when_few_shards_are_in_flight_none_queued_and_most_workers_idle(
    case: str, line: str, straggling: bool
) -> None:
    progress = _progress(line)
    _, ticks = _run([_sample(0, progress=progress), _sample(25, progress=progress)])
    assert (K.STRAGGLERS in _kinds(ticks[-1])) is straggling


def test_stragglers_need_the_condition_to_hold_throughout() -> None:
    busy = _progress("[s] 100/5000 complete, 50 in-flight, 10 queued, 50/50 workers alive, 0 dead")
    _, ticks = _run([_sample(0, progress=TAIL), _sample(15, progress=busy),
                     _sample(16, progress=TAIL), _sample(30, progress=TAIL),
                     _sample(36, progress=TAIL)])  # fmt: skip
    assert [_kinds(t) for t in ticks] == [[], [], [], [], [K.STRAGGLERS]]


# The 12-hour straggler was a shard in an OOM loop: it runs, its worker runs out of memory,
# it waits in the queue, it runs again. The tail alternates between these two lines.
REQUEUED = _progress(
    "[exec-1] [stage3-Reduce → Write] 4999/5000 complete, 0 in-flight, 1 queued, "
    "3000/3000 workers alive, 0 dead"
)
OOM = (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
    "capacity; 13.90 GiB already allocated)"
)


def _oom_loop(minutes: int, *, oom: bool) -> list[Sample]:
    """A check every 5 minutes; every third one finds the shard queued again (after an OOM,
    when `oom`), the others find it in flight."""
    return [
        _sample(m, progress=REQUEUED, errors=(OOM,) if oom else ())
        if m % 15 == 10
        else _sample(m, progress=TAIL)
        for m in range(0, minutes + 1, 5)
    ]


def test_an_oom_looping_straggler_is_a_straggler_not_a_stuck_stage() -> None:
    _, ticks = _run(_oom_loop(60, oom=True))
    kinds = [_kinds(t) for t in ticks]
    # 20 minutes of tail (straggler_after), though it was queued at 10 and 25 minutes.
    assert kinds[:4] == [[], [], [], []], kinds
    assert kinds[4] == [K.STRAGGLERS], kinds
    # stuck_stage stays hidden behind it (the same OOM repeated is an error of its own)
    assert all(K.STRAGGLERS in k and K.STUCK_STAGE not in k for k in kinds[4:]), kinds
    raised = ticks[4][0]
    assert raised.first and raised.proposal is Proposal.NONE
    keys = {e.key for t in ticks[4:] for e in t if e.kind is K.STRAGGLERS}
    assert len(keys) == 1  # one episode across the requeues
    assert "out of memory and queued again once" in raised.summary, raised.summary
    later = next(e for e in ticks[6] if e.kind is K.STRAGGLERS)  # 30 minutes: two OOMs
    assert "queued again 2 times" in later.summary and "for 30m" in later.summary, later


def test_a_tail_requeued_without_an_oom_is_no_straggler_episode() -> None:
    """Without the repeated OOM, a shard back in the queue is ordinary scheduling: the
    straggler clock starts over, and the stage's stuck clock runs on."""
    _, ticks = _run(_oom_loop(60, oom=False))
    kinds = [_kinds(t) for t in ticks]
    assert K.STRAGGLERS not in {k for ks in kinds for k in ks}, kinds
    assert kinds[6] == [K.STUCK_STAGE], kinds  # 30 minutes at 4999


def test_an_oom_elsewhere_does_not_make_a_queued_tail_straggle() -> None:
    """An OOM seen before the tail was reached belongs to another episode."""
    samples = [_sample(0, progress=STUCK, errors=(OOM,)), _sample(5, progress=REQUEUED),
               _sample(30, progress=REQUEUED)]  # fmt: skip
    _, ticks = _run(samples)
    assert K.STRAGGLERS not in _kinds(ticks[-1])


STUCK = _progress(
    "[exec-1] [stage1-Map] 1200/5000 complete, 64 in-flight, 3736 queued, 64/64 workers alive, "
    "0 dead"
)


def test_a_stage_stuck_for_stuck_after_is_escalated() -> None:
    _, ticks = _run([_sample(m, progress=STUCK) for m in (0, 10, 29, 30, 45)])
    assert [_kinds(t) for t in ticks] == [[], [], [], [K.STUCK_STAGE], [K.STUCK_STAGE]]
    first = ticks[3][0]
    assert first.first and not ticks[4][0].first
    assert first.proposal is Proposal.RESTART
    assert "1200/5000 for 30m" in first.summary and "'stage1-Map'" in first.summary


def test_shard_progress_restarts_the_stuck_clock() -> None:
    moved = STUCK.model_copy(update={"done": 1201})
    _, ticks = _run([_sample(0, progress=STUCK), _sample(25, progress=moved),
                     _sample(50, progress=moved), _sample(55, progress=moved)])  # fmt: skip
    assert [_kinds(t) for t in ticks] == [[], [], [], [K.STUCK_STAGE]]


def test_a_new_stage_with_the_same_count_restarts_the_clock() -> None:
    other = STUCK.model_copy(update={"stage": "stage2-Reduce"})
    _, ticks = _run([_sample(0, progress=STUCK), _sample(29, progress=other),
                     _sample(40, progress=other)])  # fmt: skip
    assert [_kinds(t) for t in ticks] == [[], [], []]


def test_log_silence_is_not_a_stuck_stage() -> None:
    # A log-quiet CPU-bound stage: one line, then hours without progress lines.
    samples = [_sample(0, progress=STUCK), *(_sample(m) for m in range(10, 240, 10))]
    _, ticks = _run(samples)
    assert all(t == [] for t in ticks)
    # When a line comes back with the same count, the clock had kept running.
    _, ticks = _run([*samples, _sample(240, progress=STUCK)])
    assert _kinds(ticks[-1]) == [K.STUCK_STAGE]


def test_a_retry_restarts_the_stage_clocks() -> None:
    _, ticks = _run([_sample(0, progress=STUCK),
                     _sample(31, progress=STUCK, attempt="tok-0badf00d-p0-a1")])  # fmt: skip
    assert ticks[-1] == []


def test_repeated_error_names_the_error_and_proposes_stop() -> None:
    errors = [
        ("Shard 17 failed on worker w-3 (task error 1/3), re-queuing.",),
        (
            "Shard 4 failed on worker w-9 (task error 1/3), re-queuing.",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        (
            "Shard 8 failed on worker w-1 (task error 2/3), re-queuing.",
            "RuntimeError: CUDA out of memory. Tried to allocate 4.00 GiB",
        ),
        ("RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB",),
    ]
    _, ticks = _run(_sample(i, errors=e) for i, e in enumerate(errors))
    assert [_kinds(t) for t in ticks] == [[], [], [K.REPEATED_ERROR],
                                          [K.REPEATED_ERROR, K.REPEATED_ERROR]]  # fmt: skip
    shard, oom = ticks[3]
    assert "Shard <n> failed on worker w-<n>" in shard.summary and "3 times" in shard.summary
    assert "CUDA out of memory" in oom.summary and oom.first and not shard.first
    assert oom.proposal is Proposal.STOP
    assert shard.key != oom.key


def test_repeated_errors_count_across_retries() -> None:
    oom = ("RuntimeError: CUDA out of memory",)
    _, ticks = _run([_sample(0, errors=oom, attempt="a0"), _sample(1, errors=oom, attempt="a1"),
                     _sample(2, errors=oom, attempt="a2")])  # fmt: skip
    assert K.REPEATED_ERROR in _kinds(ticks[-1])


def test_controller_timeouts_need_consecutive_failed_ticks() -> None:
    fail = {"rpc_failed": ("ListTasks",)}
    _, ticks = _run([_sample(0, **fail), _sample(1, **fail), _sample(2),
                     _sample(3, rpc_failed=("GetTaskLogs", "ListTasks")), _sample(4, **fail),
                     _sample(5, **fail), _sample(6, **fail)])  # fmt: skip
    assert [_kinds(t) for t in ticks] == [[], [], [], [], [], [K.CONTROLLER_TIMEOUTS],
                                          [K.CONTROLLER_TIMEOUTS]]  # fmt: skip
    raised = ticks[5][0]
    assert raised.proposal is Proposal.NONE
    assert raised.evidence == ("failed: GetTaskLogs, ListTasks",)
    assert raised.key == ticks[6][0].key and not ticks[6][0].first


def test_stale_coordinators_are_reported_without_a_proposal() -> None:
    stale = ("/a/j/zephyr-t-11111111-p0-a0-coord", "/a/j/zephyr-t-22222222-p0-a1-coord")
    _, ticks = _run([_sample(0, stale_coordinators=stale), _sample(1, stale_coordinators=stale),
                     _sample(2, stale_coordinators=stale[:1])])  # fmt: skip
    assert [_kinds(t) for t in ticks] == [[K.STALE_COORDINATORS]] * 3
    assert [t[0].first for t in ticks] == [True, False, True]  # a different set, a new episode
    assert ticks[0][0].evidence == stale and ticks[0][0].proposal is Proposal.NONE


def test_retry_flapping_after_retry_flaps_changes() -> None:
    attempts = ["t-a-p0-a0", "t-b-p0-a1", "t-c-p0-a2", "t-c-p0-a2", "t-d-p0-a3", "t-e-p0-a4"]
    _, ticks = _run(_sample(i, attempt=a) for i, a in enumerate(attempts))
    assert [_kinds(t) for t in ticks] == [[], [], [], [], [K.RETRY_FLAPPING],
                                          [K.RETRY_FLAPPING]]  # fmt: skip
    assert ticks[4][0].proposal is Proposal.STOP
    assert "changed 3 times" in ticks[4][0].summary
    assert ticks[5][0].first  # each further retry is news


def test_a_killed_coordinator_becomes_a_zombie_to_restart_with_its_killed_workers_as_evidence() -> (
    None
):
    dead = {"coordinator": "JOB_STATE_KILLED", "failed_worker_attempts": 2359,
            "worker_states": {"TASK_STATE_KILLED": 2359, "TASK_STATE_PENDING": 641}}  # fmt: skip
    _, ticks = _run([_sample(0, **dead), _sample(5, **dead)])
    assert _kinds(ticks[0]) == [K.WORKER_FAILURES]  # the coordinator's death needs 2 ticks
    assert _kinds(ticks[1]) == [K.ZOMBIE_COORDINATOR, K.WORKER_FAILURES]
    zombie, failures = ticks[1]
    assert zombie.proposal is Proposal.RESTART and failures.proposal is Proposal.NONE
    assert "is killed" in zombie.summary
    assert "2359 worker attempts ended failed or killed" in zombie.evidence
    assert "2359 killed" in failures.evidence[0] and "641 pending" in failures.evidence[0]


# (case, coordinator phases and dumps per tick, zombie raised on the last tick)
COORDINATORS: list[tuple[str, list[dict[str, Any]], bool]] = [
    ("two zombie dumps", [{"coordinator_threads": ThreadState.ZOMBIE}] * 2, True),
    ("one zombie dump", [{"coordinator_threads": ThreadState.ZOMBIE}], False),
    ("zombie, then a live dump", [{"coordinator_threads": ThreadState.ZOMBIE},
     {"coordinator_threads": ThreadState.ACTIVE}, {"coordinator_threads": ThreadState.ZOMBIE}],
     False),
    ("zombie, a tick without a dump, zombie", [{"coordinator_threads": ThreadState.ZOMBIE},
     {"coordinator": "running"}, {"coordinator_threads": ThreadState.ZOMBIE}], True),
    ("an unknown dump is no evidence", [{"coordinator_threads": ThreadState.UNKNOWN}] * 3,
     False),
    ("a succeeded coordinator is not dead", [{"coordinator": "succeeded"}] * 3, False),
    ("a failed coordinator", [{"coordinator": "failed"}] * 2, True),
]  # fmt: skip


@pytest.mark.parametrize(("case", "ticks", "raised"), COORDINATORS,
                         ids=[r[0] for r in COORDINATORS])  # fmt: skip
def test_a_coordinator_is_a_zombie_after_two_dead_readings_with_no_live_one_between(
    case: str, ticks: list[dict[str, Any]], raised: bool
) -> None:
    _, out = _run(_sample(i, **kw) for i, kw in enumerate(ticks))
    assert (K.ZOMBIE_COORDINATOR in _kinds(out[-1])) is raised


def test_a_healthy_tick_raises_nothing() -> None:
    healthy = _progress("[e] [s] 10/64 complete, 8 in-flight, 46 queued, 8/8 workers alive, 0 dead")
    moving = [healthy.model_copy(update={"done": 10 + i, "queued": 46 - i}) for i in range(40)]
    live = {"coordinator": "running", "coordinator_threads": ThreadState.ACTIVE,
            "worker_states": {"running": 8}}  # fmt: skip
    _, ticks = _run(_sample(i * 5, progress=p, **live) for i, p in enumerate(moving))
    assert all(t == [] for t in ticks)


def test_the_state_stays_bounded_and_serialisable() -> None:
    policy = EscalationPolicy(max_signatures=8, max_notified=16)
    samples = [_sample(i, errors=tuple(f"Error kind{chr(97 + i % 26)}{chr(97 + i // 26)}: x"
                                       for _ in range(3)),
                       stale_coordinators=(f"/a/j/zephyr-t-{i:08x}-p0-a0-coord",))
               for i in range(200)]  # fmt: skip
    state, _ = _run(samples, policy)
    assert len(state.errors) == 8 and len(state.notified) == 16
    assert set(state.errors.values()) == {3}
    assert EscalationState.model_validate_json(state.model_dump_json()) == state


def test_signatures_beyond_the_bound_keep_the_most_frequent() -> None:
    policy = EscalationPolicy(max_signatures=2, max_notified=10)
    often = ("ValueError: often",) * 5
    state, _ = _run([_sample(0, errors=often), _sample(1, errors=("KeyError: a", "TypeError: b")),
                     _sample(2, errors=("OSError: c",))], policy)  # fmt: skip
    assert state.errors == {"ValueError: often": 5, "OSError: c": 1}


def test_only_a_stuck_stage_or_a_zombie_proposes_a_restart_and_only_errors_or_flapping_a_stop() -> (
    None
):
    assert PROPOSALS == {
        K.STUCK_STAGE: Proposal.RESTART, K.STRAGGLERS: Proposal.NONE,
        K.REPEATED_ERROR: Proposal.STOP, K.CONTROLLER_TIMEOUTS: Proposal.NONE,
        K.STALE_COORDINATORS: Proposal.NONE, K.RETRY_FLAPPING: Proposal.STOP,
        K.ZOMBIE_COORDINATOR: Proposal.RESTART, K.WORKER_FAILURES: Proposal.NONE,
    }  # fmt: skip


def test_stragglers_propose_a_restart_only_where_the_settings_ask_for_one() -> None:
    samples = [_sample(m, progress=TAIL) for m in (0, 10, 20)]
    _, ticks = _run(samples, EscalationPolicy(straggler_step=Proposal.RESTART))
    assert ticks[-1][0].kind is K.STRAGGLERS and ticks[-1][0].proposal is Proposal.RESTART
    assert EscalationPolicy().straggler_step is Proposal.NONE
    with pytest.raises(ValueError, match="straggler_step"):
        EscalationPolicy(straggler_step=Proposal.STOP)


@pytest.mark.parametrize(("total", "most"), [(1, 2), (10, 2), (200, 2), (300, 3), (5000, 50)])
def test_a_straggling_tail_is_at_most_one_percent_of_the_shards_and_never_under_two(
    total: int, most: int
) -> None:
    assert POLICY.straggler_max_in_flight(total) == most


def test_the_escalation_policy_has_its_defaults_reads_durations_and_refuses_bad_values() -> None:
    assert (POLICY.stuck_after, POLICY.straggler_after) == (timedelta(minutes=30),
                                                            timedelta(minutes=20))  # fmt: skip
    assert (POLICY.repeated_error_count, POLICY.rpc_failures) == (3, 3)
    assert EscalationPolicy(stuck_after="1h").stuck_after == timedelta(hours=1)
    with pytest.raises(ValueError):
        EscalationPolicy(repeated_error_count="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_notified"):
        EscalationPolicy(max_signatures=100, max_notified=64)


def test_sample_reads_iris_state_names() -> None:
    sample = Sample(at=T0, coordinator="JOB_STATE_RUNNING",
                    worker_states={"TASK_STATE_RUNNING": 3, "killed": 1})  # fmt: skip
    assert sample.coordinator is JobPhase.RUNNING
    assert sample.worker_states == {JobPhase.RUNNING: 3, JobPhase.KILLED: 1}


def test_a_complete_stage_waiting_for_the_next_is_not_stuck() -> None:
    done = _progress("[e] [s] 64/64 complete, 0 in-flight, 0 queued, 8/8 workers alive, 0 dead")
    _, ticks = _run([_sample(0, progress=done), _sample(45, progress=done)])
    assert ticks[-1] == []


def test_sequential_pipelines_are_progress_not_retry_flapping() -> None:
    attempts = ["t-a-p0-a0", "t-a-p1-a0", "t-a-p2-a0", "t-a-p3-a0", "t-a-p4-a0"]
    _, ticks = _run(_sample(i, attempt=a) for i, a in enumerate(attempts))
    assert all(K.RETRY_FLAPPING not in _kinds(t) for t in ticks), ticks


def test_a_new_pipeline_starts_the_retry_count_over() -> None:
    attempts = ["t-a-p0-a0", "t-b-p0-a1", "t-c-p0-a2", "t-c-p1-a0", "t-d-p1-a1", "t-e-p1-a2"]
    _, ticks = _run(_sample(i, attempt=a) for i, a in enumerate(attempts))
    assert all(K.RETRY_FLAPPING not in _kinds(t) for t in ticks), ticks
