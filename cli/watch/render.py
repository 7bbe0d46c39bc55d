"""How `keeper job` shows a watch in text: the status page, the one line `--follow` prints
per change, a closed watch's result, a decided proposal and the list table.

Everything a watch reports (reasons, evidence, stage names, log excerpts, operator names)
came from outside keeper, so every value passes through terminal_text: one inert line each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keeper.cli.output import rfc3339, table
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.models import (
    AttemptView,
    ProgressView,
    Proposal,
    ProposalState,
    WatchOutcome,
    WatchView,
)
from keeper.domain.watch.relaunch import approve_with_command, needs_command

# The last timeline entries the status page shows (`--json` has them all).
TIMELINE_SHOWN = 5
# Evidence lines shown under a verdict or a proposal.
EVIDENCE_SHOWN = 6
# Longest value on a line: a log excerpt must not fill the screen.
VALUE_LIMIT = 300


def _t(value: object) -> str:
    return terminal_text(value, limit=VALUE_LIMIT)


def progress_text(progress: ProgressView) -> str:
    alive = "" if progress.workers_alive is None else f", {progress.workers_alive} workers alive"
    at = f" (at {rfc3339(progress.at)})" if progress.at else ""
    return (
        f"[{_t(progress.stage)}] {progress.done}/{progress.total} complete, "
        f"{progress.in_flight} in-flight, {progress.queued} queued{alive}{at}"
    )


def attempt_text(attempt: AttemptView) -> str:
    return (
        f"p{attempt.pipeline} a{attempt.attempt}: coordinator {_t(attempt.coordinator)} "
        f"({_t(attempt.coordinator_state)}), workers {_t(attempt.workers)} "
        f"{attempt.workers_running}/{attempt.workers_total} running"
    )


def _evidence(lines: Sequence[str], indent: str) -> list[str]:
    shown = [f"{indent}- {_t(e)}" for e in lines[:EVIDENCE_SHOWN]]
    if len(lines) > EVIDENCE_SHOWN:
        shown.append(f"{indent}  ... {len(lines) - EVIDENCE_SHOWN} more (--json has them all)")
    return shown


def proposal_lines(job_id: str, proposal: Proposal) -> list[str]:
    """A pending proposal with the exact commands that answer it, ready to paste: a job id
    holds no shell metacharacter (check_job_id allows letters, digits, '.', '_', '-' and
    '/'). A restart keeper holds no launch request for is approved with the command to run."""
    if needs_command(proposal):
        approve = approve_with_command(job_id, proposal.id)
    else:
        approve = f"keeper job approve {job_id} {proposal.id}"
    return [
        f"  {proposal.id} ({proposal.kind.value}), proposed {rfc3339(proposal.created_at)}: "
        f"{_t(proposal.reason)}",
        *([f"    why: {_t(proposal.why)}"] if proposal.why else []),
        *([f"    relaunches: {_t(proposal.relaunch)}"] if proposal.relaunch else []),
        *_evidence(proposal.evidence, "      "),
        f"    approve: {approve}",
        f"    deny:    keeper job deny {job_id} {proposal.id}",
    ]


def _by_at(proposal: Proposal) -> str:
    """` by bob at T`: who decided the proposal, and when."""
    by = f" by {_t(proposal.decided_by)}" if proposal.decided_by else ""
    return by + (f" at {rfc3339(proposal.decided_at)}" if proposal.decided_at else "")


def decided_text(proposal: Proposal) -> str:
    """One line for a proposal that is no longer pending."""
    text = f"{proposal.id} ({proposal.kind.value}): {proposal.state.value}{_by_at(proposal)}"
    if proposal.note:
        text += f", note: {_t(proposal.note)}"
    if proposal.outcome:
        text += f"; {_t(proposal.outcome)}"
    return text


def as_decided(proposal: Proposal) -> str:
    """`carried out (approved by bob at T): relaunched as /alice/x-r1`, `denied by carol at
    T`: what became of a proposal someone else decided."""
    by_at = _by_at(proposal)
    state = {
        ProposalState.DONE: f"carried out (approved{by_at})",
        ProposalState.FAILED: f"approved{by_at} and failed",
        ProposalState.APPROVED: f"approved{by_at}, and is still being carried out",
    }.get(proposal.state, f"{proposal.state.value}{by_at}")
    return state + (f": {_t(proposal.outcome)}" if proposal.outcome else "")


def result_text(result: JobWatchResult) -> str:
    text = f"{result.outcome.value}: job {_t(result.job_state)}"
    if result.cause:
        text += f", cause: {_t(result.cause)}"
    if result.outcome is WatchOutcome.RESTARTED and result.new_job_id:
        text += (
            f"; the new job {_t(result.new_job_id)} is watched by "
            f"{_t(result.new_watch_id or '?')} (keeper job status {_t(result.new_job_id)})"
        )
    if result.outcome is WatchOutcome.UNWATCHED:
        text += "; the job itself was left running"
    return f"{text}; {result.verdicts} verdicts"


def status_lines(
    job_id: str,
    status: str,
    view: WatchView | None,
    result: JobWatchResult | None = None,
    error: str | None = None,
) -> list[str]:
    """The status page: what the watch knows now, then (closed) how it ended."""
    lines = [f"{job_id}  watch {status}"]
    if result is not None:
        lines.append(f"result: {result_text(result)}")
    if error is not None:
        lines.append(f"error: {_t(error)}")
    if view is None:
        lines.append("no view: the watch answers no query (closed, or no worker serves it)")
        return lines
    lines.append(
        f"phase: {view.phase.value}  job: {_t(view.job_state)}  "
        f"checks: {view.checks}  last check: {rfc3339(view.last_check_at) or '-'}  "
        f"next: {rfc3339(view.next_check_at) or '-'}"
    )
    lines.append(f"verdict: {view.verdict} ({_t(view.verdict_reason)})")
    lines.extend(_evidence(view.evidence, "  "))
    if view.cause:
        lines.append(f"cause: {_t(view.cause)}")
    if view.attempt is not None:
        lines.append(f"attempt: {attempt_text(view.attempt)}")
    if view.progress is not None:
        lines.append(f"progress: {progress_text(view.progress)}")
    if view.stale_coordinators:
        names = ", ".join(_t(name) for name in view.stale_coordinators)
        lines.append(f"stale coordinators (older attempts, not judged): {names}")
    if view.controller_errors:
        lines.append("controller reads that failed on the last check (no signal, not idle):")
        lines.extend(f"  - {_t(e)}" for e in view.controller_errors)
    if view.escalations:
        lines.append("escalations:")
        lines.extend(f"  - {_t(e)}" for e in view.escalations)
    pending = view.pending()
    if pending:
        lines.append("pending proposals (keeper acts only on an approval):")
        for proposal in pending:
            lines.extend(proposal_lines(job_id, proposal))
    decided = [p for p in view.proposals if p.state is not ProposalState.PENDING]
    if decided:
        lines.append("decided proposals:")
        lines.extend(f"  {decided_text(p)}" for p in decided)
    if view.restart_of:
        lines.append(f"restart {view.restarts} of {_t(view.restart_of)}")
    if view.timeline:
        shown = view.timeline[-TIMELINE_SHOWN:]
        total = len(view.timeline) + view.timeline_dropped
        lines.append(f"timeline (last {len(shown)} of {total}):")
        for entry in shown:
            attempt = f" [{_t(entry.attempt)}]" if entry.attempt else ""
            lines.append(
                f"  {rfc3339(entry.at)}  {entry.phase.value}  {entry.verdict}{attempt}  "
                f"{_t(entry.reason)}"
            )
    return lines


def follow_line(view: WatchView) -> str:
    """One line per change: nothing in it moves while the watch's picture stays the same
    (no clock, no check counter), so a quiet job writes nothing."""
    text = (
        f"{view.job_id} phase={view.phase.value} job={_t(view.job_state)} "
        f"verdict={view.verdict} ({_t(view.verdict_reason)})"
    )
    if view.progress is not None:
        p = view.progress
        text += f" progress=[{_t(p.stage)}] {p.done}/{p.total} q={p.queued} f={p.in_flight}"
    if view.escalations:
        text += f" escalations={len(view.escalations)}"
    pending = view.pending()
    if pending:
        text += " pending=" + ",".join(p.id for p in pending)
    return text


def list_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    return table(
        ("JOB", "JOB STATE", "VERDICT", "STATUS", "STARTED"),
        (
            (
                _t(r["job_id"] or "-"),
                _t(r["job_state"] or "-"),
                _t(r["verdict"] or "-"),
                r["status"] or "-",
                rfc3339(r["started_at"]) or "-",
            )
            for r in rows
        ),
    )
