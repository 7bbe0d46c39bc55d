"""What a slice's life reads as: what compensation did, and where a slice stands now.

Both are decided here from data the workflows return, so the CLI, the UI and the failure
message say the same thing and never claim a deletion that did not happen.
"""

from __future__ import annotations

from keeper.domain.tpu.models import DeletionReport


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _names(names: list[str]) -> str:
    return ", ".join(_short(n) for n in names)


def merge_reports(child: DeletionReport | None, own: DeletionReport) -> DeletionReport:
    """The child's deletions and the supervisor's own confirmation, as one report.

    What the child deleted stays deleted, even though the supervisor then found it gone.
    """
    if child is None:
        return own
    deleted = list(dict.fromkeys([*child.deleted, *own.deleted]))
    gone = [n for n in dict.fromkeys([*child.already_gone, *own.already_gone]) if n not in deleted]
    not_ours = list(dict.fromkeys([*child.not_ours, *own.not_ours]))
    return DeletionReport(deleted=deleted, already_gone=gone, not_ours=not_ours)


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
    | only resources already gone             | nothing was left to delete                   |
    | resources of another run                | left Y alone: another run owns them          |
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
        parts.append(f"{who} {_names(report.deleted)}{when}")
    elif report.already_gone:
        parts.append(
            "nothing was left to delete: nothing was created, or it was already gone "
            f"({_names(report.already_gone)})"
        )
    if report.not_ours:
        parts.append(f"left {_names(report.not_ours)} alone: another run owns them")
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
_BOOTSTRAP_CLOSED = {
    "FAILED": "failed",
    "CANCELED": "cancelled",
    "TERMINATED": "terminated",
    "TIMED_OUT": "timed out",
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
        return _BOOTSTRAP_CLOSED[bootstrap]
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
