"""A health round's bounds (domain/tpu/health_round.py) and their use by the workflow's
activity options: each table row by row."""

from __future__ import annotations

from datetime import timedelta

import pytest

from keeper.domain.tpu.health_round import (
    FALLBACK_ROUND_LIMIT,
    ROUND_OVERHEAD,
    in_flight_bound,
    round_limit,
    waves,
)
from keeper.domain.tpu.models import HealthPolicy
from keeper.workflows.tpu.activity_options import health_round_limit


@pytest.mark.parametrize(
    ("open_files", "cap", "bound"),
    [
        (1024, None, 384),
        (20_000, None, 9872),
        (1_048_576, None, 524_160),
        (288, None, 16),
        (100, None, 16),  # below the reserve: the floor
        (20_000, 64, 64),  # health.concurrency caps it
        (1024, 4096, 384),  # and never raises it past the limit's share
    ],
)
def test_probes_in_flight_follow_the_open_file_limit(open_files, cap, bound):
    assert in_flight_bound(open_files, cap) == bound


@pytest.mark.parametrize(
    ("vms", "in_flight", "expected_waves"),
    [(0, 64, 1), (1, 64, 1), (64, 64, 1), (65, 64, 2), (4096, 64, 64), (4096, 9872, 1)],
)
def test_probes_past_the_bound_go_in_waves(vms, in_flight, expected_waves):
    assert waves(vms, in_flight) == expected_waves


@pytest.mark.parametrize(
    ("vms", "probe_timeout", "in_flight", "limit"),
    [
        # One wave, whatever the VMs do: one probe timeout plus the overhead.
        (4096, timedelta(seconds=2), 9872, timedelta(seconds=2) + ROUND_OVERHEAD),
        (8, timedelta(seconds=2), 384, timedelta(seconds=2) + ROUND_OVERHEAD),
        # A worker left at 1,024 open files: 4,096 VMs in 11 waves.
        (4096, timedelta(seconds=2), 384, timedelta(seconds=22) + ROUND_OVERHEAD),
        # The slice under the old bound of 64: past the old fixed minute.
        (4096, timedelta(seconds=2), 64, timedelta(seconds=128) + ROUND_OVERHEAD),
    ],
)
def test_a_rounds_limit_is_its_waves_of_probe_timeouts_plus_overhead(
    vms, probe_timeout, in_flight, limit
):
    assert round_limit(vms, probe_timeout, in_flight) == limit
    policy = HealthPolicy(probe_timeout=probe_timeout, in_flight=in_flight)
    assert health_round_limit(vms, policy) == limit


def test_a_run_whose_policy_predates_the_rule_keeps_its_minute():
    assert health_round_limit(4096, None) == FALLBACK_ROUND_LIMIT == timedelta(minutes=1)
