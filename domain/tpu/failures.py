"""Why a bootstrap failed, in the words its failure, its status and the CLI carry.

| the phase child saw                     | kind     | reads                                  |
|-----------------------------------------|----------|----------------------------------------|
| the name held by another run's resource | taken    | submit: <the create's error>           |
| an activity failed for good             | error    | <phase>: <its error>                   |
| a QR or node in a terminal state        | terminal | <phase>: queued resource is <state>... |
| a waiting phase's deadline passed       | deadline | <phase> deadline (<budget>) exceeded;  |
|                                         |          | last seen: <QR or nodes, counts>       |
| health's deadline passed                | deadline | health deadline (<budget>) exceeded:   |
|                                         |          | N of M VMs not healthy: <which, why>   |
|                                         |          | (health_failure: which round it saw)   |
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, NamedTuple

from keeper.domain.common.durations import format_duration
from keeper.domain.tpu.models import BootstrapFailure, HealthReport, VmFailure
from keeper.domain.tpu.observation import SliceObservation
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.status_view import failing_vm_list


def phase_error(phase: Phase, kind: str, message: str) -> BootstrapFailure:
    return BootstrapFailure(phase=phase, kind=kind, message=f"{phase.value}: {message}")


def terminal_failure(phase: Phase, obs: SliceObservation) -> BootstrapFailure | None:
    """A QR or node that will never get there; None while it still may."""
    reason = obs.terminal_reason
    return None if reason is None else phase_error(phase, "terminal", reason)


def _node_summary(obs: SliceObservation) -> str:
    return ", ".join(f"{n.node_id} {n.state}" for n in obs.nodes) or "not listed yet"


def deadline_failure(
    phase: Phase, budget: timedelta, obs: SliceObservation, queued: bool
) -> BootstrapFailure:
    seen = obs.qr_state or "no answer yet"
    detail = f"QR {seen}" if queued else f"node {_node_summary(obs)}"
    if phase is Phase.READY:
        detail += f", {obs.nodes_ready}/{obs.expected_nodes} nodes READY, "
        detail += f"{obs.vms_with_ip}/{obs.expected_vms} VMs with IP"
    return BootstrapFailure(
        phase=phase,
        kind="deadline",
        message=f"{phase.value} deadline ({format_duration(budget)}) exceeded; last seen: {detail}",
    )


# How the health phase saw the round its failure reports.
RoundEnd = Literal["finished", "cut short", "earlier"]


class SeenRound(NamedTuple):
    report: HealthReport
    end: RoundEnd


def _full_names(seen: SeenRound, earlier: HealthReport | None) -> list[VmFailure]:
    """A retried attempt's failure names its first few failing VMs only; the workflow's last
    full round names them all when it counted as many failing, among them those few."""
    report = seen.report
    count = report.total - report.healthy
    if (
        seen.end != "finished"
        or len(report.failing) >= count
        or earlier is None
        or earlier.total - earlier.healthy != count
        or len(earlier.failing) != count
    ):
        return report.failing
    full = {(f.node, f.index) for f in earlier.failing}
    if all((f.node, f.index) in full for f in report.failing):
        return earlier.failing
    return report.failing


def health_failure(
    budget: timedelta, vms: int, seen: SeenRound | None, earlier: HealthReport | None = None
) -> BootstrapFailure:
    """Names the failing VMs of one round, with that round's count: a list cut to the first
    few ends in "and K more", so the count is always that of the VMs it names. `earlier` is
    the last full round the workflow saw, which completes a retried attempt's first few.

    | the round it reports                        | reads                                      |
    |---------------------------------------------|--------------------------------------------|
    | finished (the last round, or a retried      | N of M VMs not healthy: <which, why>       |
    | attempt's failure with the first few)       |                                            |
    | cut short at the deadline (its heartbeat)   | the last round was cut short after S:      |
    |                                             | N of M VMs had not answered healthy: ...   |
    | none at the deadline; an earlier one did    | no round finished at the deadline; in the  |
    |                                             | last one that did, N of M VMs were not ... |
    | none ever finished                          | no health round finished: what to do       |
    """
    prefix = f"health deadline ({format_duration(budget)}) exceeded"
    if seen is None:
        return BootstrapFailure(
            phase=Phase.HEALTH,
            kind="deadline",
            message=f"{prefix}: no health round over the {vms} VMs finished, so none is known "
            "healthy; check that the worker reaches every VM's health port (a probe that gets "
            "no answer costs health.timeout), or give the phase a longer health deadline",
        )
    report, end = seen
    count = report.total - report.healthy
    failing = _full_names(seen, earlier)
    named = failing_vm_list(failing, count)
    how = {
        "finished": f"{count} of {report.total} VMs not healthy: {named}",
        "cut short": f"the last round was cut short after {report.round_seconds:g}s: "
        f"{count} of {report.total} VMs had not answered healthy: {named}",
        "earlier": f"no round finished at the deadline; in the last one that did, {count} of "
        f"{report.total} VMs were not healthy: {named}",
    }[end]
    return BootstrapFailure(
        phase=Phase.HEALTH, kind="deadline", message=f"{prefix}: {how}", failing_vms=failing
    )


def continued_compensation_finished(compensation: str | None) -> str:
    return "the compensation an earlier run of this workflow started has finished: " + (
        compensation or "nothing to report"
    )


def orphan_closing(slice_name: str, supervisor: str, finished: str) -> str:
    """A continued child nobody waits for: its failure is the last word on the bootstrap."""
    return f"bootstrap of {slice_name} cancelled (its supervisor {supervisor} was lost); {finished}"


def cancel_closing(slice_name: str, supervisor: str, finished: str) -> str:
    """A continued child its supervisor waits for, closing as the cancel it carried on."""
    return (
        f"bootstrap of {slice_name} cancelled; {finished}; its supervisor {supervisor} closes "
        "the bootstrap"
    )
