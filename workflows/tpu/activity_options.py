"""Timeouts and retry policies of every TPU-family activity call, in one place.

Polls use a flat retry policy (interval = poll interval, coefficient 1) bounded by the
phase's remaining budget as schedule-to-close: retries are not written to history, so a
four-hour wait costs the same handful of events as a ten-second one.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from keeper.domain.tpu.health_round import FALLBACK_ROUND_LIMIT, round_limit
from keeper.domain.tpu.models import HealthPolicy

CALL_TIMEOUT = timedelta(minutes=2)
# A poll makes a few reads in parallel, each bounded by tpu.call_timeout (30 s by default).
# Kept short because it is also how long an attempt lost with a crashed worker stalls the
# phase before the server hands the poll to another worker.
POLL_START_TO_CLOSE = timedelta(seconds=45)
# A health round's start-to-close is derived from the slice's VMs, the probe timeout and the
# probes in flight a worker holds (health_round_limit). Its heartbeat, the round so far,
# also tells the server of a worker lost mid-round within this long.
HEALTH_HEARTBEAT = timedelta(seconds=10)
CREATE_BUDGET = timedelta(minutes=15)
HEALTH_MAX_INTERVAL = timedelta(seconds=10)

CREATE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
)

# Compensation has no attempt limit and no overall budget: it runs until the resource is
# confirmed gone, in windows (schedule-to-close) that start at COMPENSATION_FIRST_WINDOW and
# double up to COMPENSATION_MAX_WINDOW, so a stuck one reports its last error after each.
COMPENSATION_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
)
COMPENSATION_START_TO_CLOSE = timedelta(minutes=20)
COMPENSATION_HEARTBEAT = timedelta(minutes=1)
COMPENSATION_FIRST_WINDOW = timedelta(minutes=5)
COMPENSATION_MAX_WINDOW = timedelta(hours=1)
# `tpu.policy`, a local activity that reads the worker's settings.
POLICY_TIMEOUT = timedelta(seconds=10)
# The last look at a phase's deadline: one attempt, whatever it sees.
LAST_LOOK = RetryPolicy(maximum_attempts=1)
# The sweeper's survey lists every location and looks up every owner in one attempt.
SURVEY_START_TO_CLOSE = timedelta(minutes=5)

SWEEP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=5,
)


def poll_retry(interval: timedelta) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=interval,
        backoff_coefficient=1.0,
        maximum_interval=interval,
    )


def health_interval(poll_interval: timedelta) -> timedelta:
    # Our own VMs, not the cloud API: they can be asked more often than the QR.
    return min(poll_interval, HEALTH_MAX_INTERVAL)


def health_round_limit(vms: int, health: HealthPolicy | None) -> timedelta:
    """One round's start-to-close, from the policy the run read (domain/tpu/health_round.py);
    a run whose policy predates it keeps the limit it was scheduled with."""
    if health is None:
        return FALLBACK_ROUND_LIMIT
    return round_limit(vms, health.probe_timeout, health.in_flight)
