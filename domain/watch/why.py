"""Why keeper proposes each step, in one sentence an operator reads beside the approve
command (`keeper job status`, the notification, the UI's details), and what to do about an
escalation that proposes nothing. Decided from the runbook ("Babysit a Zephyr job"): ask
before stopping or restarting; restart after a failure; escalate a stuck stage, stragglers,
a repeated error or controller trouble to whoever debugs the job.
"""

from __future__ import annotations

from keeper.domain.watch.escalation import EscalationKind
from keeper.domain.watch.models import ProposalKind

K = EscalationKind

STALLED = (
    "the job's processes do no work (the no-progress gate and a CPU delta probe agree), so "
    "waiting will not finish it; a restart stops it and launches its original request again, "
    "with fresh processes"
)

_WHY: dict[tuple[EscalationKind, ProposalKind], str] = {
    (K.ZOMBIE_COORDINATOR, ProposalKind.RESTART): (
        "the pipeline has exited but its coordinator lingers, so the job will never finish on "
        "its own; the runbook's restart after a failure stops it and launches the same request "
        "again"
    ),
    (K.STUCK_STAGE, ProposalKind.RESTART): (
        "no shard of the stage completes while the job holds its workers; a restart launches "
        "the same request from the start, which helps a hang but not a bug: read the "
        "coordinator's and the workers' logs first"
    ),
    (K.STRAGGLERS, ProposalKind.RESTART): (
        "the settings ask for a restart on stragglers (watch.escalation.straggler_step): it "
        "reruns every shard, which helps only if the straggling shard's trouble was transient"
    ),
    (K.REPEATED_ERROR, ProposalKind.STOP): (
        "the same error keeps failing shards and a restart would repeat it; stopping frees the "
        "workers until the cause is fixed"
    ),
    (K.RETRY_FLAPPING, ProposalKind.STOP): (
        "the pipeline keeps retrying and every retry fails again; more retries will not help, "
        "so stop it and debug"
    ),
}

# What to do about an escalation that proposes nothing, where there is more to say.
ADVICE: dict[EscalationKind, str] = {
    K.STRAGGLERS: (
        "keeper proposes no restart: it would rerun every shard to stall behind the same one; "
        "debug the straggling shard (its worker's log, an out-of-memory loop?)"
    ),
    K.CONTROLLER_TIMEOUTS: "check iris and the worker's route to it; nothing is judged meanwhile",
    K.WORKER_FAILURES: "read why the worker tasks fail (their logs) before deciding anything",
}


def why(source: EscalationKind, step: ProposalKind) -> str:
    """Why `step` is proposed for an escalation of kind `source` (STALLED: for a stall the
    arbiter confirmed)."""
    return _WHY.get((source, step), f"the {source.value} escalation suggests a {step.value}")
