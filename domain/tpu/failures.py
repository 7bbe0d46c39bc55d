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
"""

from __future__ import annotations

from datetime import timedelta

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


def health_failure(
    budget: timedelta,
    vms: int,
    last: HealthReport | None,
    seen_failing: list[VmFailure],
) -> BootstrapFailure:
    """Names the failing VMs and why; the count comes from the last round, not from its
    list. A retried attempt's details carry only the first few, so the last full round the
    workflow saw (`seen_failing`) names them all when it names more."""
    failing = last.failing if last else []
    count = last.total - last.healthy if last else len(failing)
    if len(seen_failing) > len(failing):
        failing = seen_failing
    return BootstrapFailure(
        phase=Phase.HEALTH,
        kind="deadline",
        message=f"health deadline ({format_duration(budget)}) exceeded: "
        f"{count} of {vms} VMs not healthy: {failing_vm_list(failing, count)}",
        failing_vms=failing,
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
