"""The TPU family's activity calls as its workflows make them: each with its timeouts and
retries (activity_options.py) and the summary the UI shows. The workflows say what to do
and when; this says how each call is made. Deletion has a module of its own
(compensation.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from keeper.activities.tpu.cloud import TpuActivities
    from keeper.activities.tpu.health import HealthActivities
    from keeper.activities.tpu.policy import PolicyActivities
    from keeper.activities.tpu.sweeper import SweeperActivities
    from keeper.domain.tpu.failures import SeenRound
    from keeper.domain.tpu.models import (
        CreateSliceInput,
        HealthCheckInput,
        HealthReport,
        ObserveInput,
        SweepRequest,
        SweepSurvey,
        TpuPolicy,
    )
    from keeper.domain.tpu.observation import SliceObservation
    from keeper.workflows.tpu import activity_options as opts
    from keeper.workflows.tpu.errors import last_health_report, reraise_cancellation


async def read_policy() -> TpuPolicy:
    """The worker's settings, once per run: a change reaches the next run."""
    return await workflow.execute_local_activity_method(
        PolicyActivities.policy, start_to_close_timeout=opts.POLICY_TIMEOUT
    )


async def create_slice(inp: CreateSliceInput) -> None:
    req = inp.request
    kind = "queued resource" if req.capacity.queued else "node"
    await workflow.execute_activity_method(
        TpuActivities.create_slice,
        inp,
        start_to_close_timeout=opts.CALL_TIMEOUT,
        schedule_to_close_timeout=opts.CREATE_BUDGET,
        retry_policy=opts.CREATE_RETRY,
        # A cancel must not let compensation race a create that is still in flight and may
        # yet succeed.
        cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=f"submit: create {kind} {req.slice_name}",
    )


async def observe(
    inp: ObserveInput, left: timedelta, poll_interval: timedelta, what: str, deadline_at: datetime
) -> SliceObservation:
    """Returns when progress moved; retried every poll interval until then, at most until
    the phase's deadline (`left`), when it fails with retry state TIMEOUT."""
    return await workflow.execute_activity_method(
        TpuActivities.observe_slice,
        inp,
        start_to_close_timeout=opts.POLL_START_TO_CLOSE,
        schedule_to_close_timeout=left,
        retry_policy=opts.poll_retry(poll_interval),
        summary=f"{inp.phase.value}: {what} (deadline {deadline_at:%H:%M:%S} UTC)",
    )


async def last_look(inp: ObserveInput) -> SliceObservation | None:
    """One read at the deadline, whatever it sees; None when it fails."""
    try:
        return await workflow.execute_activity_method(
            TpuActivities.observe_slice,
            inp,
            start_to_close_timeout=opts.POLL_START_TO_CLOSE,
            retry_policy=opts.LAST_LOOK,
            summary=f"{inp.phase.value}: last look at the deadline",
        )
    except ActivityError as err:
        reraise_cancellation(err)
        return None


async def health_round(
    inp: HealthCheckInput,
    left: timedelta,
    interval: timedelta,
    deadline_at: datetime,
    limit: timedelta,
) -> HealthReport:
    """Returns when every VM is healthy or the healthy count moved a step; retried every
    `interval` until then, at most until the deadline. `limit` bounds one round."""
    return await workflow.execute_activity_method(
        HealthActivities.check_health,
        inp,
        start_to_close_timeout=limit,
        heartbeat_timeout=opts.HEALTH_HEARTBEAT,
        schedule_to_close_timeout=max(left, timedelta(seconds=1)),
        retry_policy=opts.poll_retry(interval),
        summary=f"health: GET {inp.path} on {len(inp.targets)} VMs "
        f"(deadline {deadline_at:%H:%M:%S} UTC)",
    )


async def last_health_round(inp: HealthCheckInput, limit: timedelta) -> SeenRound | None:
    """One health round at the deadline, reporting whatever it sees: the round, or what the
    round saw before it failed (its heartbeat), or None."""
    try:
        report = await workflow.execute_activity_method(
            HealthActivities.check_health,
            inp,
            start_to_close_timeout=limit,
            heartbeat_timeout=opts.HEALTH_HEARTBEAT,
            retry_policy=opts.LAST_LOOK,
            summary="health: last round at the deadline",
        )
    except ActivityError as err:
        reraise_cancellation(err)
        return last_health_report(err)
    return SeenRound(report, "finished")


async def survey(req: SweepRequest) -> SweepSurvey:
    return await workflow.execute_activity_method(
        SweeperActivities.survey_owned_resources,
        req,
        start_to_close_timeout=opts.SURVEY_START_TO_CLOSE,
        retry_policy=opts.SWEEP_RETRY,
        summary=f"list keeper-labelled TPU resources in every location (from {req.zone})",
    )
