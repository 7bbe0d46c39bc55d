"""A bootstrap's state changes only through domain/tpu/transitions.py: each function's
table, checked row by row, and what the sweep's triage and the TPU renders make of a state."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from keeper.domain.tpu.failures import (
    SeenRound,
    deadline_failure,
    health_failure,
    terminal_failure,
)
from keeper.domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    BootstrapStatus,
    CompensationEvent,
    CompensationProgress,
    DeletionReport,
    HealthReport,
    OwnedResource,
    Owner,
    PhaseRunState,
    SupervisorState,
    SweepCandidate,
    SweepLocation,
    SweepSurvey,
    TeardownState,
    VmFailure,
)
from keeper.domain.tpu.observation import NodeView, SliceObservation, VmEndpoint
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.status_view import TEARDOWN_CANCEL_NOTE, render_sweep, render_teardown
from keeper.domain.tpu.sweep import triage
from keeper.domain.tpu.transitions import (
    SUPERVISOR_COMPENSATING,
    bootstrap_result,
    cancel_seen,
    closed,
    compensated_on_cancel,
    compensating,
    compensation_seen,
    continued,
    counted,
    done,
    entered,
    health_seen,
    observed,
    orphan_counts,
    outcome,
    phases_ended,
    phases_failed,
    revised,
    stopped_in,
    supervisor_compensating,
    takes,
    turned_stuck,
)
from tests.harness import slice_request

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
QR = "projects/p/locations/z/queuedResources/s"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def fresh() -> BootstrapStatus:
    return BootstrapStatus.initial(slice_request("s"))


def progress(stuck: bool = False) -> CompensationProgress:
    return CompensationProgress(
        started_at=at(0),
        window=timedelta(minutes=5),
        window_ends_at=at(5),
        windows_ended=1,
        last_error="PermissionDenied: no",
        stuck_since=at(16) if stuck else None,
    )


# -- the phase child ---------------------------------------------------------------------


def test_entering_a_phase_closes_the_open_timing_and_opens_its_own():
    submitted = entered(fresh(), Phase.SUBMIT, at(0))
    assign = entered(submitted, Phase.ASSIGN, at(1), deadline_at=at(240), started_at=at(0))
    assert [(t.phase, t.started_at, t.ended_at) for t in assign.timings] == [
        (Phase.SUBMIT, at(0), at(1)),
        (Phase.ASSIGN, at(0), None),
    ]
    assert (assign.phase, assign.phase_deadline_at, assign.updated_at) == (
        Phase.ASSIGN,
        at(240),
        at(1),
    )


@pytest.mark.parametrize("end", [Phase.DONE, Phase.FAILED, Phase.COMPENSATE, Phase.CANCELLED])
def test_entering_an_end_only_closes_the_open_timing(end: Phase):
    assign = entered(fresh(), Phase.ASSIGN, at(0), deadline_at=at(240))
    ended = entered(assign, end, at(3))
    assert [(t.phase, t.ended_at) for t in ended.timings] == [(Phase.ASSIGN, at(3))]
    assert ended.phase is end and ended.phase_deadline_at is None


def test_what_the_child_sees_lands_in_its_counts():
    obs = SliceObservation(
        qr_state="ACTIVE",
        nodes=[NodeView(node_id="s", state="READY", ips=["10.0.0.1", None])],
        expected_nodes=1,
        expected_vms=2,
    )
    seen = observed(fresh(), obs, at(2))
    assert (seen.qr_state, seen.nodes_ready, seen.vms_with_ip) == ("ACTIVE", 1, 1)
    failing = [VmFailure(node="s", index=1, ip="10.0.0.2", reason="HTTP 503")]
    health = health_seen(seen, HealthReport(total=4, healthy=1, failing=failing), at(3))
    assert (health.vms_healthy, health.failing_vms, health.vms_failing) == (1, failing, 3)


def test_a_failed_phase_records_where_it_stopped_and_why():
    assign = entered(fresh(), Phase.ASSIGN, at(0), deadline_at=at(240))
    failure = BootstrapFailure(phase=Phase.ASSIGN, kind="deadline", message="assign deadline")
    failed = phases_failed(assign, failure, at(240))
    assert (failed.phase, failed.failed_phase, failed.error) == (
        Phase.FAILED,
        Phase.ASSIGN,
        "assign deadline",
    )


@pytest.mark.parametrize(
    ("phase", "failed_phase", "stopped"),
    [
        (Phase.ASSIGN, None, Phase.ASSIGN),  # cancelled while it waited
        (Phase.FAILED, Phase.READY, Phase.READY),  # where it stopped stays
    ],
)
def test_a_cancel_compensates_from_the_phase_it_stopped_in(phase, failed_phase, stopped):
    status = fresh().model_copy(update={"phase": phase, "failed_phase": failed_phase})
    started = compensating(status, at(5))
    assert (started.phase, started.failed_phase, started.compensation_started_at) == (
        Phase.COMPENSATE,
        stopped,
        at(5),
    )


def test_a_window_that_ran_out_reads_stuck_with_what_to_do():
    retrying = compensation_seen(fresh(), progress(), at(5))
    assert not retrying.compensation_stuck
    assert retrying.compensation is not None and "retrying after" in retrying.compensation
    stuck = compensation_seen(fresh(), progress(stuck=True), at(20))
    assert stuck.compensation_stuck and stuck.compensation_stuck_since == at(16)
    assert stuck.compensation_last_error == "PermissionDenied: no"
    assert stuck.compensation is not None and "grant roles/tpu.admin" in stuck.compensation


def test_a_continued_child_goes_on_from_its_last_status_as_stuck_as_before():
    before = compensating(entered(fresh(), Phase.ASSIGN, at(0)), at(1))
    before = revised(compensation_seen(before, progress(stuck=True), at(20)))
    goes_on = continued(before, progress(stuck=True), at(30))
    assert goes_on.revision == before.revision  # the supervisor takes the next one
    assert (goes_on.phase, goes_on.failed_phase) == (Phase.COMPENSATE, Phase.ASSIGN)
    assert goes_on.compensation_stuck and goes_on.compensation_started_at == at(0)
    assert [t.phase for t in goes_on.timings] == [Phase.ASSIGN]


def test_a_finished_cancel_compensation_is_cancelled_and_no_longer_stuck():
    stuck = compensation_seen(compensating(fresh(), at(0)), progress(stuck=True), at(20))
    report = DeletionReport(deleted=[QR])
    finished = compensated_on_cancel(stuck, report, at(30))
    assert finished.phase is Phase.CANCELLED and not finished.compensation_stuck
    assert finished.child_compensation == report and finished.compensation == "deleted s"


def test_each_published_status_is_a_new_revision():
    assert revised(revised(fresh())).revision == 2


def orphan(
    orphaned: bool, compensating_now: bool, before: tuple[CompensationEvent, ...], stuck: bool
) -> PhaseRunState:
    status = fresh().model_copy(
        update={
            "compensation_started_at": at(0) if compensating_now else None,
            "compensation_stuck": stuck,
        }
    )
    return PhaseRunState(status=status, orphaned=orphaned, counted=before)


@pytest.mark.parametrize(
    ("orphaned", "compensating_now", "before", "stuck", "now"),
    [
        (False, True, (), True, ()),
        (True, False, (), True, ()),
        (True, True, (), False, ("started",)),
        (True, True, (), True, ("started", "stuck")),
        (True, True, ("started",), True, ("stuck",)),
        (True, True, ("stuck",), True, ("started",)),  # the supervisor counted it stuck
        (True, True, ("started", "stuck"), True, ()),
    ],
)
def test_an_orphaned_child_counts_its_compensation_once(
    orphaned, compensating_now, before, stuck, now
):
    state, due = orphan_counts(orphan(orphaned, compensating_now, before, stuck))
    assert due == now
    assert set(state.counted) == {*before, *now}
    assert orphan_counts(state)[1] == ()  # never again


def test_counting_an_event_twice_keeps_one():
    state = counted(counted(PhaseRunState(status=fresh()), "stuck"), "stuck", "started")
    assert state.counted == ("stuck", "started")


def test_a_completed_bootstraps_result_spans_its_phases():
    request = slice_request("s")
    status = entered(fresh(), Phase.SUBMIT, at(0))
    status = entered(status, Phase.ASSIGN, at(0), started_at=at(0))
    status = entered(status, Phase.DONE, at(10))
    obs = SliceObservation(
        nodes=[NodeView(node_id="s", state="READY", ips=["10.0.0.1"])],
        expected_nodes=1,
        expected_vms=1,
    )
    result = bootstrap_result(request, ["s"], status, obs)
    assert result.total_seconds == 600 and result.phase_seconds == {"submit": 0, "assign": 600}
    assert result.vms == [VmEndpoint(node="s", index=0, ip="10.0.0.1")]
    assert result.queued_resource is not None and result.queued_resource.endswith("/s")


# -- the supervisor ----------------------------------------------------------------------


OURS = Owner(workflow_id="tpu-bootstrap-s", run_id="r")
# An earlier bootstrap of the same name: its child, still compensating, signals by workflow id.
EARLIER = Owner(workflow_id="tpu-bootstrap-s", run_id="r-earlier")


def supervisor(**changes: object) -> SupervisorState:
    state = SupervisorState(owner=OURS, status=fresh())
    return state.model_copy(update=changes)


@pytest.mark.parametrize(
    ("final", "last", "incoming", "sender", "taken"),
    [
        (False, 3, 4, OURS, True),
        (False, 3, 4, None, True),  # sent before children named their supervisor
        (False, 3, 4, EARLIER, False),  # another bootstrap's child
        (False, 3, 3, OURS, False),  # the same one again
        (False, 3, 2, OURS, False),  # late, out of order
        (True, 3, 9, OURS, False),  # the supervisor owns the final state
    ],
)
def test_the_supervisor_takes_only_its_own_childs_newer_signal_while_it_follows(
    final, last, incoming, sender, taken
):
    state = supervisor(final=final, status=fresh().model_copy(update={"revision": last}))
    assert takes(state, fresh().model_copy(update={"revision": incoming}), sender) is taken


@pytest.mark.parametrize(
    ("before", "after", "turned"), [(False, True, True), (True, True, False), (False, False, False)]
)
def test_a_compensation_turns_stuck_once(before, after, turned):
    was = fresh().model_copy(update={"compensation_stuck": before})
    now = fresh().model_copy(update={"compensation_stuck": after})
    assert turned_stuck(was, now) is turned


@pytest.mark.parametrize(
    ("phase", "failed_phase", "stopped"),
    [
        (Phase.READY, None, Phase.READY),
        (Phase.COMPENSATE, Phase.ASSIGN, Phase.ASSIGN),
        (Phase.CANCELLED, Phase.HEALTH, Phase.HEALTH),
        (Phase.FAILED, None, Phase.FAILED),
    ],
)
def test_the_bootstrap_stopped_in_its_phase_not_in_the_childs_compensate(
    phase, failed_phase, stopped
):
    status = fresh().model_copy(update={"phase": phase, "failed_phase": failed_phase})
    assert stopped_in(status) is stopped


@pytest.mark.parametrize(
    ("cancelled", "seen", "closes"),
    [
        (False, False, Phase.FAILED),
        (True, False, Phase.CANCELLED),
        (False, True, Phase.CANCELLED),  # a cancel during compensation
    ],
)
def test_a_cancel_whenever_it_came_closes_the_bootstrap_cancelled(cancelled, seen, closes):
    failure = BootstrapFailure(phase=Phase.ASSIGN, kind="deadline", message="m")
    state = phases_ended(supervisor(), failure, cancelled)
    if seen:
        state = cancel_seen(state)
    assert state.final and outcome(state) is closes


def test_the_supervisors_compensation_shows_why_it_runs():
    failure = BootstrapFailure(phase=Phase.ASSIGN, kind="deadline", message="assign deadline")
    state = supervisor_compensating(phases_ended(supervisor(), failure, False), at(240))
    status = state.status
    assert (status.phase, status.error, status.compensation) == (
        Phase.COMPENSATE,
        "assign deadline",
        SUPERVISOR_COMPENSATING,
    )
    assert status.compensation_started_at == at(240) and status.phase_deadline_at is None


@pytest.mark.parametrize(
    ("kind", "child", "report", "by_child", "cleanup", "qr_state"),
    [
        ("taken", None, None, False, "nothing was created and nothing was deleted", "ACTIVE"),
        ("deadline", None, DeletionReport(deleted=[QR]), False, "deleted s", "deleted"),
        (
            "cancelled",
            DeletionReport(deleted=[QR]),
            DeletionReport(already_gone=[QR]),
            True,
            "the phase workflow deleted s when it was cancelled",
            "deleted",
        ),
        (
            "deadline",
            None,
            DeletionReport(not_ours=[QR]),
            False,
            "left s alone: another run owns them",
            "ACTIVE",
        ),
    ],
)
def test_closing_says_who_deleted_what(kind, child, report, by_child, cleanup, qr_state):
    failure = BootstrapFailure(phase=Phase.ASSIGN, kind=kind, message="m")
    status = fresh().model_copy(
        update={"qr_state": "ACTIVE", "child_compensation": child, "compensation_stuck": True}
    )
    state = closed(phases_ended(supervisor(status=status), failure, False), report, queued=True)
    assert state.failure is not None
    assert state.failure.cleanup is not None and state.failure.cleanup.startswith(cleanup)
    assert state.failure.compensated_by_child is by_child
    if report is not None:
        assert state.failure.compensation is not None
        assert state.failure.compensation.deleted == (child or report).deleted
    assert state.status.qr_state == qr_state and not state.status.compensation_stuck
    assert (state.status.phase, state.status.failed_phase) == (Phase.FAILED, Phase.ASSIGN)


def test_a_completed_child_is_done_whatever_its_last_signal_said():
    status = entered(fresh(), Phase.HEALTH, at(0), deadline_at=at(10))
    status = status.model_copy(
        update={"failing_vms": [VmFailure(node="s", index=0, ip="x", reason="503")]}
    )
    result = BootstrapResult(
        slice_name="s",
        capacity="reserved",
        queued_resource=QR,
        nodes=["s"],
        vms=[VmEndpoint(node="s", index=i, ip=f"10.0.0.{i}") for i in range(4)],
    )
    state = done(supervisor(status=status), result, at(3))
    assert state.final and state.status.phase is Phase.DONE
    assert (state.status.vms_healthy, state.status.nodes_ready, state.status.failing_vms) == (
        4,
        1,
        [],
    )
    assert state.status.timings[-1].ended_at == at(3)


# -- failures ------------------------------------------------------------------------------


def test_a_deadline_says_what_was_last_seen():
    obs = SliceObservation(qr_state="ACTIVE", expected_nodes=1, expected_vms=4)
    failure = deadline_failure(Phase.READY, timedelta(minutes=10), obs, queued=True)
    assert failure.message == (
        "ready deadline (10m) exceeded; last seen: QR ACTIVE, 0/1 nodes READY, 0/4 VMs with IP"
    )
    node = deadline_failure(Phase.READY, timedelta(minutes=10), obs, queued=False)
    assert "last seen: node not listed yet" in node.message


def test_a_health_deadline_names_every_vm_the_last_full_round_saw():
    seen = [VmFailure(node="s", index=i, ip=f"10.0.0.{i}", reason="HTTP 503") for i in range(3)]
    cut = HealthReport(total=4, healthy=1, failing=seen[:1])  # a retried attempt's details
    full = HealthReport(total=4, healthy=1, failing=seen)  # the last round the workflow saw
    failure = health_failure(timedelta(minutes=10), 4, SeenRound(cut, "finished"), full)
    assert failure.failing_vms == seen
    assert failure.message.startswith("health deadline (10m) exceeded: 3 of 4 VMs not healthy")


def _vms(indices: range, reason: str = "HTTP 503") -> list[VmFailure]:
    return [
        VmFailure(node="s", index=i, ip=f"10.0.{i // 256}.{i % 256}", reason=reason)
        for i in indices
    ]


def _counted_and_named(message: str) -> tuple[int, int]:
    """The "N of M" count a message states, and how many VMs it names ("and K more" too)."""
    stated = re.search(r"(\d+) of \d+ VMs", message)
    assert stated is not None, message
    named = len(re.findall(r"s/\d+ 10\.0\.\d+\.\d+ \(", message))
    more = re.search(r" and (\d+) more$", message)
    return int(stated.group(1)), named + (int(more.group(1)) if more else 0)


def _report(total: int, healthy: int, named: int, seconds: float = 0.0) -> HealthReport:
    return HealthReport(
        total=total, healthy=healthy, failing=_vms(range(named)), round_seconds=seconds
    )


@pytest.mark.parametrize(
    ("seen", "earlier", "reads", "listed"),
    [
        # The last round finished: its own list.
        (SeenRound(_report(8, 6, 2), "finished"), None, "2 of 8 VMs not healthy", 2),
        # A retried attempt's first five of 20, no full round to complete them.
        (SeenRound(_report(64, 44, 5), "finished"), None, "20 of 64 VMs not healthy", 5),
        # ...and a full round that counted 30 failing: another round, so not its names.
        (SeenRound(_report(64, 44, 5), "finished"), _report(64, 34, 30), "20 of 64 VMs", 5),
        # ...and a full round of the same 20 failing: its names.
        (SeenRound(_report(64, 44, 5), "finished"), _report(64, 44, 20), "20 of 64 VMs", 20),
        # Cut short at the deadline: the VMs that had not answered count as not healthy.
        (SeenRound(_report(4096, 2000, 3, 1.5), "cut short"), None,
         "cut short after 1.5s: 2096 of 4096 VMs had not answered healthy", 3),
        # No round at the deadline (the "0 of N VMs not healthy" naming three).
        (SeenRound(_report(4096, 4093, 3), "earlier"), None,
         "in the last one that did, 3 of 4096 VMs were not healthy", 3),
    ],
)  # fmt: skip
def test_a_health_deadline_counts_exactly_the_vms_it_names(seen, earlier, reads, listed):
    failure = health_failure(timedelta(minutes=2, seconds=30), 4096, seen, earlier)
    assert reads in failure.message
    count, named = _counted_and_named(failure.message)
    assert count == named == seen.report.total - seen.report.healthy
    assert len(failure.failing_vms) == listed


def test_a_health_deadline_with_no_round_says_so_and_what_to_do():
    failure = health_failure(timedelta(minutes=2, seconds=30), 4096, None)
    assert failure.message.startswith(
        "health deadline (2m30s) exceeded: no health round over the 4096 VMs finished"
    )
    assert "health port" in failure.message and "longer health deadline" in failure.message
    assert " of 4096 VMs not healthy" not in failure.message
    assert failure.failing_vms == []


def test_only_a_terminal_state_fails_a_phase_at_once():
    waiting = SliceObservation(qr_state="WAITING_FOR_RESOURCES", expected_nodes=1, expected_vms=1)
    assert terminal_failure(Phase.ASSIGN, waiting) is None
    failed = waiting.model_copy(update={"qr_state": "FAILED", "qr_error": "no capacity"})
    found = terminal_failure(Phase.ASSIGN, failed)
    assert found is not None and found.kind == "terminal"
    assert found.message == "assign: queued resource is FAILED: no capacity"


# -- the sweep and the teardown ------------------------------------------------------------


def candidate(name: str, owner_status: str) -> SweepCandidate:
    return SweepCandidate(
        resource=OwnedResource(
            kind="queued_resource",
            id=name,
            name=f"projects/p/locations/z/queuedResources/{name}",
            state="ACTIVE",
            owner_workflow_id=f"tpu-bootstrap-{name}",
            owner_run_id="r",
        ),
        owner_status=owner_status,
    )


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_sweep_deletes_only_orphans_and_a_dry_run_deletes_none(dry_run: bool):
    survey = SweepSurvey(
        locations=[SweepLocation(project="p", zone="z")],
        candidates=[
            candidate("kept", "RUNNING"),
            candidate("lost", "NOT_FOUND"),
            candidate("orphan", "FAILED"),
        ],
        errors=["listing p/y: PermissionDenied"],
    )
    report, orphans = triage(survey, dry_run)
    assert (report.examined, report.locations, report.errors) == (3, ["p/z"], survey.errors)
    assert [len(report.kept), len(report.unknown_owner)] == [1, 1]
    assert [c.resource.id for c in orphans] == ([] if dry_run else ["orphan"])
    assert len(report.deleted) == (1 if dry_run else 0)
    details = render_sweep(report)
    assert "examined 3" in details and ("(dry run)" in details) is dry_run
    assert "**Errors:**" in details


def test_a_teardown_shows_a_cancel_and_what_the_delete_did_as_text():
    details = render_teardown(
        "s", "job *done*", "teardown", TeardownState(cancel_seen=True, deletion="deleted s")
    )
    assert details.startswith("## s: **teardown**")
    assert "job \\*done\\*" in details  # outside text, never rendered
    assert TEARDOWN_CANCEL_NOTE in details and "deleted s" in details
