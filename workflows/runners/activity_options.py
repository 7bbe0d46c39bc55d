"""Timeouts and retry policies of every runner-family activity call, in one place."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio.common import RetryPolicy

from keeper.domain.runners.models import DeletionPolicy

# Runner deletion. Store calls are short SQL; they retry without limit because giving up
# would leave the record wherever it is.
STORE_START_TO_CLOSE = timedelta(seconds=30)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
)
# The worker's policy, read once at the start of each run (a local activity: no I/O).
POLICY_START_TO_CLOSE = timedelta(seconds=10)
# One call to GitHub per attempt; Temporal's retries are the deletion's patience.
GITHUB_START_TO_CLOSE = timedelta(minutes=1)
# Heartbeats (policy.provider_heartbeat) let a crashed worker's provider attempt be noticed
# well before the provider timeout.
PROVIDER_MARGIN = timedelta(seconds=30)
# The reconciler's pass is not retried: a retry would count as a second pass seconds after
# the first, and the schedule runs the next pass anyway.
ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)


def github_retry(policy: DeletionPolicy, attempts: int = 0) -> RetryPolicy:
    """Deregistration calls raise with their own next_retry_delay (busy poll, recheck,
    backoff, retry-after); the interval here only covers crashes and timeouts."""
    longest = max(policy.retry_max, policy.escalation_recheck, policy.busy_poll)
    return dataclasses.replace(provider_retry(policy, attempts), maximum_interval=longest)


def provider_retry(policy: DeletionPolicy, attempts: int = 0) -> RetryPolicy:
    """Provider deletes back off from retry_initial to retry_max; a force caps the attempts."""
    return RetryPolicy(
        initial_interval=policy.retry_initial,
        backoff_coefficient=2.0,
        maximum_interval=policy.retry_max,
        maximum_attempts=attempts,
    )
