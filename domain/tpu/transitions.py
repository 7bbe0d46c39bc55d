"""Every change to a bootstrap's state, as pure functions of the state and the moment.

The phase child and its supervisor each keep one immutable state (PhaseRunState,
SupervisorState in domain/tpu/models.py) and replace it only with what a function here
returns; the workflow then publishes it (status_view.render_details, the KeeperStep search
attribute) and the child signals it to its supervisor. tests/tpu/test_tpu_transitions.py
tables them.

| who        | event                                   | function                | phase after |
|------------|-----------------------------------------|-------------------------|-------------|
| child      | a phase starts                          | entered                 | that phase  |
| child      | a poll or the last look saw the cloud   | observed                | unchanged   |
| child      | a health round answered                 | health_seen             | unchanged   |
| child      | a phase failed (supervisor compensates) | phases_failed           | failed      |
| child      | cancelled: its own compensation starts  | compensating            | compensate  |
| both       | a compensation window ran out           | compensation_seen       | unchanged   |
| child      | its compensation continued as new       | continued               | compensate  |
| child      | its compensation finished               | compensated_on_cancel   | cancelled   |
| supervisor | a progress signal of its child          | takes (whether), heard  | the child's |
| supervisor | the child did not complete              | phases_ended            | unchanged   |
| supervisor | its own compensation starts             | supervisor_compensating | compensate  |
| supervisor | it closes a bootstrap that failed       | closed                  | failed,     |
|            |                                         |                         | cancelled   |
| supervisor | the child completed                     | done                    | done        |
"""

from __future__ import annotations

from datetime import datetime

from keeper.domain.common.compensation import status_fields as compensation_fields
from keeper.domain.tpu.models import (
    BootstrapFailure,
    BootstrapResult,
    BootstrapStatus,
    CompensationEvent,
    CompensationProgress,
    DeletionReport,
    HealthReport,
    Owner,
    PhaseRunState,
    PhaseTiming,
    SupervisorState,
)
from keeper.domain.tpu.naming import queued_resource_name
from keeper.domain.tpu.observation import SliceObservation
from keeper.domain.tpu.outcome import cleanup_summary, merge_reports
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import SliceRequest

# Phases with a timing of their own, in their order: entering one closes the open timing
# and opens its own; entering any other (done, failed, compensate, cancelled) only closes
# the open one.
TIMED = (Phase.SUBMIT, Phase.ASSIGN, Phase.PROVISION, Phase.READY, Phase.HEALTH)
# Where the bootstrap's own phase is no longer what it stopped in.
_AFTER_THE_PHASES = frozenset({Phase.COMPENSATE, Phase.FAILED, Phase.CANCELLED})
SUPERVISOR_COMPENSATING = "running: force-delete, then confirm NotFound"


def _stamped(status: BootstrapStatus, now: datetime, **changes: object) -> BootstrapStatus:
    return status.model_copy(update={**changes, "updated_at": now})


def _timings_closed(status: BootstrapStatus, now: datetime) -> list[PhaseTiming]:
    return [
        t if t.ended_at is not None else t.model_copy(update={"ended_at": now})
        for t in status.timings
    ]


# -- the phase child -----------------------------------------------------------------------


def entered(
    status: BootstrapStatus,
    phase: Phase,
    now: datetime,
    *,
    deadline_at: datetime | None = None,
    started_at: datetime | None = None,
    error: str | None = None,
) -> BootstrapStatus:
    """The child enters `phase`; its budget may count from earlier (`started_at`)."""
    timings = _timings_closed(status, now)
    if phase in TIMED:
        timings.append(
            PhaseTiming(phase=phase, started_at=started_at or now, deadline_at=deadline_at)
        )
    return _stamped(
        status, now, phase=phase, phase_deadline_at=deadline_at, timings=timings, error=error
    )


def observed(status: BootstrapStatus, obs: SliceObservation, now: datetime) -> BootstrapStatus:
    return _stamped(
        status, now, qr_state=obs.qr_state, nodes_ready=obs.nodes_ready, vms_with_ip=obs.vms_with_ip
    )


def health_seen(status: BootstrapStatus, report: HealthReport, now: datetime) -> BootstrapStatus:
    return _stamped(
        status,
        now,
        vms_healthy=report.healthy,
        failing_vms=report.failing,
        vms_failing=report.total - report.healthy,
    )


def phases_failed(
    status: BootstrapStatus, failure: BootstrapFailure, now: datetime
) -> BootstrapStatus:
    """The child closes failed; its supervisor compensates."""
    stopped = _stamped(status, now, failed_phase=failure.phase)
    return entered(stopped, Phase.FAILED, now, error=failure.message)


def compensating(status: BootstrapStatus, now: datetime) -> BootstrapStatus:
    """The cancelled child starts deleting what the bootstrap created."""
    failed_phase = status.phase if status.failed_phase is None else status.failed_phase
    started = _stamped(status, now, failed_phase=failed_phase, compensation_started_at=now)
    return entered(started, Phase.COMPENSATE, now)


def compensation_seen(
    status: BootstrapStatus, progress: CompensationProgress, now: datetime
) -> BootstrapStatus:
    """A compensation window ran out: retrying, or stuck, and the last error."""
    return _stamped(status, now, **compensation_fields(progress, now))


def continued(
    status: BootstrapStatus, progress: CompensationProgress, now: datetime
) -> BootstrapStatus:
    """The child's next run goes on from its last status, as stuck as the run before (and
    never counted stuck again), then enters compensate once more."""
    carried = _stamped(
        status,
        now,
        **compensation_fields(progress, now),
        compensation_started_at=progress.started_at,
    )
    return entered(carried, Phase.COMPENSATE, now)


def compensated_on_cancel(
    status: BootstrapStatus, report: DeletionReport, now: datetime
) -> BootstrapStatus:
    """Finished: no longer stuck, here or in the supervisor this status reaches, whose own
    compensation that follows is another one and turns stuck on its own."""
    return _stamped(
        status,
        now,
        phase=Phase.CANCELLED,
        compensation=cleanup_summary(report),
        child_compensation=report,
        phase_deadline_at=None,
        compensation_stuck=False,
    )


def revised(status: BootstrapStatus) -> BootstrapStatus:
    """The next revision: the supervisor takes a progress signal only of a higher one."""
    return status.model_copy(update={"revision": status.revision + 1})


def orphan_counts(state: PhaseRunState) -> tuple[PhaseRunState, tuple[CompensationEvent, ...]]:
    """What of its own compensation the child counts now, and the state that remembers it.

    The supervisor counts a cancel's compensation whoever deletes; the child counts only
    what nobody else will: once a signal found its supervisor gone and it compensates.

    | supervisor gone | compensating | counted before   | stuck | counts now      |
    |-----------------|--------------|------------------|-------|-----------------|
    | no              | any          | any              | any   | nothing         |
    | yes             | no           | any              | any   | nothing         |
    | yes             | yes          | nothing          | no    | started         |
    | yes             | yes          | nothing          | yes   | started, stuck  |
    | yes             | yes          | started          | yes   | stuck           |
    | yes             | yes          | started, stuck   | any   | nothing         |
    """
    compensating_now = state.status.compensation_started_at is not None
    if not (state.orphaned and compensating_now):
        return state, ()
    due: list[CompensationEvent] = []
    if "started" not in state.counted:
        due.append("started")
    if state.status.compensation_stuck and "stuck" not in state.counted:
        due.append("stuck")
    return counted(state, *due), tuple(due)


def counted(state: PhaseRunState, *events: CompensationEvent) -> PhaseRunState:
    new = [e for e in events if e not in state.counted]
    return state.model_copy(update={"counted": (*state.counted, *new)}) if new else state


def bootstrap_result(
    request: SliceRequest, node_ids: list[str], status: BootstrapStatus, obs: SliceObservation
) -> BootstrapResult:
    """What a completed bootstrap hands over. Phases can start together (assign starts at
    submission), so the total is the span from the first start to the last end, not a sum."""
    timings = status.timings
    ends = [t.ended_at for t in timings if t.ended_at is not None]
    return BootstrapResult(
        slice_name=request.slice_name,
        capacity=request.capacity.value,
        queued_resource=queued_resource_name(request.project, request.zone, request.slice_name)
        if request.capacity.queued
        else None,
        nodes=node_ids,
        vms=obs.endpoints,
        phase_seconds={t.phase.value: t.seconds for t in timings if t.seconds is not None},
        total_seconds=(max(ends) - timings[0].started_at).total_seconds() if ends else 0.0,
    )


# -- the supervisor ------------------------------------------------------------------------


def takes(state: SupervisorState, incoming: BootstrapStatus, sender: Owner | None) -> bool:
    """Whether the supervisor takes a progress signal of its phase child. The child names the
    supervisor it reports to (`sender`, its input's owner): a signal goes by workflow id, so
    an earlier bootstrap's child, still compensating, reaches a new bootstrap of the name.

    | the supervisor                          | the signal                           | taken |
    |-----------------------------------------|--------------------------------------|-------|
    | any                                     | names another supervisor             | no    |
    | owns the final state (the phases ended) | any                                  | no    |
    | follows its child                       | revision above the last taken        | yes   |
    | follows its child                       | revision at most the last (late)     | no    |

    A signal that names none (sent before children named their supervisor) is its own.
    """
    if sender is not None and sender != state.owner:
        return False
    return not state.final and incoming.revision > state.status.revision


def turned_stuck(before: BootstrapStatus, after: BootstrapStatus) -> bool:
    """A compensation that was not stuck is now: counted once, when it turns."""
    return after.compensation_stuck and not before.compensation_stuck


def heard(state: SupervisorState, incoming: BootstrapStatus) -> SupervisorState:
    return state.model_copy(update={"status": incoming})


def stopped_in(status: BootstrapStatus) -> Phase:
    """The phase the bootstrap was in, not the child's compensate that followed it."""
    if status.phase in _AFTER_THE_PHASES:
        return status.failed_phase or status.phase
    return status.phase


def phases_ended(
    state: SupervisorState, failure: BootstrapFailure, cancelled: bool
) -> SupervisorState:
    """The child did not complete: from here the supervisor owns the final state."""
    return state.model_copy(update={"final": True, "failure": failure, "cancelled": cancelled})


def cancel_seen(state: SupervisorState) -> SupervisorState:
    """A cancel while compensation runs: it runs to the end, then the bootstrap closes as
    cancelled."""
    return state.model_copy(update={"cancel_seen": True})


def supervisor_compensating(state: SupervisorState, now: datetime) -> SupervisorState:
    assert state.failure is not None
    status = state.status.model_copy(
        update={
            "phase": Phase.COMPENSATE,
            "phase_deadline_at": None,
            "error": state.failure.message,
            "compensation": SUPERVISOR_COMPENSATING,
            "compensation_started_at": now,
        }
    )
    return state.model_copy(update={"status": status})


def supervisor_compensation_seen(
    state: SupervisorState, progress: CompensationProgress, now: datetime
) -> SupervisorState:
    status = compensation_seen(state.status, progress, now)
    return state.model_copy(update={"status": status, "progress": progress})


def outcome(state: SupervisorState) -> Phase:
    """How a bootstrap whose phases did not complete closes: a cancel, whenever it came,
    closes it cancelled."""
    return Phase.CANCELLED if state.cancelled or state.cancel_seen else Phase.FAILED


def closed(state: SupervisorState, report: DeletionReport | None, queued: bool) -> SupervisorState:
    """The supervisor's last word on a bootstrap that failed or was cancelled: who deleted
    what (the child's report, when cancelled, and its own), in the failure and the status.
    `report` is None when compensation did not run (the name was taken)."""
    failure, status = state.failure, state.status
    assert failure is not None
    child = status.child_compensation
    by_child = bool(child and child.deleted)
    if report is not None:
        report = merge_reports(child, report)
    cleanup = cleanup_summary(
        report, kind=failure.kind, by_child=by_child, slice_name=status.slice_name
    )
    failure = failure.model_copy(
        update={"compensation": report, "cleanup": cleanup, "compensated_by_child": by_child}
    )
    # What was last seen is gone now; the view must not show it as current.
    gone = report is not None and not report.not_ours and queued
    status = status.model_copy(
        update={
            "phase": outcome(state),
            "failed_phase": failure.phase,
            "error": failure.message,
            "failing_vms": failure.failing_vms or status.failing_vms,
            "compensation": cleanup,
            "compensation_stuck": False,
            "phase_deadline_at": None,
            "qr_state": "deleted" if gone else status.qr_state,
        }
    )
    return state.model_copy(update={"status": status, "failure": failure})


def done(state: SupervisorState, result: BootstrapResult, now: datetime) -> SupervisorState:
    """The child completed. Its last progress signal may still be in flight: the result is
    the authoritative end state, and the supervisor owns it."""
    status = state.status.model_copy(
        update={
            "phase": Phase.DONE,
            "phase_deadline_at": None,
            "vms_with_ip": len(result.vms),
            "vms_healthy": len(result.vms),
            "nodes_ready": len(result.nodes),
            "failing_vms": [],
            "timings": _timings_closed(state.status, now),
        }
    )
    return state.model_copy(update={"status": status, "final": True})
