"""How many health probes a worker holds open at once, and how long a round may take.

Every probe holds one socket, so what a process may hold open (its open-file limit) bounds
the probes in flight. A round starts every probe at once, each with its own timeout, so it
takes one probe timeout whatever the VMs do, unless the slice has more VMs than the bound:
then the probes go in waves.

| the worker's open-file limit | reserved   | probes in flight (`health.concurrency` unset) |
|------------------------------|------------|-----------------------------------------------|
| 1,024 (a common default)     | 256        | 384                                           |
| 20,000                       | 256        | 9,872                                         |
| 1,048,576                    | 256        | 524,160                                       |
| at most 288                  | 256        | 16 (MIN_IN_FLIGHT)                            |

An explicit `health.concurrency` caps the bound; it never raises it past the limit's share.
"""

from __future__ import annotations

import math
from datetime import timedelta

# Files the worker holds besides probes: gRPC channels, logs, the runner store, sockets of
# the other families' activities.
RESERVED_FILES = 256
# Probes get half of the rest: several slices' rounds may run on one worker at once, and
# the other half is what the process may grow into meanwhile.
PROBE_SHARE = 2
MIN_IN_FLIGHT = 16
# What a round costs besides its probe timeouts: a session, thousands of connections set up
# and torn down, the report. Measured under 1 s for 4,096 VMs (bench/tpu_health_round.py);
# the rest is margin for a loaded worker, since an attempt cut short is retried from zero.
ROUND_OVERHEAD = timedelta(seconds=15)
# A round with no settings to derive its limit from (a run that read its policy from a
# worker before this rule): what such a run was scheduled with.
FALLBACK_ROUND_LIMIT = timedelta(minutes=1)


def in_flight_bound(open_files: int, cap: int | None = None) -> int:
    """Probes one worker process holds open at once, from its open-file (soft) limit."""
    share = max(MIN_IN_FLIGHT, (open_files - RESERVED_FILES) // PROBE_SHARE)
    return min(share, cap) if cap is not None else share


def waves(vms: int, in_flight: int) -> int:
    return max(1, math.ceil(vms / in_flight))


def round_limit(vms: int, probe_timeout: timedelta, in_flight: int) -> timedelta:
    """The start-to-close of one health round: each wave of probes costs at most one probe
    timeout, plus the round's own overhead."""
    return waves(vms, in_flight) * probe_timeout + ROUND_OVERHEAD
