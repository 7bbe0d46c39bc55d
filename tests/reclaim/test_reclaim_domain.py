"""Table tests for job reclaim's pure rules: one row per line of the decision table
(domain/reclaim/decide.py), canonical node identity, hostlists, controller epochs, release
evidence and the escalation steps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from keeper.domain.reclaim.decide import decide
from keeper.domain.reclaim.epoch import observe
from keeper.domain.reclaim.evidence import BeatEvidence, BeatReport, ReleaseTally, evidence_of
from keeper.domain.reclaim.identity import (
    NodeNameError,
    canonical_node,
    canonical_nodes,
    expand_nodelist,
)
from keeper.domain.reclaim.jobs import ACTIVE, TERMINAL, WAITING, JobState
from keeper.domain.reclaim.models import (
    ControllerView,
    EpochState,
    Holding,
    JobView,
    KnownJob,
    Reason,
    Verdict,
)
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.steps import GRACEFUL_SIGNAL, KILL_SIGNAL, Step, attempts

S, V, R = JobState, Verdict, Reason
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
POLICY = ReclaimPolicy()  # end_grace 2 min, clock_skew 2 s
GRACE, SKEW = POLICY.end_grace, POLICY.clock_skew
# The holding was first seen ten minutes ago; the jobs were submitted before that.
SEEN = NOW - timedelta(minutes=10)
SUBMIT = NOW - timedelta(minutes=20)
EPOCH = EpochState(epoch=1, high_id=100, high_submit=NOW - timedelta(minutes=1))
NODES = frozenset({"n1", "n2", "n3"})


def _job(job_id: int = 10, state: S = S.RUNNING, **kw: Any) -> JobView:
    return JobView(job_id=job_id, state=state, submit_time=kw.pop("submit", SUBMIT), **kw)


def _known(job_id: int = 10, finalized: bool = True, **kw: Any) -> KnownJob:
    return KnownJob(
        job_id=job_id,
        epoch=kw.pop("epoch", 1),
        submit_time=kw.pop("submit", SUBMIT),
        finalized=finalized,
        last_state=kw.pop("last_state", S.COMPLETED if finalized else S.RUNNING),
        last_seen=NOW - timedelta(minutes=5),
    )


def _decide(
    *,
    job: JobView | None = None,
    job_id: int = 10,
    node: str = "n1",
    held_epoch: int = 1,
    seen: datetime = SEEN,
    epoch: EpochState = EPOCH,
    known: KnownJob | None = None,
    others: tuple[JobView, ...] = (),
):
    holding = Holding(node=node, job_id=job_id, epoch=held_epoch, first_seen=seen)
    jobs = {j.job_id: j for j in (*others, *([job] if job else []))}
    view = ControllerView(read_at=NOW, jobs=jobs)
    return decide(holding, view, epoch, known, NODES, POLICY)


def _ended(ago: timedelta, state: S = S.COMPLETED) -> JobView:
    return _job(state=state, end_time=NOW - ago)


# (table row, case, inputs of _decide, verdict, reason). Each row's reason is reached, and
# the neighbouring case (just across the row's condition) reaches a different one.
ROWS: list[tuple[int, str, dict[str, Any], Verdict, Reason]] = [
    (1, "node keeper does not know", {"node": "n9", "job": _ended(GRACE * 10)},
     V.QUARANTINE, R.UNKNOWN_NODE),
    (1, "neighbour: a known node", {"node": "n3", "job": _ended(GRACE * 10)},
     V.RECLAIM, R.TERMINAL),
    (2, "running here", {"job": _job(nodes=frozenset({"n1"}))}, V.SPARE, R.ACTIVE_HERE),
    (2, "suspended here", {"job": _job(state=S.SUSPENDED, nodes=frozenset({"n1"}))},
     V.SPARE, R.ACTIVE_HERE),
    (2, "a multi-node job containing this node",
     {"job": _job(nodes=frozenset({"n2", "n1", "n3"}), nodelist="n[1-3]")},
     V.SPARE, R.ACTIVE_HERE),
    # A wipe seen out of order: the new controller's job runs here, though keeper remembers
    # the holding in the older epoch.
    (2, "held since an earlier epoch, the job active here", {"held_epoch": 1,
     "epoch": EPOCH.model_copy(update={"epoch": 2}), "job": _job(nodes=frozenset({"n1"}))},
     V.SPARE, R.ACTIVE_HERE),
    (2, "held before the submit, the job active here", {"seen": SUBMIT - SKEW -
     timedelta(seconds=1), "job": _job(nodes=frozenset({"n1"}))}, V.SPARE, R.ACTIVE_HERE),
    (3, "running, nodes not committed", {"job": _job()}, V.SPARE, R.NODES_NOT_COMMITTED),
    (3, "completing, nodes not committed", {"job": _job(state=S.COMPLETING)},
     V.SPARE, R.NODES_NOT_COMMITTED),
    (3, "held since an earlier epoch, nodes not committed", {"held_epoch": 1,
     "epoch": EPOCH.model_copy(update={"epoch": 2}), "job": _job()},
     V.SPARE, R.NODES_NOT_COMMITTED),
    (4, "held since an earlier epoch", {"held_epoch": 1, "epoch": EPOCH.model_copy(
        update={"epoch": 2}), "job": _ended(GRACE * 10)}, V.QUARANTINE, R.OTHER_EPOCH),
    (4, "held since an earlier epoch, the job active elsewhere", {"held_epoch": 1,
     "epoch": EPOCH.model_copy(update={"epoch": 2}), "job": _job(nodes=frozenset({"n2"}))},
     V.QUARANTINE, R.OTHER_EPOCH),
    # A run that started moments before a wipe may be listed first after it.
    (4, "first seen within a heartbeat of the epoch's start", {"epoch": EPOCH.model_copy(
        update={"epoch": 2, "started_at": SEEN - POLICY.epoch_fence + timedelta(seconds=1)}
     ), "held_epoch": 2, "job": _job(nodes=frozenset({"n2"}))}, V.QUARANTINE, R.OTHER_EPOCH),
    (4, "neighbour: a beat into the epoch, the job ran here and ended", {"epoch":
     EPOCH.model_copy(update={"epoch": 2, "started_at": SEEN}), "held_epoch": 2,
     "job": _job(state=S.COMPLETED, end_time=NOW - GRACE * 2, nodes=frozenset({"n1"}))},
     V.RECLAIM, R.TERMINAL),
    (4, "a beat into the epoch, the job untracked", {"epoch": EPOCH.model_copy(update={
     "epoch": 2, "started_at": SEEN}), "held_epoch": 2, "job_id": 50, "known": _known(50)},
     V.QUARANTINE, R.OTHER_EPOCH),
    (4, "neighbour: first seen a heartbeat after the epoch's start", {"epoch": EPOCH.model_copy(
        update={"epoch": 2, "started_at": SEEN - POLICY.epoch_fence}), "held_epoch": 2,
     "job": _job(nodes=frozenset({"n2"}))}, V.RECLAIM, R.ACTIVE_ELSEWHERE),
    (5, "tracked, held before the submit", {"seen": SUBMIT - SKEW - timedelta(seconds=1),
     "job": _job(nodes=frozenset({"n2"}))}, V.QUARANTINE, R.PREDATES_JOB),
    (5, "neighbour: within the clock skew", {"seen": SUBMIT - SKEW,
     "job": _job(nodes=frozenset({"n2"}))}, V.RECLAIM, R.ACTIVE_ELSEWHERE),
    (5, "neighbour: no submit time proves nothing", {"seen": SUBMIT - timedelta(hours=1),
     "job": _job(submit=None, nodes=frozenset({"n2"}))}, V.RECLAIM, R.ACTIVE_ELSEWHERE),
    (6, "pending", {"job": _job(state=S.PENDING)}, V.SPARE, R.WAITING),
    (6, "preempted", {"job": _job(state=S.PREEMPTED)}, V.SPARE, R.WAITING),
    (6, "requeued, even with an old allocation elsewhere",
     {"job": _job(state=S.REQUEUED, nodes=frozenset({"n2"}))}, V.SPARE, R.WAITING),
    (7, "a multi-node job not containing this node",
     {"job": _job(nodes=frozenset({"n2", "n3"}), nodelist="n[2-3]")},
     V.RECLAIM, R.ACTIVE_ELSEWHERE),
    (7, "completing elsewhere", {"job": _job(state=S.COMPLETING, nodes=frozenset({"n2"}))},
     V.RECLAIM, R.ACTIVE_ELSEWHERE),
    (8, "terminal without an end time", {"job": _job(state=S.FAILED)}, V.SPARE, R.END_UNKNOWN),
    (9, "ended a moment ago", {"job": _ended(timedelta(seconds=1))}, V.SPARE, R.JUST_ENDED),
    (9, "ended just inside the grace", {"job": _ended(GRACE - timedelta(microseconds=1))},
     V.SPARE, R.JUST_ENDED),
    (10, "ended exactly end_grace ago", {"job": _ended(GRACE)}, V.RECLAIM, R.TERMINAL),
    (10, "cancelled long ago", {"job": _ended(timedelta(hours=3), S.CANCELLED)},
     V.RECLAIM, R.TERMINAL),
    (11, "untracked, at the watermark", {"job_id": 101}, V.SPARE, R.NEVER_ISSUED),
    (11, "untracked, above the watermark", {"job_id": 5000}, V.SPARE, R.NEVER_ISSUED),
    (11, "untracked, at a watermark the view raised", {"job_id": 201,
     "others": (_job(200),)}, V.SPARE, R.NEVER_ISSUED),
    (12, "untracked, below the watermark, never seen", {"job_id": 100},
     V.QUARANTINE, R.NEVER_SEEN),
    (12, "below a watermark the view raised, never seen", {"job_id": 150,
     "others": (_job(200),)}, V.QUARANTINE, R.NEVER_SEEN),
    (12, "an array parent: consumed, never stored", {"job_id": 50,
     "others": (_job(51), _job(52))}, V.QUARANTINE, R.NEVER_SEEN),
    (13, "untracked, held before keeper saw it submitted",
     {"job_id": 50, "known": _known(50, submit=SEEN + SKEW + timedelta(seconds=1))},
     V.QUARANTINE, R.PREDATES_JOB),
    (14, "untracked, last seen live", {"job_id": 50, "known": _known(50, finalized=False)},
     V.QUARANTINE, R.VANISHED_LIVE),
    (14, "untracked, last seen requeued is finalized",
     {"job_id": 50, "known": _known(50, last_state=S.REQUEUED)}, V.RECLAIM, R.AGED_OUT),
    (15, "untracked, last seen finalized", {"job_id": 50, "known": _known(50)},
     V.RECLAIM, R.AGED_OUT),
    (15, "neighbour of 13: within the skew", {"job_id": 50, "known": _known(50, submit=SEEN
     + SKEW)}, V.RECLAIM, R.AGED_OUT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("row", "case", "inputs", "verdict", "reason"), ROWS, ids=[f"{r[0]}-{r[1]}" for r in ROWS]
)
def test_each_case_gets_the_verdict_and_reason_of_its_decision_table_row(
    row: int, case: str, inputs: dict[str, Any], verdict: Verdict, reason: Reason
) -> None:
    decision = _decide(**inputs)
    assert (decision.verdict, decision.reason) == (verdict, reason), decision.detail
    assert decision.detail and decision.stale is (verdict is not V.SPARE)


def test_every_reason_of_the_table_is_reached() -> None:
    assert {r[4] for r in ROWS} == set(Reason)
    assert {r[0] for r in ROWS} == set(range(1, 16))


def test_the_decision_carries_the_view_watermark_and_epoch() -> None:
    decision = _decide(job_id=150, others=(_job(200),))
    assert decision.watermark == 201 and decision.epoch == 1 and decision.job is None
    tracked = _decide(job=_ended(GRACE * 2))
    assert tracked.job is not None and tracked.job.job_id == 10


def test_job_state_groups_cover_the_wire() -> None:
    assert not (TERMINAL & ACTIVE or TERMINAL & WAITING or ACTIVE & WAITING)
    assert set(JobState) == TERMINAL | ACTIVE | WAITING


# ---- node identity -------------------------------------------------------------------------

ALIASES = {"gpu-node-07-ib.fabric": "gpu-node-07", "Old-Name": "gpu-node-08"}


@pytest.mark.parametrize(
    ("name", "aliases", "canonical"),
    [
        ("gpu-node-07", None, "gpu-node-07"),
        ("GPU-NODE-07", None, "gpu-node-07"),
        ("gpu-node-07.cluster.local", None, "gpu-node-07"),
        ("GPU-Node-07.Cluster.Local.", None, "gpu-node-07"),
        ("  gpu-node-07 ", None, "gpu-node-07"),
        ("gpu-node-07.", None, "gpu-node-07"),
        ("10.0.0.7", None, "10.0.0.7"),
        ("10.0.0.7.", None, "10.0.0.7"),
        ("fd00::7", None, "fd00::7"),
        ("gpu-node-07-ib.fabric", ALIASES, "gpu-node-07"),  # alias, whole
        ("GPU-NODE-07-IB.fabric", ALIASES, "gpu-node-07"),
        ("gpu-node-07-ib", ALIASES, "gpu-node-07"),  # alias, short
        ("gpu-node-07-ib.other", ALIASES, "gpu-node-07"),  # short of another domain
        ("old-name.cluster.local", ALIASES, "gpu-node-08"),
        ("gpu-node-09.cluster", ALIASES, "gpu-node-09"),  # no alias: the rule
    ],
)
def test_a_node_is_its_lowercase_first_label_or_its_alias_and_an_address_is_itself(
    name: str, aliases: dict[str, str] | None, canonical: str
) -> None:
    assert canonical_node(name, aliases) == canonical


@pytest.mark.parametrize("name", ["", "  ", ".", "gpu node", "gpu/node", "-gpu", "név", "a;b"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(NodeNameError):
        canonical_node(name)


def test_every_spelling_of_a_node_is_one_node() -> None:
    spellings = ["gpu-node-07", "GPU-NODE-07", "gpu-node-07.cluster.local", "gpu-node-07."]
    assert canonical_nodes(spellings) == frozenset({"gpu-node-07"})


@pytest.mark.parametrize(
    ("nodelist", "names"),
    [
        ("", []),
        ("  ", []),
        ("gpu-07", ["gpu-07"]),
        ("gpu-[01-03]", ["gpu-01", "gpu-02", "gpu-03"]),
        ("gpu-[01-02],cpu-9", ["gpu-01", "gpu-02", "cpu-9"]),
        ("n[1,3-4]", ["n1", "n3", "n4"]),
    ],
)
def test_a_hostlist_expands_its_ranges_and_lists_in_order(nodelist: str, names: list[str]) -> None:
    assert expand_nodelist(nodelist) == names


def test_a_bad_hostlist_is_refused() -> None:
    with pytest.raises(NodeNameError, match="not a hostlist"):
        expand_nodelist("gpu-[01-")


def test_a_multi_node_job_spelled_otherwise_still_contains_this_node() -> None:
    nodes = canonical_nodes(expand_nodelist("GPU-NODE-[06-08].cluster.local"))
    job = _job(nodes=nodes)
    spared = decide(
        Holding(node=canonical_node("gpu-node-07"), job_id=10, epoch=1, first_seen=SEEN),
        ControllerView(read_at=NOW, jobs={10: job}),
        EPOCH,
        None,
        {"gpu-node-07"},
        POLICY,
    )
    assert spared.reason is R.ACTIVE_HERE


# ---- controller epochs ---------------------------------------------------------------------

T = datetime(2026, 5, 1, tzinfo=UTC)
HIGH = EpochState(epoch=1, high_id=100, high_submit=T)


def _view(*jobs: JobView, at: datetime = T + timedelta(hours=2)) -> ControllerView:
    return ControllerView(read_at=at, jobs={j.job_id: j for j in jobs})


def _remembered(*ids: int, submit: datetime = T - timedelta(hours=1)) -> dict[int, KnownJob]:
    return {i: _known(i, submit=submit, last_state=S.COMPLETED) for i in ids}


EPOCH_CASES: list[tuple[str, ControllerView, dict[int, KnownJob], bool]] = [
    ("evictions: the job map emptied", _view(), _remembered(50, 100), False),
    ("evictions: only low old jobs left",
     _view(_job(50, S.COMPLETED, submit=T - timedelta(hours=1))), _remembered(50), False),
    ("a new high job", _view(_job(101, submit=T + timedelta(hours=1))), {}, False),
    ("a reissued low id submitted after the high job",
     _view(_job(5, submit=T + timedelta(minutes=1))), {}, True),
    ("at the high id, submitted after it", _view(_job(100, submit=T + timedelta(minutes=1))),
     {}, True),
    ("a low id submitted after the high job, within the skew",
     _view(_job(5, submit=T + SKEW)), {}, False),
    ("a remembered id with a new submit time",
     _view(_job(50, S.RUNNING, submit=T - timedelta(minutes=30))), _remembered(50), True),
    # The same id's submit times come from one clock: a reissue within the skew is a reissue.
    ("a remembered id, its submit time within the skew",
     _view(_job(50, S.RUNNING, submit=T - timedelta(hours=1) + SKEW)), _remembered(50), True),
    ("a remembered id, submitted 2 ms apart",
     _view(_job(50, S.RUNNING, submit=T - timedelta(hours=1, milliseconds=-2))),
     _remembered(50), True),
    ("a remembered id read again, to the microsecond",
     _view(_job(50, S.COMPLETED, submit=T - timedelta(hours=1))), _remembered(50), False),
    ("a remembered id read again, within a millisecond",
     _view(_job(50, S.COMPLETED, submit=T - timedelta(hours=1, microseconds=-900))),
     _remembered(50), False),
    ("a job without a submit time", _view(_job(5, submit=None)), {}, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "view", "known", "new_epoch"), EPOCH_CASES, ids=[c[0] for c in EPOCH_CASES]
)
def test_a_reissued_job_id_starts_a_new_epoch_and_evictions_never_lower_the_watermark(
    case: str, view: ControllerView, known: dict[int, KnownJob], new_epoch: bool
):
    obs = observe(view, HIGH, known, SKEW)
    assert obs.new_epoch is new_epoch
    assert obs.epoch.epoch == (2 if new_epoch else 1)
    if new_epoch:
        assert obs.epoch.why and obs.epoch.started_at == view.read_at
        # Nothing of the old epoch carries over: every job in the view is remembered anew.
        assert {k.job_id for k in obs.remember} == set(view.jobs)
        assert all(k.epoch == 2 for k in obs.remember)
        assert obs.epoch.high_id == view.max_job_id
    else:
        # Evictions never lower the watermark.
        assert obs.epoch.high_id == max(HIGH.high_id, view.max_job_id)


def test_only_new_or_changed_jobs_are_remembered() -> None:
    known = _remembered(50) | {
        60: _known(60, finalized=False, submit=T - timedelta(hours=1), last_state=S.RUNNING)
    }
    view = _view(
        _job(50, S.COMPLETED, submit=T - timedelta(hours=1)),  # unchanged
        _job(60, S.COMPLETED, submit=T - timedelta(hours=1)),  # finished
        _job(70, S.PENDING, submit=T - timedelta(minutes=50)),  # new
    )
    obs = observe(view, HIGH, known, SKEW)
    assert not obs.new_epoch and sorted(k.job_id for k in obs.remember) == [60, 70]
    assert {k.job_id: k.finalized for k in obs.remember} == {60: True, 70: False}


# ---- release evidence and steps ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "runs_nothing", "evidence"),
    [
        ([], False, BeatEvidence.SILENT),
        ([], True, BeatEvidence.IDLE),
        ([1, 10], False, BeatEvidence.HELD),
        ([1, 10], True, BeatEvidence.HELD),
        ([1, 2], False, BeatEvidence.ABSENT),
    ],
)
def test_a_heartbeat_is_held_absent_idle_or_silent_by_what_it_lists_and_the_node_runs(
    reported: list[int], runs_nothing: bool, evidence: BeatEvidence
) -> None:
    assert evidence_of(reported, 10, node_runs_nothing=runs_nothing) is evidence


H, A, Q = BeatEvidence.HELD, BeatEvidence.ABSENT, BeatEvidence.SILENT
I, D = BeatEvidence.IDLE, BeatEvidence.DONE  # noqa: E741


@pytest.mark.parametrize(
    ("beats", "count", "released"),
    [
        ([], 0, False),
        ([Q, Q, Q, Q], 0, False),  # empty beats while the node runs something never count
        ([A], 1, False),
        ([A, Q, A], 2, True),  # silence between does not reset
        ([A, H, A], 1, False),  # held resets
        ([A, A, H], 0, False),
        ([A, A, A], 3, True),
        ([D], 0, True),  # the agent reported the job finished
        ([H, D], 0, True),
        ([D, H], 0, False),  # ... and then listed it again
        ([Q, D], 0, True),
    ],
)
def test_absent_beats_in_a_row_or_a_done_report_release_a_holding_until_it_is_listed_again(
    beats: list[BeatEvidence], count: int, released: bool
) -> None:
    tally = ReleaseTally()
    for i, evidence in enumerate(beats):
        tally = tally.add(BeatReport(evidence=evidence, at=T + timedelta(seconds=30 * i)))
    assert tally.absent_in_a_row == count
    assert tally.released(POLICY) is released
    release = tally.release(POLICY)
    assert (release is not None and release.why != "") is released


# An idle node: empty heartbeats every 30 s (spurd's pace), the default policy (4 beats over
# at least 2 minutes).
@pytest.mark.parametrize(
    ("beats", "released"),
    [
        ([I, I, I, I], False),  # four beats span 90 s: under the window
        ([I, I, I, I, I], True),  # five span 120 s
        ([I, I, H, I, I, I, I], False),  # held starts the count and the window again
        ([I, I, H, I, I, I, I, I], True),
        ([I, I, Q, I, I, I], True),  # a beat while the node ran something neither counts nor resets
        ([I, A, I, I, I, I], True),  # an absent beat does not reset the idle count
    ],
)
def test_an_idle_nodes_empty_beats_release_it_over_a_window(
    beats: list[BeatEvidence], released: bool
) -> None:
    tally = ReleaseTally()
    for i, evidence in enumerate(beats):
        tally = tally.add(BeatReport(evidence=evidence, at=T + timedelta(seconds=30 * i)))
    assert tally.released(POLICY) is released, tally
    if released:
        release = tally.release(POLICY)
        assert (release is not None and "weak evidence" in release.why) or tally.absent_in_a_row


def test_idle_beats_need_both_the_count_and_the_window() -> None:
    policy = ReclaimPolicy(idle_release_beats=3, idle_release_window=timedelta(minutes=5))
    tally = ReleaseTally()
    for seconds in (0, 1, 2, 3, 4):  # five beats within 4 s: the count, not the window
        tally = tally.add(BeatReport(evidence=I, at=T + timedelta(seconds=seconds)))
    assert not tally.released(policy)
    tally = tally.add(BeatReport(evidence=I, at=T + timedelta(minutes=5)))
    assert tally.released(policy) and tally.idle_in_a_row == 6


def test_a_held_beat_is_remembered_as_the_last_listing() -> None:
    tally = ReleaseTally().add(BeatReport(evidence=H, at=T))
    tally = tally.add(BeatReport(evidence=A, at=T + timedelta(seconds=30)))
    assert tally.held_at == T and tally.last is A


@pytest.mark.parametrize(
    ("graceful", "forced", "plan"),
    [
        (1, 0, [(Step.GRACEFUL, GRACEFUL_SIGNAL, 1, 1)]),
        (3, 2, [(Step.GRACEFUL, 0, 1, 1), (Step.GRACEFUL, 0, 2, 2), (Step.GRACEFUL, 0, 3, 3),
                (Step.FORCED, 9, 1, 4), (Step.FORCED, KILL_SIGNAL, 2, 5)]),
        (2, 1, [(Step.GRACEFUL, 0, 1, 1), (Step.GRACEFUL, 0, 2, 2), (Step.FORCED, 9, 1, 3)]),
    ],
)  # fmt: skip
def test_the_graceful_tries_come_before_the_forced_ones_each_counted_in_its_step_and_overall(
    graceful: int, forced: int, plan: list[tuple[Step, int, int, int]]
) -> None:
    policy = ReclaimPolicy(graceful_tries=graceful, forced_tries=forced)
    assert [(a.step, a.signal, a.try_in_step, a.overall) for a in attempts(policy)] == plan


@pytest.mark.parametrize(
    ("attempt", "wait"),
    [(0, 45), (1, 45), (2, 90), (3, 180), (4, 360), (5, 600), (6, 600), (40, 600)],
)
def test_wait_after_doubles_up_to_the_cap(attempt: int, wait: int) -> None:
    assert POLICY.wait_after(attempt) == timedelta(seconds=wait)


def test_wait_after_with_a_cap_below_the_first_wait() -> None:
    policy = ReclaimPolicy(retry_initial=timedelta(minutes=5), retry_max=timedelta(minutes=1))
    assert policy.wait_after(1) == timedelta(minutes=1)
