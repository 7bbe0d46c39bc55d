"""One check of a watched job, decided: the verdict, the phase, escalations, proposals and
notices, from what the check read. Pure: the workflow calls it with its deterministic clocks.

    assess(observation) ─► liveness.judge ─► wants a probe? ─► (probe) ─► confirm
                                  │                                         │
                                  └──────────────► _conclude ◄──────────────┘
                      escalation.observe · cadence.next_phase · proposals · notices · view

How a proposal comes and goes (one per episode key; at most one pending per kind):

| event | proposal |
|---|---|
| the verdict turns stalled (after the gate and the probe) | restart, key `stalled:<attempt>` |
| an escalation whose table row suggests a step (domain/watch/escalation.py) | that step |
| its episode ends (recovery, a new attempt) before anyone decided | withdrawn (may come back) |
| the job ends on its own | every pending one withdrawn |
| an operator approves | approved, then done or failed when carried out |
| an operator denies | denied; the same episode is not proposed again |

An unknown verdict never proposes a restart on liveness grounds, and never withdraws one
either (a blip is no recovery); an escalation proposes on its own evidence (a zombie dump, a
stuck stage). Every proposal only ever waits for an operator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from keeper.domain.common.untrusted import md_text
from keeper.domain.watch import escalation as esc
from keeper.domain.watch import liveness
from keeper.domain.watch.cadence import PhaseSignals, WatchPhase, next_interval, next_phase
from keeper.domain.watch.calls import (
    JobWatchInput,
    JobWatchResult,
    Notice,
    Observation,
    ProbeCall,
    ProbeSeen,
)
from keeper.domain.watch.liveness_models import (
    CounterIdentity,
    CounterKind,
    CounterReading,
    Judgement,
    LivenessReason,
    LivenessVerdict,
    ProbeReading,
    Source,
    Tick,
)
from keeper.domain.watch.models import (
    AttemptView,
    Decision,
    ProgressView,
    Proposal,
    ProposalKind,
    ProposalState,
    TimelineEntry,
    WatchOutcome,
    WatchView,
)
from keeper.domain.watch.names import JobPhase
from keeper.domain.watch.policy import WatchPolicy
from keeper.domain.watch.progress import name_cause
from keeper.domain.watch.relaunch import (
    HeldLaunch,
    approve_with_command,
    needs_command,
    relaunch_plan,
    relaunch_problem,
)
from keeper.domain.watch.state import WatchState
from keeper.domain.watch.why import ADVICE, STALLED
from keeper.domain.watch.why import why as why_of

MAX_EVIDENCE = 12
MAX_TOLD = 256
MAX_PROPOSALS = 20
MAX_RECENT_ERRORS = 20
# Checks in a row that must find the job unknown before the watch ends as missing.
MISSING_CHECKS = 2

_KIND_OF = {esc.Proposal.STOP: ProposalKind.STOP, esc.Proposal.RESTART: ProposalKind.RESTART}


@dataclass(frozen=True)
class Assessment:
    """The check's conclusion, or, with `probe` set, what to read before `confirm`."""

    state: WatchState
    interval: timedelta = timedelta(0)
    probe: ProbeCall | None = None
    notices: list[Notice] = field(default_factory=list)
    result: JobWatchResult | None = None
    # For confirm(): the check's reading and the arbiter's answer so far.
    observation: Observation | None = None
    judgement: Judgement | None = None


def new_state(inp: JobWatchInput, now: datetime) -> WatchState:
    view = WatchView(
        job_id=inp.job_id,
        requested_by=inp.requested_by,
        restart_of=inp.restart_of,
        restarts=inp.restarts,
        launch_held=inp.launch is not None and inp.launch.complete,
    )
    return WatchState(view=view)


# ---- the check ------------------------------------------------------------------------------


def assess(
    policy: WatchPolicy, state: WatchState, obs: Observation, now: datetime, mono: float
) -> Assessment:
    if not obs.job_found:
        if state.missing_checks + 1 >= MISSING_CHECKS:
            return _missing(state, obs, now)
        # Once is no proof: a controller restoring its state answers NOT_FOUND for a while.
        view = state.view.model_copy(
            update={
                "controller_errors": [f"GetJobStatus {state.view.job_id}: not found"],
                "checks": state.view.checks + 1,
                "last_check_at": now,
            }
        )
        gone = state.model_copy(update={"missing_checks": state.missing_checks + 1, "view": view})
        return Assessment(state=gone, interval=policy.cadence.failure_interval)
    if state.missing_checks:
        state = state.model_copy(update={"missing_checks": 0})
    tick = to_tick(policy, state, obs, mono)
    judgement = liveness.judge(policy.liveness, state.liveness, tick)
    if not judgement.wants_probe:
        return _conclude(policy, state, obs, judgement, now)
    target = judgement.state.probe_target
    task = None
    if target is not None:
        task = target.scope or obs.reading.tasks_by_host.get(target.host)
    if target is None or target.pid is None or task is None:
        # Nothing to probe (no process was ever read): the arbiter decides without one, now.
        judgement = liveness.confirm(policy.liveness, judgement.state, None, at=mono)
        return _conclude(policy, state, obs, judgement, now)
    probe = ProbeCall(
        task_id=task,
        host=target.host,
        pid=target.pid,
        gap_s=policy.probe_gap.total_seconds(),
    )
    return Assessment(state=state, probe=probe, observation=obs, judgement=judgement)


def confirm(
    policy: WatchPolicy,
    pending: Assessment,
    seen: ProbeSeen,
    now: datetime,
    state: WatchState,
    *,
    mono: float,
) -> Assessment:
    """The probe's answer, then the rest of the check, on `state` (the watch's state now:
    decisions taken while the probe ran stand). `mono`: when the probe answered, on the
    clock the check was judged on (the probe's reads were taken no later); a probe that
    answered long after its check confirms nothing."""
    assert pending.judgement is not None and pending.observation is not None
    judgement = liveness.confirm(
        policy.liveness, pending.judgement.state, probe_reading(seen), at=mono
    )
    return _conclude(policy, state, pending.observation, judgement, now)


def probe_reading(seen: ProbeSeen) -> ProbeReading | None:
    first, second = seen.first, seen.second
    if first is None or second is None or seen.seconds_apart <= 0:
        return None
    return ProbeReading(
        pid=first.pid,
        start_time_1=first.start_time,
        ticks_1=first.ticks,
        start_time_2=second.start_time if second.pid == first.pid else second.start_time + 1,
        ticks_2=second.ticks,
        seconds_apart=seen.seconds_apart,
        host=first.host,
        clk_tck=first.clk_tck,
    )


def to_tick(policy: WatchPolicy, state: WatchState, obs: Observation, mono: float) -> Tick:
    """What the arbiter reads of one check: counters by identity, and which sources answered."""
    counters: list[CounterReading] = []
    available: set[Source] = set()
    attempt = obs.latest.attempt if obs.latest is not None else None
    if obs.cpu is not None:
        available.add(Source.PROC)
        for c in obs.cpu:
            # Each container has its own pid namespace: pid 7 of two tasks on one host are two
            # processes, so the task is the scope.
            proc = CounterIdentity(
                kind=CounterKind.PROC,
                host=c.host,
                pid=c.pid,
                start_time=c.start_time,
                attempt=c.attempt,
                scope=c.task_id,
            )
            counters.append(CounterReading(identity=proc, value=c.ticks / c.clk_tck))
    if obs.session_cpu is not None and obs.coordinator is not None:
        available.add(Source.SESSION)
        host = obs.coordinator.worker_id
        session = CounterIdentity(kind=CounterKind.SESSION, host=host, scope="exec")
        counters.append(CounterReading(identity=session, value=obs.session_cpu))
    log = obs.coordinator_log
    if log is not None:
        available |= {Source.LOGS, Source.PROGRESS}
        if log.latest is not None and obs.latest is not None:
            stage = f"{obs.latest.group}/{log.latest.execution_id or ''}/{log.latest.stage}"
            shards = CounterIdentity(kind=CounterKind.PROGRESS, attempt=attempt, scope=stage)
            counters.append(CounterReading(identity=shards, value=float(log.latest.done)))
    if obs.threads is not None:
        available.add(Source.THREADS)
    if obs.coordinator is not None:
        available.add(Source.TASK)
    expected = state.interval_s or policy.cadence.smoke_interval.total_seconds()
    return Tick(
        at=mono,
        expected_interval=expected,
        counters=tuple(counters),
        threads=obs.threads.state if obs.threads is not None else None,
        log_advanced=_log_advanced(policy, obs, expected),
        task_running=(
            obs.coordinator.state is JobPhase.RUNNING if obs.coordinator is not None else None
        ),
        available=frozenset(available),
    )


def _log_advanced(policy: WatchPolicy, obs: Observation, expected: float) -> bool | None:
    """New lines other than noise since the last check; None when no answer says either.

    Past the first read, the cursor says what is new. The first read of an attempt's log
    starts at its beginning: a backlog, written before the watch looked (a job hung for hours
    shows hours of progress lines). Its lines count as new only when the newest of them was
    stamped within the check's window, the interval it waited plus the observer gap (which
    also absorbs a controller clock a little off keeper's); an older backlog is a baseline,
    neither progress nor its absence.
    """
    log = obs.coordinator_log
    if log is None:
        return None
    fresh = log.lines - log.noise_dropped > 0
    if not fresh or not obs.coordinator_log_from_start:
        return fresh
    window = expected + policy.liveness.observer_gap.total_seconds()
    since_ms = (obs.at.timestamp() - window) * 1000
    newest = log.last_line_ms
    return True if newest is not None and newest >= since_ms else None


def _missing(state: WatchState, obs: Observation, now: datetime) -> Assessment:
    view = state.view.model_copy(
        update={
            "job_state": JobPhase.MISSING.value,
            "phase": WatchPhase.FINISHED,
            "verdict": "unknown",
            "verdict_reason": "the controller does not know the job",
            "evidence": [f"GetJobStatus {state.view.job_id}: not found"],
            "checks": state.view.checks + 1,
            "last_check_at": now,
            "next_check_at": None,
            "controller_errors": list(obs.failed),
            "proposals": state.view.withdraw_pending("the controller does not know the job", now),
        }
    )
    state = state.model_copy(update={"view": view})
    result = JobWatchResult(job_id=view.job_id, outcome=WatchOutcome.MISSING, job_state="missing")
    notice = Notice(
        key="missing",
        title=f"{view.job_id} is not known to the iris controller",
        lines=["check the job id (keeper job list shows the watches); the watch ended"],
    )
    return Assessment(state=state, notices=[notice], result=result)


def _conclude(
    policy: WatchPolicy,
    state: WatchState,
    obs: Observation,
    judgement: Judgement,
    now: datetime,
) -> Assessment:
    latest, log = obs.latest, obs.coordinator_log
    attempt_key = latest.group if latest is not None else None
    errors = [e.text for e in log.errors] if log is not None else []
    sample = esc.Sample(
        at=now,
        attempt=attempt_key,
        progress=log.latest if log is not None else None,
        worker_states=obs.worker_states,
        coordinator=obs.coordinator.state if obs.coordinator is not None else None,
        coordinator_threads=obs.threads.state if obs.threads is not None else None,
        failed_worker_attempts=obs.worker_failed_attempts,
        errors=tuple(errors + obs.worker_errors),
        rpc_failed=tuple(obs.failed),
        stale_coordinators=latest.stale_coordinators if latest is not None else (),
    )
    escalation_state, escalations = esc.observe(policy.escalation, state.escalation, sample)
    terminal = obs.job_state.is_terminal
    phase = next_phase(
        policy.cadence,
        state.phase,
        PhaseSignals(
            at=now,
            attempt=attempt_key,
            coordinator=latest.coord_state if latest is not None else None,
            workers=latest.workers_state if latest is not None else None,
            early_error=bool(errors),
            job_terminal=terminal,
            escalated=any(e.kind is not esc.EscalationKind.STALE_COORDINATORS for e in escalations),
        ),
    )
    stages = state.stages
    if log is not None and log.latest is not None:
        stages = stages.seen(f"{log.latest.execution_id or ''}/{log.latest.stage}", now)
    interval = next_interval(policy.cadence, phase.phase, stages.durations)

    verdict = judgement.verdict.value
    evidence = [*judgement.evidence, *(e.summary for e in escalations)]
    if obs.children_unseen:
        seen = obs.children - obs.children_unseen
        evidence.append(
            f"sees {seen:,} of {obs.children:,} children: iris lists at most 5,000 deep a "
            "query, and the rest are not judged"
        )
    view = state.view
    notices: list[Notice] = []
    told = list(state.told)

    def tell(notice: Notice) -> None:
        if notice.key not in told:
            told.append(notice.key)
            notices.append(notice)

    for e in escalations:
        if e.first:
            todo = ADVICE.get(e.kind) if e.proposal is esc.Proposal.NONE else None
            lines = [*e.evidence, *([f"what to do: {todo}"] if todo else [])]
            tell(Notice(key=e.key, title=f"{view.job_id}: {e.summary}", lines=lines))

    # Proposals: what the evidence asks for now, and why that step.
    wanted: dict[str, tuple[ProposalKind, str, list[str], str]] = {}
    if judgement.verdict is LivenessVerdict.STALLED and not terminal:
        wanted[f"stalled:{attempt_key or '-'}"] = (
            ProposalKind.RESTART,
            f"the job's processes are stalled ({judgement.reason.value})",
            list(judgement.evidence),
            STALLED,
        )
    for e in escalations:
        kind = _KIND_OF.get(e.proposal)
        if kind is not None and not terminal:
            wanted[e.key] = (kind, e.summary, list(e.evidence), why_of(e.kind, kind))
    proposals, made = list(view.proposals), state.proposals_made
    unsure = judgement.verdict is LivenessVerdict.UNKNOWN
    for p in proposals:
        if p.key.startswith("stalled:") and unsure and not terminal:
            continue  # neither confirmed nor contradicted: it stays as it is
        if p.state is ProposalState.PENDING and p.key not in wanted:
            why = "the job ended" if terminal else "the evidence for it went away"
            proposals[proposals.index(p)] = p.withdrawn(why, now)
    # Decided (or being carried out) episodes are not proposed again; withdrawn ones may be.
    known = {p.key for p in proposals if p.state is not ProposalState.WITHDRAWN}
    pending_kinds = {p.kind for p in proposals if p.state is ProposalState.PENDING}
    # Right after an observer gap nothing new is proposed: the watch itself was away.
    fresh_eyes = judgement.reason is not LivenessReason.OBSERVER_GAP
    for key, (kind, reason, lines, because) in wanted.items():
        if key in known or kind in pending_kinds or not fresh_eyes:
            continue
        made += 1
        proposal_id = f"{kind.value}-{made}"
        restart = kind is ProposalKind.RESTART
        launches = relaunch_plan(view.launch_held, proposal_id, view.job_id) if restart else ""
        proposal = Proposal(
            id=proposal_id,
            kind=kind,
            reason=reason,
            why=because,
            evidence=lines[:MAX_EVIDENCE],
            key=key,
            created_at=now,
            relaunch=launches,
        )
        proposals.append(proposal)
        pending_kinds.add(kind)
        approve = (
            approve_with_command(view.job_id, proposal.id)
            if restart and not view.launch_held
            else f"keeper job approve {view.job_id} {proposal.id}"
        )
        tell(
            Notice(
                key=f"proposal/{proposal.id}",
                title=f"{view.job_id}: keeper proposes to {kind.value} the job ({proposal.id})",
                lines=[
                    reason,
                    f"why: {because}",
                    *([f"relaunches: {launches}"] if launches else []),
                    *proposal.evidence[:5],
                    f"approve: {approve}",
                    f"deny: keeper job deny {view.job_id} {proposal.id}",
                ],
            )
        )

    recent_errors = (*state.recent_errors, *obs.worker_errors)[-MAX_RECENT_ERRORS:]
    cause = view.cause
    result = None
    if terminal:
        if obs.job_state is not JobPhase.SUCCEEDED:
            parent = obs.parent_errors[-1] if obs.parent_errors else obs.job_error
            cause = name_cause(
                parent, log.events if log is not None else None, recent_errors
            ).summary
        outcome = (
            WatchOutcome.SUCCEEDED if obs.job_state is JobPhase.SUCCEEDED else WatchOutcome.FAILED
        )
        tell(
            Notice(
                key="finished",
                title=f"{view.job_id} ended {obs.job_state.value}",
                lines=[cause] if cause else [],
            )
        )
        interval = timedelta(0)

    attempt_label = latest.label if latest is not None else None
    last = view.timeline[-1] if view.timeline else None
    timeline: dict[str, object] = {}
    seen = (phase.phase, verdict, attempt_label)
    if last is None or (last.phase, last.verdict, last.attempt) != seen:
        entry = TimelineEntry(
            at=now,
            phase=phase.phase,
            verdict=verdict,
            reason=judgement.reason.value,
            attempt=attempt_label,
            evidence=list(judgement.evidence[:3]),
        )
        timeline = view.timeline_with(entry, policy.timeline_limit)

    # A read that failed is no news of the job: its last known state stands.
    unread = obs.job_state is JobPhase.UNSPECIFIED and any(
        f.startswith("GetJobStatus") for f in obs.failed
    )
    job_state = view.job_state if unread else obs.job_state.value
    view = view.model_copy(
        update={
            "phase": phase.phase,
            "job_state": job_state,
            "verdict": verdict,
            "verdict_reason": judgement.reason.value,
            "evidence": evidence[:MAX_EVIDENCE],
            "attempt": _attempt_view(obs),
            # A check without a progress line keeps the last one seen (with its time).
            "progress": _progress_view(obs)
            or (
                view.progress
                if latest is not None and last is not None and attempt_label == last.attempt
                else None
            ),
            "stale_coordinators": list(latest.stale_coordinators) if latest is not None else [],
            "escalations": [e.summary for e in escalations],
            "proposals": proposals[-MAX_PROPOSALS:],
            **timeline,
            "checks": view.checks + 1,
            "last_check_at": now,
            "next_check_at": None if terminal else now + interval,
            "controller_errors": list(obs.failed),
            "cause": cause,
            "notifications": view.notifications + len(notices),
        }
    )
    if terminal:
        result = JobWatchResult(
            job_id=view.job_id,
            outcome=outcome,
            job_state=obs.job_state.value,
            cause=cause,
            verdicts=view.verdicts,
        )
    new = state.model_copy(
        update={
            "view": view,
            "reading": obs.reading,
            "liveness": judgement.state,
            "escalation": escalation_state,
            "phase": phase,
            "stages": stages,
            "interval_s": interval.total_seconds(),
            "told": tuple(told[-MAX_TOLD:]),
            "proposals_made": made,
            "recent_errors": recent_errors,
        }
    )
    return Assessment(state=new, interval=interval, notices=notices, result=result)


def _attempt_view(obs: Observation) -> AttemptView | None:
    latest = obs.latest
    if latest is None or latest.coord is None:
        return None
    return AttemptView(
        pipeline=latest.pipeline,
        attempt=latest.attempt,
        coordinator=latest.coord,
        workers=latest.workers or "",
        coordinator_state=(latest.coord_state or JobPhase.UNSPECIFIED).value,
        workers_running=obs.worker_states.get(JobPhase.RUNNING, 0),
        workers_total=sum(obs.worker_states.values()),
    )


def _progress_view(obs: Observation) -> ProgressView | None:
    log = obs.coordinator_log
    if log is None or log.latest is None:
        return None
    p = log.latest
    at = datetime.fromtimestamp(p.at_ms / 1000, tz=obs.at.tzinfo) if p.at_ms else None
    return ProgressView(
        stage=p.stage,
        done=p.done,
        total=p.total,
        in_flight=p.in_flight,
        queued=p.queued,
        workers_alive=p.alive,
        at=at,
    )


# ---- an operator's decisions --------------------------------------------------------------


def refusal(view: WatchView, proposal_id: str) -> str | None:
    """Why a decision on `proposal_id` cannot be taken, or None (the updates' validator)."""
    found = next((p for p in view.proposals if p.id == proposal_id), None)
    if found is None:
        pending = ", ".join(p.id for p in view.pending()) or "none"
        return f"{view.job_id} has no proposal {proposal_id!r} (pending: {pending})"
    if found.state is not ProposalState.PENDING:
        by = f" by {found.decided_by}" if found.decided_by else ""
        why = f": {found.outcome}" if found.outcome else ""
        return f"proposal {proposal_id} is already {found.state.value}{by}{why}"
    busy = next((p for p in view.proposals if p.state is ProposalState.APPROVED), None)
    if busy is not None:
        return (
            f"proposal {busy.id} ({busy.kind.value}) is being carried out; decide on "
            f"{proposal_id} once it is done (keeper job status {view.job_id})"
        )
    return None


def approval_refusal(view: WatchView, decision: Decision, launch: HeldLaunch | None) -> str | None:
    """Why `approve` refuses `decision`, or None: what refusal() refuses, a command given with
    anything but a restart, and a restart keeper holds nothing to launch for (`launch`: the
    request the job was launched with), so an approval keeper cannot carry out stops nothing."""
    problem = refusal(view, decision.proposal)
    if problem is not None:
        return problem
    proposal = next(p for p in view.proposals if p.id == decision.proposal)
    if proposal.kind is ProposalKind.RESTART:
        return relaunch_problem(view.job_id, proposal.id, launch, decision.command)
    if decision.command is not None:
        return f"{proposal.id} is a {proposal.kind.value}: only a restart takes a command"
    return None


def decide(state: WatchState, decision: Decision, now: datetime, *, approve: bool) -> WatchState:
    update = {
        "state": ProposalState.APPROVED if approve else ProposalState.DENIED,
        "decided_by": decision.by,
        "decided_at": now,
        "note": decision.note,
        "command": decision.command if approve else None,
    }
    return _with_proposal(state, decision.proposal, update)


def finish_action(
    state: WatchState, proposal_id: str, to: ProposalState, outcome: str, now: datetime
) -> WatchState:
    phase = WatchPhase.FINISHED if to is ProposalState.DONE else state.view.phase
    return _with_proposal(state, proposal_id, {"state": to, "outcome": outcome}, phase=phase)


def _with_proposal(
    state: WatchState, proposal_id: str, update: dict[str, object], **view: object
) -> WatchState:
    """`state` with `update` applied to proposal `proposal_id` (and `view` to the view)."""
    proposals = [
        p.model_copy(update=update) if p.id == proposal_id else p for p in state.view.proposals
    ]
    view_update = {"proposals": proposals, **view}
    return state.model_copy(update={"view": state.view.model_copy(update=view_update)})


# ---- what the Temporal UI shows --------------------------------------------------------------


def render_details(view: WatchView) -> str:
    """The watch's current details (markdown): every value from iris is made inert."""
    lines = [
        f"**{md_text(view.job_id)}** · {view.phase.value} · job {md_text(view.job_state)} · "
        f"verdict **{view.verdict}** ({md_text(view.verdict_reason)})",
    ]
    if view.attempt is not None:
        a = view.attempt
        lines.append(
            f"attempt p{a.pipeline}-a{a.attempt}: coordinator {md_text(a.coordinator_state)}, "
            f"workers {a.workers_running}/{a.workers_total} running"
        )
    if view.progress is not None:
        p = view.progress
        lines.append(
            f"stage {md_text(p.stage)}: {p.done}/{p.total} complete, {p.in_flight} in flight, "
            f"{p.queued} queued"
        )
    lines += [f"- {md_text(line)}" for line in view.evidence[:6]]
    if view.stale_coordinators:
        lines.append(f"stale coordinators: {len(view.stale_coordinators)}")
    for p in view.pending():
        lines.append(
            f"AWAITING APPROVAL {p.id}: {md_text(p.reason)} · "
            + (
                f"`{md_text(approve_with_command(view.job_id, p.id))}`"
                if needs_command(p)
                else f"`keeper job approve {md_text(view.job_id)} {p.id}`"
            )
            + (f" · why: {md_text(p.why)}" if p.why else "")
        )
    if view.controller_errors:
        lines.append(f"controller reads failed: {md_text('; '.join(view.controller_errors))}")
    if view.cause:
        lines.append(f"cause: {md_text(view.cause)}")
    when = view.last_check_at.isoformat(timespec="seconds") if view.last_check_at else "never"
    lines.append(f"checks: {view.checks} (last {when}) · verdict changes: {len(view.timeline)}")
    return "\n\n".join(lines)
