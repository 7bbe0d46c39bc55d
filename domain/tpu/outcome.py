"""What a slice's life reads as: what compensation did, and where a slice stands now.

Both are decided here from data the workflows return, so the CLI, the UI and the failure
message say the same thing and never claim a deletion that did not happen.
"""

from __future__ import annotations

from datetime import datetime

from keeper.domain.tpu.models import BootstrapStatus, DeletionReport
from keeper.domain.tpu.phases import Phase


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _distinct(names: list[str]) -> list[str]:
    """Each name once: a QR and its node share the slice's name."""
    return list(dict.fromkeys(_short(n) for n in names))


def _names(names: list[str]) -> str:
    return ", ".join(_distinct(names))


def _were(names: list[str]) -> str:
    return "was" if len(_distinct(names)) == 1 else "were"


def merge_reports(child: DeletionReport | None, own: DeletionReport) -> DeletionReport:
    """The child's deletions and the supervisor's own confirmation, as one report.

    What the child deleted stays deleted, even though the supervisor then found it gone.
    """
    if child is None:
        return own
    deleted = list(dict.fromkeys([*child.deleted, *own.deleted]))
    gone = [n for n in dict.fromkeys([*child.already_gone, *own.already_gone]) if n not in deleted]
    not_ours = list(dict.fromkeys([*child.not_ours, *own.not_ours]))
    earlier = list(dict.fromkeys([*child.deleted_earlier, *own.deleted_earlier]))
    return DeletionReport(
        deleted=deleted, already_gone=gone, not_ours=not_ours, deleted_earlier=earlier
    )


def cleanup_summary(
    report: DeletionReport | None,
    *,
    kind: str = "",
    by_child: bool = False,
    slice_name: str = "",
) -> str:
    """What compensation actually did, in words.

    | situation                               | reads                                        |
    |-----------------------------------------|----------------------------------------------|
    | the name belongs to another run         | nothing created, nothing deleted, left alone |
    | no report (compensation did not run)    | compensation did not run                     |
    | something deleted by the phase workflow | the phase workflow deleted X when cancelled  |
    | something deleted                       | deleted X                                    |
    | deleted by an attempt that was cut short| deleted X (an earlier attempt sent ...)      |
    | only resources already gone             | nothing was left to delete: X was gone ...   |
    | resources of another run                | left Y alone: another run owns them          |

    A QR and its node share the slice's name, which is named once.
    """
    if kind == "taken":
        owned = f"{slice_name} belongs to another run" if slice_name else "the name is taken"
        return (
            f"nothing was created and nothing was deleted: {owned}, and its resources were "
            "left alone"
        )
    if report is None:
        return "compensation did not run"
    parts = []
    if report.deleted:
        who = "the phase workflow deleted" if by_child else "deleted"
        when = " when it was cancelled" if by_child else ""
        text = f"{who} {_names(report.deleted)}{when}"
        earlier = [n for n in report.deleted if n in report.deleted_earlier]
        if earlier:
            which = "" if _names(earlier) == _names(report.deleted) else f" of {_names(earlier)}"
            text += (
                f" (an earlier attempt of the compensation sent the delete{which} and was cut "
                "short; the next attempt found it gone)"
            )
        parts.append(text)
    elif report.already_gone:
        gone = report.already_gone
        parts.append(
            f"nothing was left to delete: {_names(gone)} {_were(gone)} already gone when "
            "compensation looked (never created, or deleted before it ran)"
        )
    if report.not_ours:
        parts.append(f"left {_names(report.not_ours)} alone: another run owns them")
    return "; ".join(parts) or "nothing to delete"


def deletion_summary(report: DeletionReport) -> str:
    """What one deletion did, in a line: a teardown's details and `keeper tpu status`."""
    parts = []
    if report.deleted:
        parts.append("deleted " + ", ".join(_short(n) for n in report.deleted))
    if report.already_gone and not report.deleted:
        parts.append("confirmed deleted (already gone)")
    if report.not_ours:
        parts.append("left alone (owned by another run): " + ", ".join(report.not_ours))
    return "; ".join(parts) or "nothing to delete"


def left_running(report: DeletionReport | None, kind: str = "") -> bool:
    """Whether something of this slice name may still run after the failure."""
    return kind == "taken" or report is None or bool(report.not_ours)


# Where a slice stands, from its bootstrap's close status and its latest teardown that
# started after that bootstrap closed (None: no such teardown).
_COMPLETED_AND_TEARDOWN = {
    None: "ready",
    "RUNNING": "releasing",
    "COMPLETED": "released",
    # A cancelled teardown finishes its delete first (workflows/tpu/teardown.py).
    "CANCELED": "released",
    "FAILED": "release failed",
    "TERMINATED": "release interrupted",
    "TIMED_OUT": "release interrupted",
}
# A bootstrap closed without handing its slice over: how it reads, and the phase its status
# ends in (a completed one recorded its end, done, before it returned).
_BOOTSTRAP_CLOSED = {
    "FAILED": ("failed", Phase.FAILED),
    "CANCELED": ("cancelled", Phase.CANCELLED),
    "TERMINATED": ("terminated", Phase.TERMINATED),
    "TIMED_OUT": ("timed out", Phase.TIMED_OUT),
}


def slice_state(bootstrap: str, phase: str | None, teardown: str | None) -> str:
    """A slice's state in one word or two, from its workflows' statuses.

    | bootstrap                  | teardown (after it closed) | state                     |
    |----------------------------|----------------------------|---------------------------|
    | RUNNING, CONTINUED_AS_NEW  | -                          | the current phase         |
    | COMPLETED                  | none                       | ready                     |
    | COMPLETED                  | RUNNING                    | releasing                 |
    | COMPLETED                  | COMPLETED, CANCELED        | released                  |
    | COMPLETED                  | FAILED                     | release failed            |
    | COMPLETED                  | TERMINATED, TIMED_OUT      | release interrupted       |
    | FAILED, CANCELED, ...      | any                        | failed, cancelled, ...    |
    """
    if bootstrap == "COMPLETED":
        return _COMPLETED_AND_TEARDOWN.get(teardown, f"teardown {teardown}")
    if bootstrap in _BOOTSTRAP_CLOSED:
        return _BOOTSTRAP_CLOSED[bootstrap][0]
    return phase or "starting"


def slice_is_over(bootstrap: str, teardown: str | None) -> bool:
    """A slice whose life ended: its bootstrap closed without handing it over, or a teardown
    released what it handed over. `keeper tpu list` shows these only with --all.

    A ready slice, one being released, and one whose release failed or was cut short (its
    resources may still be there) are not over.
    """
    if bootstrap == "COMPLETED":
        return teardown in ("COMPLETED", "CANCELED")
    return bootstrap in _BOOTSTRAP_CLOSED


def is_live(bootstrap: str, teardown: str | None) -> bool:
    """A slice handed over and not released: a new bootstrap of its name must be refused."""
    return bootstrap == "COMPLETED" and teardown is None


# The phases a bootstrap's status ends in: nothing after them runs.
FINAL_PHASES = frozenset(
    {Phase.DONE, Phase.FAILED, Phase.CANCELLED, Phase.TERMINATED, Phase.TIMED_OUT}
)


def _at(when: datetime | None) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when is not None else "an unknown time"


def closed_view(
    status: BootstrapStatus,
    bootstrap: str,
    closed_at: datetime | None,
    child: str | None = None,
    child_status: BootstrapStatus | None = None,
) -> BootstrapStatus:
    """A closed bootstrap's status as it stands, not as its run last recorded it.

    A terminated or timed-out run records nothing more: its status query answers what it
    held at that moment (a phase with a deadline ahead, the QR state of its last look). Here
    that phase reads as cut short at `closed_at` (`failed_phase`, the phase `terminated` or
    `timed-out`), no deadline is ahead, and `compensation` says who deleted what: the phase
    child (`child` its status name, `child_status` its query answer), which compensates on
    its own when its supervisor is terminated, or nobody yet. A status that ended on its own
    (done, failed, cancelled) and a running bootstrap are returned as they are.
    """
    if bootstrap not in _BOOTSTRAP_CLOSED or status.phase in FINAL_PHASES:
        return status
    word, ended = _BOOTSTRAP_CLOSED[bootstrap]
    was_compensating = status.phase is Phase.COMPENSATE
    stopped = status.failed_phase if was_compensating else status.phase
    if stopped is None:
        stopped = status.timings[-1].phase if status.timings else status.phase
    end = closed_at or status.updated_at
    timings = [
        t
        if t.ended_at is not None or end is None
        else t.model_copy(update={"ended_at": max(end, t.started_at)})
        for t in status.timings
    ]
    # The phase child's own report, once it closed; the supervisor may hold one too (a
    # cancelled child signals it before the supervisor's confirmation starts).
    closed_child = child_status is not None and child not in (None, "RUNNING")
    report = (child_status.child_compensation if closed_child else None) or (
        status.child_compensation
    )
    # Still deleting: the phase child's own view of its compensation (stuck, and why) is the
    # freshest, then what it last signalled the supervisor.
    stuck_view = status
    if child == "RUNNING":
        compensation = (
            "the phase workflow is deleting what the bootstrap created (it was cancelled "
            f"when the bootstrap was {word})"
        )
        report = None
        if child_status is not None and child_status.compensation_started_at is not None:
            stuck_view = child_status
        if stuck_view.compensation_stuck:
            compensation += (
                f"; stuck since {_at(stuck_view.compensation_stuck_since)}: "
                f"{stuck_view.compensation_last_error or 'no error recorded'}"
            )
    elif report is not None:
        compensation = cleanup_summary(report, by_child=True)
    elif was_compensating:
        compensation = f"cut short: the bootstrap was {word} before it confirmed the slice deleted"
    else:
        compensation = f"none ran: the bootstrap was {word} before it could delete anything"
    gone = report is not None and not report.not_ours
    return status.model_copy(
        update={
            "phase": ended,
            "failed_phase": stopped,
            "phase_deadline_at": None,
            "timings": timings,
            "error": status.error or f"bootstrap {word} during {stopped.value}",
            "compensation": compensation,
            "compensation_stuck": child == "RUNNING" and stuck_view.compensation_stuck,
            "compensation_stuck_since": (
                stuck_view.compensation_stuck_since if child == "RUNNING" else None
            ),
            "compensation_last_error": stuck_view.compensation_last_error,
            "child_compensation": report or status.child_compensation,
            "qr_state": "deleted" if gone and status.qr_state else status.qr_state,
            "nodes_ready": 0 if gone else status.nodes_ready,
        }
    )


def next_step(view: BootstrapStatus | None, bootstrap: str, child: str | None = None) -> str | None:
    """What the operator does about a bootstrap that was terminated or timed out (its view
    from closed_view): wait for the sweeper, or run it now. None for any other bootstrap."""
    if bootstrap not in ("TERMINATED", "TIMED_OUT"):
        return None
    report = view.child_compensation if view is not None else None
    if child != "RUNNING" and report is not None and not left_running(report):
        return "nothing to do: what the bootstrap created is deleted"
    sweep = (
        "the sweeper deletes what the bootstrap left (keeper-labelled resources whose owner "
        "closed) on its next pass; `keeper tpu sweep` runs one now"
    )
    if child == "RUNNING":
        return f"wait for its phase workflow to finish deleting; if it is cut short too, {sweep}"
    return sweep
