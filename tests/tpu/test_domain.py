"""Table tests for keeper's pure rules: phase plans, deadlines, states, progress, sweeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import TypeAdapter, ValidationError

from keeper.domain.common import compensation
from keeper.domain.common.durations import HumanDuration, format_duration, parse_duration
from keeper.domain.tpu.models import CompensationPolicy, OwnedResource, SweepCandidate
from keeper.domain.tpu.naming import bootstrap_workflow_id, node_ids, owner_labels
from keeper.domain.tpu.observation import NodeView, SliceObservation, bucket, progress_key
from keeper.domain.tpu.phases import Phase, backstop, deadline_for, phase_plan
from keeper.domain.tpu.qr_state import QrStage, qr_stage
from keeper.domain.tpu.sweep import SweepAction, counts_as_release, sweep_action
from keeper.domain.tpu.topology import vms_per_node
from tests.harness import slice_request


@pytest.mark.parametrize(
    ("state", "stage"),
    [
        ("CREATING", QrStage.WAITING),
        ("ACCEPTED", QrStage.WAITING),
        ("WAITING_FOR_RESOURCES", QrStage.WAITING),
        ("PROVISIONING", QrStage.PROVISIONING),
        ("ACTIVE", QrStage.ACTIVE),
        ("FAILED", QrStage.TERMINAL),
        ("SUSPENDING", QrStage.TERMINAL),
        ("SUSPENDED", QrStage.TERMINAL),
        ("DELETING", QrStage.TERMINAL),
        ("NOT_FOUND", QrStage.TERMINAL),
        ("SOMETHING_NEW", QrStage.WAITING),
    ],
)
def test_a_queued_resource_state_maps_to_its_stage_and_an_unknown_one_waits(
    state: str, stage: QrStage
):
    assert qr_stage(state) is stage


@pytest.mark.parametrize(
    ("accelerator", "vms"),
    [
        ("v4-8", 1),
        ("v4-32", 4),
        ("v4-2048", 256),
        ("v5p-128", 16),
        ("v5litepod-1", 1),
        ("v5litepod-8", 1),
        ("v5litepod-16", 4),
        ("v6e-256", 64),
        ("v2-8", 1),
    ],
)
def test_each_accelerator_type_has_its_number_of_vms_per_node(accelerator: str, vms: int):
    assert vms_per_node(accelerator) == vms


@pytest.mark.parametrize(
    ("capacity", "plan"),
    [
        ("reserved", [Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH]),
        ("spot", [Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH]),
        ("on-demand", [Phase.READY, Phase.HEALTH]),
        ("preemptible", [Phase.READY, Phase.HEALTH]),
    ],
)
def test_reserved_and_spot_slices_run_every_phase_the_others_start_at_ready(
    capacity: str, plan: list[Phase]
):
    assert phase_plan(slice_request(capacity=capacity)) == plan


@pytest.mark.parametrize(
    ("accelerator", "overrides", "phase", "budget"),
    [
        ("v4-32", {}, Phase.ASSIGN, timedelta(hours=4)),
        ("v4-32", {}, Phase.PROVISION, timedelta(hours=1)),
        ("v4-32", {}, Phase.READY, timedelta(minutes=10)),
        ("v4-32", {}, Phase.HEALTH, timedelta(minutes=10)),
        ("v4-512", {}, Phase.READY, timedelta(minutes=15)),  # 64 VMs
        ("v4-4096", {}, Phase.HEALTH, timedelta(minutes=30)),  # 512 VMs
        ("v4-4096", {"health": "12m"}, Phase.HEALTH, timedelta(minutes=12)),
        ("v4-32", {"assign": "PT2H"}, Phase.ASSIGN, timedelta(hours=2)),
        ("v4-32", {"provision": 90}, Phase.PROVISION, timedelta(seconds=90)),
    ],
)
def test_a_phase_deadline_grows_with_the_slice_and_a_request_override_wins(
    accelerator, overrides, phase, budget
):
    request = slice_request(accelerator_type=accelerator, deadlines=overrides)
    assert deadline_for(request, phase) == budget


def test_backstop_outlasts_keepers_own_assign_deadline():
    assert backstop(timedelta(hours=4), timedelta(seconds=30)) == timedelta(hours=4, minutes=2)


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("slice_name", "Has_Upper", "slice_name"),
        ("zone", "us-central2", "zone"),
        ("accelerator_type", "v9-8", "accelerator_type"),
        ("health_port", 0, "health_port"),
        ("poll_interval", "100ms", "poll_interval"),
        ("labels", {"keeper-owner": "x"}, "reserved"),
        ("labels", {"team": "Not Valid"}, "label"),
        ("node_count", 0, "node_count"),
        ("deadlines", {"assign": "-1h"}, "assign"),
        ("deadlines", {"warmup": "1h"}, "warmup"),
    ],
)
def test_bad_requests_name_the_field(field, value, problem):
    with pytest.raises(ValidationError) as caught:
        slice_request(**{field: value})
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"capacity": "reserved", "reservation_name": None}, "reservation_name is required"),
        ({"capacity": "spot", "reservation_name": "r"}, "only valid with capacity 'reserved'"),
        ({"capacity": "on-demand", "node_count": 2}, "multislice"),
        ({"capacity": "spot", "guaranteed_min_duration": "1h"}, "guaranteed"),
    ],
)
def test_a_request_that_breaks_a_capacity_rule_is_refused_saying_which(overrides, message):
    with pytest.raises(ValidationError) as caught:
        slice_request(**overrides)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("4h", 14400), ("1h30m", 5400), ("PT4H", 14400), (30, 30)],
)
def test_a_duration_reads_units_combined_units_iso_8601_or_bare_seconds(text, seconds):
    assert TypeAdapter(HumanDuration).validate_python(text) == timedelta(seconds=seconds)


def test_parse_duration_leaves_other_text_to_pydantic():
    assert parse_duration("4 hours") == "4 hours"


def test_a_duration_is_written_unit_by_unit_leaving_out_empty_units():
    assert format_duration(timedelta(hours=1, minutes=30)) == "1h30m"
    assert format_duration(timedelta(minutes=10)) == "10m"


def _obs(qr="ACTIVE", states=("READY",), ips=((None,),), expected_vms=1) -> SliceObservation:
    return SliceObservation(
        qr_state=qr,
        nodes=[
            NodeView(node_id=f"n{i}", state=s, ips=list(ip))
            for i, (s, ip) in enumerate(zip(states, ips, strict=True))
        ],
        expected_nodes=len(states),
        expected_vms=expected_vms,
    )


@pytest.mark.parametrize(
    ("obs", "ready"),
    [
        (_obs(ips=(("10.0.0.1",),)), True),
        (_obs(ips=((None,),)), False),
        (_obs(states=("CREATING",), ips=(("10.0.0.1",),)), False),
        (_obs(ips=(("10.0.0.1", "10.0.0.2"),), expected_vms=1), False),  # wrong VM count
        (_obs(states=("READY", "READY"), ips=(("a",), ("b",)), expected_vms=2), True),
    ],
)
def test_cloud_ready_needs_every_node_ready_every_ip_and_the_expected_count(obs, ready):
    assert obs.cloud_ready is ready


def test_a_failed_queued_resource_or_a_preempted_node_is_terminal_and_says_why():
    failed = SliceObservation(
        qr_state="FAILED", qr_error="stockout", expected_nodes=1, expected_vms=1
    )
    assert failed.terminal_reason == "queued resource is FAILED: stockout"
    preempted = _obs(states=("PREEMPTED",))
    assert preempted.terminal_reason == "node n0 is PREEMPTED"
    assert _obs().terminal_reason is None


def test_progress_key_moves_in_steps_not_per_vm():
    keys = {
        progress_key(
            SliceObservation(
                qr_state="ACTIVE",
                nodes=[NodeView(node_id="n", state="READY", ips=["ip"] * n + [None] * (512 - n))],
                expected_nodes=1,
                expected_vms=512,
            )
        )
        for n in range(513)
    }
    assert len(keys) == 11  # buckets 0-9 of 10% each, then the full count (ready)
    assert bucket(0, 512) == 0
    assert bucket(512, 512) == 10


@pytest.mark.parametrize(
    ("status", "teardown", "action"),
    [
        ("FAILED", None, SweepAction.DELETE),
        ("CANCELED", None, SweepAction.DELETE),
        ("TERMINATED", None, SweepAction.DELETE),
        ("TIMED_OUT", None, SweepAction.DELETE),
        ("TERMINATED", "RUNNING", SweepAction.DELETE),
        ("RUNNING", None, SweepAction.KEEP),
        ("RUNNING", "TERMINATED", SweepAction.KEEP),
        ("CONTINUED_AS_NEW", None, SweepAction.KEEP),
        ("COMPLETED", None, SweepAction.KEEP),
        ("COMPLETED", "RUNNING", SweepAction.KEEP),
        ("COMPLETED", "CANCELED", SweepAction.DELETE),
        ("COMPLETED", "TERMINATED", SweepAction.DELETE),
        ("COMPLETED", "FAILED", SweepAction.DELETE),
        ("COMPLETED", "TIMED_OUT", SweepAction.DELETE),
        ("COMPLETED", "COMPLETED", SweepAction.DELETE),
        ("NOT_FOUND", None, SweepAction.UNKNOWN_OWNER),
        ("NOT_FOUND", "TERMINATED", SweepAction.UNKNOWN_OWNER),
    ],
)
def test_a_sweep_deletes_only_what_a_failed_owner_or_a_finished_teardown_left_behind(
    status: str, teardown: str | None, action: SweepAction
):
    resource = OwnedResource(
        kind="queued_resource",
        id="s",
        name="projects/p/locations/z/queuedResources/s",
        state="ACTIVE",
        owner_workflow_id=bootstrap_workflow_id("s"),
        owner_run_id="r",
    )
    candidate = SweepCandidate(resource=resource, owner_status=status, teardown_status=teardown)
    assert sweep_action(candidate) is action


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("owner_closed", "teardown_started", "counts"),
    [
        (T0, T0 + timedelta(minutes=5), True),  # released the slice the owner handed over
        (T0, T0, True),
        (T0, T0 - timedelta(days=1), False),  # released an earlier slice of the same name
        (None, T0, False),  # the owner has not closed: nothing handed over yet
        (T0, None, False),
    ],
)
def test_a_teardown_releases_only_what_was_handed_over_before_it_started(
    owner_closed, teardown_started, counts
):
    assert counts_as_release(owner_closed, teardown_started) is counts


STUCK_AFTER = timedelta(minutes=15)
MARGIN = timedelta(minutes=1)
CAP = timedelta(hours=1)
POLICY = CompensationPolicy(stuck_after=STUCK_AFTER)


def minutes(m: float) -> timedelta:
    return timedelta(minutes=m)


@pytest.mark.parametrize(
    ("ended_at", "stuck_at", "next_end", "next_window"),
    [
        # Each window runs out up to a retry interval early, at `ended_at` minutes; the plan
        # keeps its own boundaries: 5, then 16 (the threshold plus the margin), then
        # doubling windows of 20, 40 and at most 60 minutes.
        ([4.0], None, 16.0, 10.0),
        ([4.0, 15.1], 15.1, 36.0, 20.0),
        ([5.0, 16.0, 35.2], 16.0, 76.0, 40.0),
        ([5.0, 16.0, 36.0, 75.5], 16.0, 136.0, 60.0),
        ([5.0, 16.0, 36.0, 76.0, 135.0], 16.0, 196.0, 60.0),
        # A window that ran out long after its boundary (no worker) starts the next from now.
        ([30.0], 30.0, 40.0, 10.0),
    ],
)
def test_compensation_windows_run_to_the_stuck_threshold_then_double_up_to_their_cap(
    ended_at, stuck_at, next_end, next_window
):
    progress = compensation.start(T0, POLICY, minutes(5), MARGIN)
    assert (progress.window, progress.window_ends_at) == (minutes(5), T0 + minutes(5))
    for at in ended_at:
        progress = compensation.after_window(
            progress, T0 + minutes(at), "PermissionDenied", POLICY, CAP, MARGIN
        )
    assert progress.windows_ended == len(ended_at)
    assert progress.stuck_since == (None if stuck_at is None else T0 + minutes(stuck_at))
    assert progress.window_ends_at == T0 + minutes(next_end)
    assert progress.window == minutes(next_window)
    assert progress.last_error == "PermissionDenied"


def test_the_stuck_window_never_ends_before_the_threshold():
    # However early the server ends a window (up to a retry interval), the one that turns
    # the status stuck has run for at least `stuck_after`.
    progress = compensation.start(T0, POLICY, minutes(5), MARGIN)
    while not progress.stuck:
        ended = progress.window_ends_at - MARGIN
        progress = compensation.after_window(progress, ended, "e", POLICY, CAP, MARGIN)
    assert progress.stuck_since is not None
    assert progress.stuck_since - T0 >= STUCK_AFTER


def test_a_first_window_longer_than_the_threshold_is_cut_to_it():
    progress = compensation.start(T0, POLICY, timedelta(hours=2), MARGIN)
    assert progress.window_ends_at == T0 + STUCK_AFTER + MARGIN
    assert compensation.schedule_to_close(progress, T0 + STUCK_AFTER + MARGIN) == (
        compensation.MIN_WINDOW
    )


@pytest.mark.parametrize(
    ("carried_stuck_at", "carried_ends_at", "stuck_after", "resumed_at", "stuck_at", "ends_at"),
    [
        # Already stuck: as carried, whatever this run's threshold.
        (16, 36, 60, 20, 16, 36),
        # This run's threshold has passed: stuck as it starts.
        (None, 36, 10, 20, 20, 36),
        (None, 36, 20, 20, 20, 36),
        # It ends before the planned window: the window is cut to end a margin past it.
        (None, 60, 25, 20, None, 26),
        # It ends after the planned window: as carried.
        (None, 36, 120, 20, None, 36),
    ],
)
def test_a_continued_compensation_follows_this_runs_threshold(
    carried_stuck_at: float | None,
    carried_ends_at: float,
    stuck_after: float,
    resumed_at: float,
    stuck_at: float | None,
    ends_at: float,
):
    carried = compensation.start(T0, POLICY, minutes(5), MARGIN).model_copy(
        update={
            "stuck_since": None if carried_stuck_at is None else T0 + minutes(carried_stuck_at),
            "window_ends_at": T0 + minutes(carried_ends_at),
        }
    )
    policy = CompensationPolicy(stuck_after=minutes(stuck_after))
    progress = compensation.resumed(carried, T0 + minutes(resumed_at), policy, MARGIN)
    assert progress.stuck_since == (None if stuck_at is None else T0 + minutes(stuck_at))
    assert progress.window_ends_at == T0 + minutes(ends_at)
    assert (progress.window, progress.windows_ended) == (carried.window, carried.windows_ended)


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        ("deleting s: PermissionDenied: no (grant roles/tpu.admin ...)", "grant roles/tpu.admin"),
        ("deleting s: Unauthenticated: expired", "Application Default Credentials"),
        ("s still exists (state DELETING) 61s after the delete", "delete the resource by hand"),
    ],
)
def test_stuck_compensation_says_what_to_do(error: str, advice: str):
    progress = compensation.start(T0, POLICY, minutes(5), MARGIN).model_copy(
        update={"last_error": error, "stuck_since": T0 + minutes(16)}
    )
    text = compensation.describe_stuck(progress, T0 + minutes(20))
    assert text.startswith("stuck for 20m: ")
    assert error in text and advice in text


def test_names_and_labels_fit_gcp_limits():
    longest = "a" * 40
    labels = owner_labels(bootstrap_workflow_id(longest), "0" * 36)
    assert all(len(v) <= 63 for v in labels.values())
    assert node_ids("s", 1) == ["s"]
    assert node_ids("s", 3) == ["s-0", "s-1", "s-2"]
