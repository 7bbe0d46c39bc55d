"""Timeouts and retry policies of every job-reclaim activity call, in one place."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# The policy, a local activity that reads the worker's settings: nothing to wait for.
POLICY_START_TO_CLOSE = timedelta(seconds=10)
# Reads of the controller and keeper's memory: short calls, retried until they answer,
# because every destructive step waits for a fresh read.
READ_START_TO_CLOSE = timedelta(seconds=30)
READ_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
)
# One cancel per attempt: a timeout or an unreachable agent comes back as an answer (it
# counts as a try of the escalation), so only a worker crash retries it.
CANCEL_START_TO_CLOSE = timedelta(seconds=30)
CANCEL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
# Drain and undrain retry until they succeed: a drain keeper made must also be lifted.
NODE_START_TO_CLOSE = timedelta(seconds=30)
NODE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=2),
)
