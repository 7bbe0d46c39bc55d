"""The decisions behind what `keeper tpu` says, as tables: what compensation did, where a
slice stands, which accelerator types exist, where the phase budgets come from, and how
small a health attempt's failure stays."""

from __future__ import annotations

import io
import json
import socket
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from rich.console import Console
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from keeper.activities.tpu.health import FAILING_IN_RETRY, HealthActivities, HealthProber
from keeper.cli.main import cli
from keeper.cli.tpu import progress
from keeper.domain.tpu.models import (
    BootstrapStatus,
    DeletionReport,
    HealthCheckInput,
    HealthReport,
    PhaseTiming,
    VmFailure,
)
from keeper.domain.tpu.observation import SliceObservation, VmEndpoint
from keeper.domain.tpu.outcome import (
    cleanup_summary,
    closed_view,
    is_live,
    left_running,
    merge_reports,
    next_step,
    slice_is_over,
    slice_state,
)
from keeper.domain.tpu.phases import (
    DEFAULT_DEADLINES,
    Goal,
    Phase,
    default_budget_text,
    reached,
    wait_plan,
)
from keeper.domain.tpu.status_view import failing_vm_list
from keeper.domain.tpu.topology import topology_problem
from keeper.runtime.settings.tpu import BootstrapSettings
from tests.harness import slice_request

QR = "projects/p/locations/z/queuedResources/train-a"
NODE = "projects/p/locations/z/nodes/train-a"


@pytest.mark.parametrize(
    ("report", "kind", "by_child", "reads", "left"),
    [
        (DeletionReport(deleted=[QR], already_gone=[NODE]), "deadline", False,
         "deleted train-a", False),
        (DeletionReport(deleted=[QR]), "cancelled", True,
         "the phase workflow deleted train-a when it was cancelled", False),
        # The QR and its node share the slice's name: named once.
        (DeletionReport(already_gone=[QR, NODE]), "error", False,
         "nothing was left to delete: train-a was already gone when compensation looked "
         "(never created, or deleted before it ran)", False),
        (DeletionReport(already_gone=[QR, f"{NODE}-0", f"{NODE}-1"]), "error", False,
         "nothing was left to delete: train-a, train-a-0, train-a-1 were already gone when "
         "compensation looked (never created, or deleted before it ran)", False),
        # An attempt force-deleted the QR and was killed; the next one found it gone.
        (DeletionReport(deleted=[QR], already_gone=[NODE], deleted_earlier=[QR]), "error",
         False, "deleted train-a (an earlier attempt of the compensation sent the delete and "
         "was cut short; the next attempt found it gone)", False),
        (DeletionReport(not_ours=[QR]), "error", False,
         "left train-a alone: another run owns them", True),
        (None, "taken", False,
         "nothing was created and nothing was deleted: train-a belongs to another run, and its "
         "resources were left alone", True),
        (None, "error", False, "compensation did not run", True),
        (DeletionReport(), "error", False, "nothing to delete", False),
    ],
)  # fmt: skip
def test_cleanup_says_what_compensation_did(report, kind, by_child, reads, left):
    assert cleanup_summary(report, kind=kind, by_child=by_child, slice_name="train-a") == reads
    assert left_running(report, kind) is left


def test_the_childs_deletions_survive_the_supervisors_confirmation():
    child = DeletionReport(deleted=[QR], already_gone=[NODE])
    own = DeletionReport(already_gone=[QR, NODE])
    assert merge_reports(child, own) == DeletionReport(deleted=[QR], already_gone=[NODE])
    assert merge_reports(None, own) == own
    # Who deleted what survives the merge too.
    earlier = DeletionReport(deleted=[QR], already_gone=[NODE], deleted_earlier=[QR])
    assert merge_reports(earlier, own) == earlier


@pytest.mark.parametrize(
    ("bootstrap", "phase", "teardown", "state", "live"),
    [
        ("RUNNING", "assign", None, "assign", False),
        ("COMPLETED", "done", None, "ready", True),
        ("COMPLETED", "done", "RUNNING", "releasing", False),
        ("COMPLETED", "done", "COMPLETED", "released", False),
        ("COMPLETED", "done", "CANCELED", "released", False),
        ("COMPLETED", "done", "FAILED", "release failed", False),
        ("COMPLETED", "done", "TERMINATED", "release interrupted", False),
        ("FAILED", "failed", None, "failed", False),
        ("CANCELED", "cancelled", None, "cancelled", False),
        ("TERMINATED", "assign", None, "terminated", False),
        ("TIMED_OUT", "assign", None, "timed out", False),
    ],
)
def test_a_slice_reads_as_its_bootstrap_and_teardown_say_and_is_over_once_it_holds_nothing(
    bootstrap, phase, teardown, state, live
):
    assert slice_state(bootstrap, phase, teardown) == state
    assert is_live(bootstrap, teardown) is live
    # `keeper tpu list` without --all: what is over is closed; a slice that may still hold
    # resources (ready, releasing, a release that failed or was cut short) is not.
    over = state in ("released", "failed", "cancelled", "terminated", "timed out")
    assert slice_is_over(bootstrap, teardown) is over


@pytest.mark.parametrize(
    ("accelerator", "problem"),
    [
        ("v4-8", None), ("v4-32", None), ("v4-2048", None), ("v2-8", None), ("v5p-128", None),
        ("v5litepod-1", None), ("v5litepod-4", None), ("v5litepod-8", None),
        ("v5litepod-16", None), ("v6e-256", None),
        ("v4-7", "multiple of 8"), ("v4-4", "multiple of 8"), ("v5p-12", "multiple of 8"),
        ("v5litepod-2", "1, 4 or 8"), ("v6e-18", "multiple of 4"),
        ("v9-8", "is not an accelerator type"), ("v4", "is not an accelerator type"),
    ],
)  # fmt: skip
def test_accelerator_types_fit_their_topology(accelerator, problem):
    found = topology_problem(accelerator)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and repr(accelerator) in found


def test_the_phase_budgets_have_one_source():
    settings = BootstrapSettings()
    assert {
        Phase.ASSIGN: settings.assign,
        Phase.PROVISION: settings.provision,
        Phase.READY: settings.ready,
        Phase.HEALTH: settings.health,
    } == DEFAULT_DEADLINES
    runner = CliRunner()
    help_text = " ".join(runner.invoke(cli, ["tpu", "bootstrap", "--help"]).output.split())
    for phase in DEFAULT_DEADLINES:
        assert f"(default {default_budget_text(phase)})" in help_text, phase
    group = " ".join(runner.invoke(cli, ["tpu", "--help"]).output.split())
    assert "assign (4h), provision (1h), ready (10m) and health (10m)" in group


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--ready-deadline", "-5m"],
         "'--ready-deadline': '-5m': a duration must be longer than 0"),
        (["--assign-deadline", "4 hours"], "'--assign-deadline': '4 hours' is not a duration"),
        (["--poll-interval", "0s"], "'--poll-interval': '0s': a duration must be longer than 0"),
        (["-a", "v4-7"], "--accelerator-type: 'v4-7': v4 sizes count TensorCores"),
        (["--label", "x"], "--label: 'x' is not KEY=VALUE"),
    ],
)  # fmt: skip
def test_bad_arguments_are_usage_errors_in_the_clis_words(tmp_path, args, named):
    config = tmp_path / "keeper.yaml"
    config.write_text("temporal: {address: '127.0.0.1:1'}\n")
    base = ["--config", str(config), "tpu", "bootstrap", "ok-name", "-c", "spot"]
    if "-a" not in args:
        base += ["-a", "v4-8"]
    result = CliRunner().invoke(cli, base + args)
    assert result.exit_code == 2, result.output
    assert named in " ".join(result.output.split()), result.output
    assert "day" not in result.output and "pattern" not in result.output


def _status(**changes: object) -> BootstrapStatus:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    base = BootstrapStatus(
        slice_name="train-a",
        zone="us-central2-b",
        capacity="reserved",
        phase=Phase.ASSIGN,
        phase_deadline_at=now + timedelta(hours=4),
        qr_state="WAITING_FOR_RESOURCES",
        timings=[
            PhaseTiming(phase=Phase.SUBMIT, started_at=now, ended_at=now),
            PhaseTiming(phase=Phase.ASSIGN, started_at=now, deadline_at=now + timedelta(hours=4)),
        ],
    )
    return base.model_copy(update=changes)


def test_the_log_line_does_not_change_while_the_state_does_not():
    status = _status()
    assert progress.line(status) == progress.line(status.model_copy())
    assert "deadline 16:00:00 UTC" in progress.line(status)
    assert "left" not in progress.line(status)


@pytest.mark.parametrize(
    ("phase", "written"),
    [
        (Phase.ASSIGN, True),
        (Phase.COMPENSATE, True),  # a compensation can take long: shown as it goes
        (Phase.DONE, False),
        (Phase.FAILED, False),
        (Phase.CANCELLED, False),
        (Phase.TERMINATED, False),
        (Phase.TIMED_OUT, False),
    ],
)
def test_off_a_terminal_a_final_phase_is_left_to_the_closing_summary(phase, written):
    # The command's summary says how it ended: a line for it too would say it twice, or
    # once, depending on when the follow looked.
    look = progress.look(None)  # type: ignore[arg-type]  # the handle is only queried
    assert look.settled is not None
    assert look.settled(_status(phase=phase)) is not written


@pytest.mark.parametrize(
    ("phase", "failed_phase", "word"),
    [
        (Phase.ASSIGN, None, "running"),
        (Phase.FAILED, Phase.ASSIGN, "failed"),
        (Phase.CANCELLED, Phase.ASSIGN, "cancelled"),
        (Phase.COMPENSATE, Phase.ASSIGN, "stopped, compensating"),
        # A status from before failed_phase: the last phase that ran is where it stopped.
        (Phase.FAILED, None, "failed"),
    ],
)
def test_a_phase_the_bootstrap_stopped_in_is_not_done(phase, failed_phase, word):
    status = _status(phase=phase, failed_phase=failed_phase)
    assert progress.phase_state(status, Phase.ASSIGN)[0] == word
    assert progress.phase_state(status, Phase.SUBMIT)[0] == "done"
    assert progress.phase_state(status, Phase.READY)[0] == "-"


CLOSED = datetime(2026, 12, 1, 12, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("recorded", "bootstrap", "child", "child_report", "phase", "compensation", "advice"),
    [
        # Both lost: nobody deleted anything, the sweeper will.
        (
            Phase.ASSIGN,
            "TERMINATED",
            "TERMINATED",
            None,
            Phase.TERMINATED,
            "none ran: the bootstrap was terminated",
            "`keeper tpu sweep`",
        ),
        # The phase child, cancelled with its supervisor, deleted the slice itself.
        (
            Phase.ASSIGN,
            "TIMED_OUT",
            "CANCELED",
            DeletionReport(deleted=[QR]),
            Phase.TIMED_OUT,
            "the phase workflow deleted train-a when it was cancelled",
            "nothing to do",
        ),
        (
            Phase.ASSIGN,
            "TERMINATED",
            "RUNNING",
            None,
            Phase.TERMINATED,
            "the phase workflow is deleting",
            "wait for its phase workflow",
        ),
        # The supervisor's own compensation was cut short.
        (
            Phase.COMPENSATE,
            "TERMINATED",
            None,
            None,
            Phase.TERMINATED,
            "cut short: the bootstrap was terminated",
            "`keeper tpu sweep`",
        ),
    ],
)
def test_a_bootstrap_closed_by_temporal_reads_cut_short(
    recorded, bootstrap, child, child_report, phase, compensation, advice
):
    stopped = Phase.ASSIGN if recorded is Phase.COMPENSATE else None
    status = _status(phase=recorded, failed_phase=stopped)
    child_status = _status(phase=Phase.CANCELLED, child_compensation=child_report)
    view = closed_view(status, bootstrap, CLOSED, child, child_status)
    assert view.phase is phase and view.failed_phase is Phase.ASSIGN
    assert view.phase_deadline_at is None
    assert [t.ended_at for t in view.timings] == [status.timings[0].ended_at, CLOSED]
    assert view.compensation is not None and view.compensation.startswith(compensation)
    assert view.qr_state == ("deleted" if child_report else "WAITING_FOR_RESOURCES")
    assert advice in (next_step(view, bootstrap, child) or "")
    words = {Phase.TERMINATED: "terminated", Phase.TIMED_OUT: "timed out"}
    assert progress.phase_state(view, Phase.ASSIGN)[0] == words[phase]
    shown = Console(width=200, record=True, file=io.StringIO())
    shown.print(progress.render(view, seen_at=view.updated_at or CLOSED))
    text = shown.export_text()
    assert "running" not in text and "left" not in text, text
    if view.qr_state != "deleted":
        assert "QR WAITING_FOR_RESOURCES (last seen at 2026-12-01T12:" in text, text


@pytest.mark.parametrize("fresh_from", ["the phase child", "the supervisor's last signal"])
def test_a_terminated_bootstraps_stuck_compensation_still_reads_stuck(fresh_from):
    """Cancelled, stuck, then the supervisor terminated: the phase child still deletes, and
    is still stuck; the view says so, with since when and the last error."""
    since = CLOSED - timedelta(minutes=5)
    stuck = {
        "compensation_started_at": since - timedelta(minutes=15),
        "compensation_stuck": True,
        "compensation_stuck_since": since,
        "compensation_last_error": "PermissionDenied: grant roles/tpu.admin",
    }
    status = _status(phase=Phase.COMPENSATE, failed_phase=Phase.ASSIGN, **stuck)
    child_status = _status(phase=Phase.COMPENSATE, failed_phase=Phase.ASSIGN, **stuck)
    if fresh_from != "the phase child":
        child_status = None  # its query did not answer
    view = closed_view(status, "TERMINATED", CLOSED, "RUNNING", child_status)
    assert view.compensation_stuck and view.compensation_stuck_since == since
    assert view.compensation_last_error == "PermissionDenied: grant roles/tpu.admin"
    assert view.compensation is not None
    assert "stuck since" in view.compensation and "PermissionDenied" in view.compensation
    # Once the child finished, nothing reads stuck.
    done = closed_view(status, "TERMINATED", CLOSED, "CANCELED", child_status)
    assert not done.compensation_stuck and done.compensation_stuck_since is None


@pytest.mark.parametrize("bootstrap", ["RUNNING", "COMPLETED"])
def test_a_bootstrap_that_recorded_its_own_end_or_runs_reads_as_recorded(bootstrap):
    running = _status()
    assert closed_view(running, bootstrap, CLOSED) == running
    failed = _status(phase=Phase.FAILED, failed_phase=Phase.ASSIGN)
    assert closed_view(failed, "FAILED", CLOSED) == failed
    assert next_step(failed, "FAILED") is None


def test_failing_vms_are_listed_with_their_reasons_and_a_count():
    failing = [VmFailure(node="a", index=i, ip=f"10.0.0.{i}", reason="HTTP 503") for i in range(3)]
    assert failing_vm_list(failing, 3) == (
        "a/0 10.0.0.0 (HTTP 503), a/1 10.0.0.1 (HTTP 503), a/2 10.0.0.2 (HTTP 503)"
    )
    assert failing_vm_list(failing, 256, shown=2).endswith("a/1 10.0.0.1 (HTTP 503) and 254 more")


async def test_a_health_attempt_of_256_failing_vms_stays_small():
    # A port nothing listens on: every probe is refused at once.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    targets = [VmEndpoint(node=f"n{i // 4}", index=i % 4, ip="127.0.0.1") for i in range(256)]
    activities = HealthActivities(HealthProber(concurrency=64, timeout=timedelta(seconds=1)))
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(
            activities.check_health,
            HealthCheckInput(targets=targets, port=port, path="/health", last_bucket=0),
        )
    err = raised.value
    assert "0/256 VMs healthy, 256 failing" in err.message
    assert "connection failed" in err.message
    assert len(err.message) < 1000
    report = err.details[0]
    assert isinstance(report, HealthReport)
    assert (report.total, report.healthy, len(report.failing)) == (256, 0, FAILING_IN_RETRY)
    assert len(json.dumps(report.model_dump(mode="json"))) < 2000


@pytest.mark.parametrize(
    ("stage_of", "goal", "seen"),
    [
        ("WAITING_FOR_RESOURCES", Goal.ASSIGNED, False),
        ("PROVISIONING", Goal.ASSIGNED, True),
        ("ACTIVE", Goal.ASSIGNED, True),
        ("PROVISIONING", Goal.ACTIVE, False),
        ("ACTIVE", Goal.ACTIVE, True),
        ("ACTIVE", Goal.CLOUD_READY, False),  # no node READY yet
    ],
)
def test_a_wait_is_done_when_its_goal_is_seen(stage_of, goal, seen):
    obs = SliceObservation(qr_state=stage_of, expected_nodes=1, expected_vms=1)
    assert reached(obs, goal) is seen


def test_the_phase_child_follows_the_plan_table():
    queued = [(s.phase, s.from_submission, s.goal) for s in wait_plan(slice_request())]
    assert queued == [
        (Phase.ASSIGN, True, Goal.ASSIGNED),
        (Phase.PROVISION, False, Goal.ACTIVE),
        (Phase.READY, False, Goal.CLOUD_READY),
    ]
    node = [(s.phase, s.from_submission) for s in wait_plan(slice_request(capacity="on-demand"))]
    assert node == [(Phase.READY, True)]
