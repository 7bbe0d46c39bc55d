"""JobWatch end to end: the real workflow on the dev server, keeper's iris client over HTTP,
the iris emulator playing each scenario of the babysitting runbook.

Every test asserts the verdict and the proposal its scenario must produce, and that nothing
was stopped or relaunched without an operator's approval (the emulator's action log).
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from emulators.iris import IrisEmulatorConfig
from keeper.domain.watch.cadence import WatchPhase
from keeper.domain.watch.calls import JobWatchResult
from keeper.domain.watch.escalation import EscalationPolicy
from keeper.domain.watch.models import (
    APPROVE_UPDATE,
    DENY_UPDATE,
    Decision,
    Proposal,
    ProposalKind,
    ProposalState,
    WatchOutcome,
    WatchView,
)
from tests.reclaim.world import until
from tests.watch.world import watch_world

pytestmark = pytest.mark.e2e


def pending(view: WatchView, kind: ProposalKind) -> Proposal | None:
    return next((p for p in view.pending() if p.kind is kind), None)


def verdicts(view: WatchView) -> list[str]:
    return [entry.verdict for entry in view.timeline]


async def test_a_healthy_job_is_watched_to_success_with_no_proposal_and_no_action(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("healthy")
        handle = await w.watch(job)
        seen = await w.until_view(handle, lambda v: v.phase is WatchPhase.STEADY, what="steady")
        assert seen.verdict == "running"
        assert seen.attempt is not None and seen.attempt.workers_running > 0
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.SUCCEEDED
        view = await w.view(handle)
        assert view is not None
        assert "stalled" not in verdicts(view)
        assert view.proposals == []
        assert view.progress is not None and view.progress.done == view.progress.total
        assert w.actions() == []


async def test_a_zombie_coordinator_is_escalated_and_restarted_only_once_approved(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job, held = w.launch_held("zombie-coordinator")
        handle = await w.watch(job, held)
        view = await w.until_view(
            handle,
            lambda v: pending(v, ProposalKind.RESTART) is not None,
            what="a restart proposal",
        )
        assert any("zombie" in e for e in view.escalations), view.escalations
        # Proposed, not done: the job runs on until an operator says so.
        await asyncio.sleep(2)
        assert w.actions() == []
        restart = pending(view, ProposalKind.RESTART)
        assert restart is not None
        answer = await handle.execute_update(
            APPROVE_UPDATE,
            Decision(proposal=restart.id, by="oncall"),
            result_type=Proposal,
        )
        assert answer.state is ProposalState.DONE, answer
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.RESTARTED
        assert result.new_job_id == f"{job}-r1"
        methods = [a["method"] for a in w.actions()]
        assert methods == ["TerminateJob", "LaunchJob"], w.actions()
        # The new job is watched by a watch of its own.
        assert result.new_watch_id is not None
        child = dev_env.client.get_workflow_handle(result.new_watch_id)
        assert (await child.describe()).status is WorkflowExecutionStatus.RUNNING
        child_view = await w.until_view(child, lambda v: v.checks >= 1, what="the new watch")
        assert child_view.restart_of == job and child_view.restarts == 1
        await child.cancel()


async def test_a_retry_is_followed_to_the_latest_attempt_and_the_stale_coordinator_reported(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("killed-retry")
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: v.attempt is not None and v.attempt.attempt == 1,
            within=60,
            what="the watch on attempt a1",
        )
        phases = [entry.phase for entry in view.timeline]
        assert WatchPhase.FAILURE in phases, view.timeline
        await w.until_view(handle, lambda v: bool(v.stale_coordinators), what="a stale coordinator")
        result: JobWatchResult = await w.result(handle)
        assert result.outcome is WatchOutcome.SUCCEEDED
        assert w.actions() == []


async def test_a_stuck_stage_proposes_a_restart_and_a_denial_leaves_the_job_alone(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("stuck-stage")
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: (
                any("has stood at" in e for e in v.escalations)
                and pending(v, ProposalKind.RESTART) is not None
            ),
            within=60,
            what="a stuck-stage escalation with a restart proposal",
        )
        restart = pending(view, ProposalKind.RESTART)
        assert restart is not None
        denied = await handle.execute_update(
            DENY_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
        )
        assert denied.state is ProposalState.DENIED
        # A decided proposal cannot be approved afterwards.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                APPROVE_UPDATE, Decision(proposal=restart.id, by="oncall"), result_type=Proposal
            )
        assert "already denied by oncall" in str(refused.value.cause)
        await asyncio.sleep(2)
        assert w.actions() == []
        await handle.cancel()
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.UNWATCHED


async def test_stragglers_are_escalated_with_the_progress_line_as_evidence(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        # 32 workers, one busy: most of the pool idles behind the last shard.
        job = w.launch("stragglers", workers=32)
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: any("straggl" in e for e in v.escalations),
            within=60,
            what="a stragglers escalation",
        )
        assert view.progress is not None and view.progress.queued == 0
        assert view.progress.in_flight <= 2
        # Escalated to debug, not a kill: a restart would rerun every shard to stall behind
        # the same one; nothing is proposed, the escalation says what to look at.
        assert view.pending() == [], view.proposals
        assert w.actions() == []
        await handle.cancel()


async def test_an_oom_looping_straggler_is_escalated_as_stragglers_not_a_stuck_stage(
    dev_env: WorkflowEnvironment,
) -> None:
    """4999/5000: the last shard runs, its worker runs out of memory, it waits in the queue
    and runs again, so the tail alternates between in flight and queued. That is the
    stragglers escalation (raised after straggler_after, 6 s here), not a stage stuck for
    stuck_after (30 s here, as 30 min is to 20 min in production), escalated to debug: no
    restart is proposed, which would rerun every shard to loop on the same one again."""
    stuck_later = EscalationPolicy(
        stuck_after=timedelta(seconds=30), straggler_after=timedelta(seconds=6)
    )
    async with watch_world(dev_env.client, escalation=stuck_later) as w:
        job = w.launch("oom-straggler")
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: any("straggler" in e for e in v.escalations),
            within=60,
            what="a stragglers escalation",
        )
        summary = next(e for e in view.escalations if "straggler" in e)
        assert "out of memory and queued again" in summary, summary
        assert not any("has stood at" in e for e in view.escalations), view.escalations
        assert not any("straggler" in p.reason for p in view.proposals), view.proposals
        assert view.progress is not None and view.progress.done == 4999, view.progress
        assert w.actions() == []
        await handle.cancel()


async def test_a_repeated_error_proposes_a_stop_and_an_approved_stop_terminates_only(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("repeated-failure", max_task_errors=50, failure_gap=20)
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: pending(v, ProposalKind.STOP) is not None,
            within=60,
            what="a stop proposal",
        )
        stop = pending(view, ProposalKind.STOP)
        assert stop is not None and "same error" in stop.reason, stop
        assert w.actions() == []
        done = await handle.execute_update(
            APPROVE_UPDATE, Decision(proposal=stop.id, by="oncall"), result_type=Proposal
        )
        assert done.state is ProposalState.DONE
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.STOPPED
        assert [a["method"] for a in w.actions()] == ["TerminateJob"]


async def test_controller_timeouts_are_escalated_and_never_read_as_a_stall(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        # Long enough for several checks to fail in a row: 15 s hanging, 15 s unavailable.
        job = w.launch("rpc-timeouts", event_for=1800)
        handle = await w.watch(job)
        view = await w.until_view(
            handle,
            lambda v: any("controller" in e for e in v.escalations),
            within=60,
            what="a controller-timeouts escalation",
        )
        assert view.controller_errors, view
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.SUCCEEDED
        final = await w.view(handle)
        assert final is not None
        assert "stalled" not in verdicts(final), final.timeline
        assert not [p for p in final.proposals if p.state is not ProposalState.WITHDRAWN]
        assert w.actions() == []


async def test_terminated_by_user_is_not_taken_at_its_word_the_worker_logs_name_the_cause(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("terminated-by-user")
        handle = await w.watch(job)
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.FAILED
        assert result.cause is not None
        assert "out of memory" in result.cause.lower(), result.cause
        assert w.actions() == []


async def test_a_job_that_finishes_while_the_worker_is_down_is_reported_when_it_returns(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("finish-while-down")
        handle = await w.watch(job)
        await w.until_view(handle, lambda v: v.checks >= 1, what="a first check")
        await w.stop_worker()
        await until(
            lambda: w.emu.controller.jobs[job].finished(
                w.emu.controller.now_t(w.emu.controller.jobs[job])
            ),
            within=30,
            what="the job finishing while nobody watches",
        )
        await w.start_worker()
        result = await w.result(handle)
        assert result.outcome is WatchOutcome.SUCCEEDED
        view = await w.view(handle)
        assert view is not None and "stalled" not in verdicts(view)


async def test_the_seed_false_stall_a_healthy_cpu_bound_run_whose_session_counter_resets(
    dev_env: WorkflowEnvironment,
) -> None:
    """Seed 004: the session CPU total resets between reads (current far below the running
    maximum) on a healthy 20-core, log-quiet run. It must never be flagged."""
    async with watch_world(dev_env.client) as w:
        job = w.launch("cpu-bound-quiet")
        handle = await w.watch(job)
        # Well past the gate (3 ticks and 3 s) and the fallback (2 ticks).
        view = await w.until_view(handle, lambda v: v.checks >= 15, within=60, what="15 checks")
        assert "stalled" not in verdicts(view), view.timeline
        assert view.verdict == "running", view
        assert view.proposals == []
        await handle.cancel()


async def test_the_session_total_alone_never_makes_a_stall_when_proc_cannot_be_read(
    dev_env: WorkflowEnvironment,
) -> None:
    """A container whose /proc cannot be read while `ps` still answers, its thread dump and
    its logs unreadable too: the session CPU total, resetting at every read, is the only
    reading left. Its rises show life (no process was read beside it); its falls and standing
    values are resets and nothing: never a stall, well past the fallback's gate (2 checks and
    3 s), and nothing proposed on it."""
    async with watch_world(dev_env.client) as w:
        job = w.launch("cpu-bound-quiet", proc_stat="denied")
        w.emu.set_fault("unavailable", None, ["ProfileTask", "FetchLogs"])
        handle = await w.watch(job)
        view = await w.until_view(handle, lambda v: v.checks >= 15, within=60, what="15 checks")
        assert "stalled" not in verdicts(view), view.timeline
        reasons = {e.reason for e in view.timeline}
        assert not reasons & {"fallback_persistence", "probe_confirmed_stall"}, view.timeline
        assert not [p for p in view.proposals if p.kind is ProposalKind.RESTART], view.proposals
        assert w.actions() == []
        await handle.cancel()


async def test_a_process_busy_for_hours_then_hung_is_flagged_after_the_gate_not_before(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("hung-busy")
        handle = await w.watch(job)
        view = await w.until_view(
            handle, lambda v: v.verdict == "stalled", within=60, what="a stalled verdict"
        )
        stalled = next(e for e in view.timeline if e.verdict == "stalled")
        assert stalled.reason == "probe_confirmed_stall", stalled
        # The gate: the first check did not flag, and the verdict's own streak of no progress
        # is at least stall_ticks checks over stall_min_elapsed. The span starts at the check
        # before the first flat one, so the timeline's entries, stamped when each check
        # ended, can sit closer together than the gate on a loaded host.
        assert view.timeline[0].verdict != "stalled" and view.timeline[0].at < stalled.at
        liveness = w.settings.watch.liveness
        evidence = " ".join(stalled.evidence)
        span = re.search(r"no progress for (\d+) ticks over (\d[\d,]*) s;", evidence)
        assert span is not None, stalled.evidence
        assert int(span.group(1)) >= liveness.stall_ticks, stalled.evidence
        seconds = int(span.group(2).replace(",", ""))
        assert seconds >= liveness.stall_min_elapsed.total_seconds(), stalled.evidence
        assert pending(view, ProposalKind.RESTART) is not None
        assert w.actions() == []
        await handle.cancel()


async def test_the_first_check_of_a_job_hung_for_hours_reads_its_log_as_a_backlog(
    dev_env: WorkflowEnvironment,
) -> None:
    """hung-busy in real time (speed 1, so the log's stamps are wall-clock true): the job is
    3 h 10 min old when the watch starts, hung for the last 10 minutes, its coordinator's log
    full of the three hours of progress before. The first check reads that log as a backlog,
    not as new progress: the job is never reported running, and the stall is still found."""
    async with watch_world(dev_env.client, IrisEmulatorConfig(speed=1.0)) as w:
        job = w.launch("hung-busy")
        handle = await w.watch(job)
        view = await w.until_view(
            handle, lambda v: v.verdict == "stalled", within=60, what="a stalled verdict"
        )
        first = view.timeline[0]
        assert (first.verdict, first.reason) == ("unknown", "no_baseline"), view.timeline
        assert "running" not in verdicts(view), view.timeline
        assert not any("new log lines" in e for entry in view.timeline for e in entry.evidence)
        stalled = next(e for e in view.timeline if e.verdict == "stalled")
        assert stalled.reason == "probe_confirmed_stall", stalled
        assert w.actions() == []
        await handle.cancel()


async def test_a_dead_worker_with_no_signals_at_all_is_still_flagged(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("dead-worker")
        handle = await w.watch(job)
        view = await w.until_view(
            handle, lambda v: v.verdict == "stalled", within=60, what="a stalled verdict"
        )
        stalled = next(e for e in view.timeline if e.verdict == "stalled")
        assert stalled.reason == "fallback_persistence", stalled
        assert w.actions() == []
        await handle.cancel()


async def test_an_approval_of_an_unknown_proposal_is_refused_by_the_validator(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("healthy")
        handle = await w.watch(job)
        await w.until_view(handle, lambda v: v.checks >= 1, what="a first check")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(
                APPROVE_UPDATE, Decision(proposal="restart-9", by="oncall"), result_type=Proposal
            )
        assert "no proposal 'restart-9'" in str(refused.value.cause)
        await handle.cancel()
        assert w.actions() == []


async def test_a_queued_job_is_waited_for_by_one_retrying_activity_not_a_check_per_poll(
    dev_env: WorkflowEnvironment,
) -> None:
    async with watch_world(dev_env.client) as w:
        job = w.launch("healthy", queued=300)  # five wall seconds in the queue
        handle = await w.watch(job)
        await w.until_view(handle, lambda v: v.job_state == "pending", what="a pending job")
        await w.until_view(
            handle, lambda v: v.job_state == "running", within=30, what="the job scheduled"
        )
        history = await handle.fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        # The queue's five seconds at a half-second smoke pace: one wait, not ten checks.
        assert scheduled.count("watch.await_scheduled") == 1, scheduled
        before_running = scheduled[: scheduled.index("watch.await_scheduled") + 1]
        assert before_running.count("watch.observe") == 1, scheduled
        await handle.cancel()
        assert (await w.result(handle)).outcome is WatchOutcome.UNWATCHED
