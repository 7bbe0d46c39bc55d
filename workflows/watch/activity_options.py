"""Timeouts and retry policies of every job-watch activity call, in one place."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# The worker's settings (the local activity `watch.policy`): in memory, instant.
POLICY_START_TO_CLOSE = timedelta(seconds=10)
# A check: several controller reads, each with its own deadline (watch.call_timeout). A read
# that fails comes back inside the observation as unavailable (the escalation counts them),
# so only a worker crash or a bug retries the activity.
OBSERVE_START_TO_CLOSE = timedelta(minutes=5)
# The check and the probe beat while they read (activities/heartbeat.py): a worker that dies
# mid-check is noticed after this, not after the start-to-close, and the check runs again.
CHECK_HEARTBEAT = timedelta(seconds=30)
READ_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=2),
)
# Waiting for a queued job to be scheduled: the activity fails until it is, so a wait of
# hours is two events, not a timer and a check per poll. Its pace is the smoke checks'
# (await_scheduled_retry), backing off to the steady cadence's longest interval.
AWAIT_SCHEDULED_START_TO_CLOSE = timedelta(minutes=2)


def await_scheduled_retry(first: timedelta, longest: timedelta) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=first,
        backoff_coefficient=1.5,
        maximum_interval=max(first, longest),
        non_retryable_error_types=["JobNotFound"],
    )


# The delta probe: two reads a few seconds apart.
PROBE_START_TO_CLOSE = timedelta(minutes=2)
# A probe is worth its reads only right after the check that asked for it: confirm() refuses
# one that answers more than liveness.observer_gap (1 min) after its check, as an observer
# gap. So a probe waiting for a worker (one died between the check and the probe), retried or
# queued behind others, is given up after this, retries included, and the watch goes on.
PROBE_SCHEDULE_TO_CLOSE = timedelta(minutes=2)
PROBE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=2), maximum_attempts=3)
# An approved stop or relaunch retries until the controller answers; a refusal (invalid
# request, permission) is not retried and fails the proposal, loudly.
ACTION_START_TO_CLOSE = timedelta(minutes=2)
# A step still not done after this long fails its proposal (and says so) rather than hold
# the watch: the operator decides what next.
ACTION_SCHEDULE_TO_CLOSE = timedelta(minutes=30)
ACTION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=2),
    non_retryable_error_types=["IrisRefused", "IrisAuthError"],
)
# How long a closing (or rolling-over) run waits for alerts still in flight
# (workflows/common/alerts.py gives each its timeouts and retries).
ALERTS_SETTLE = timedelta(minutes=3)
