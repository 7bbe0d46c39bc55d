"""spur's job states, as keeper reasons about them (the numbers are the wire's, slurm.JobState)."""

from __future__ import annotations

from enum import IntEnum


class JobState(IntEnum):
    PENDING = 0
    RUNNING = 1
    COMPLETING = 2
    COMPLETED = 3
    FAILED = 4
    CANCELLED = 5
    TIMEOUT = 6
    NODE_FAIL = 7
    PREEMPTED = 8
    SUSPENDED = 9
    DEADLINE = 10
    OUT_OF_MEMORY = 11
    REQUEUED = 12


S = JobState
# The run is over for good.
TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.NODE_FAIL, S.DEADLINE,
                      S.OUT_OF_MEMORY})  # fmt: skip
# A process may be running: the allocated nodes are the job's truth.
ACTIVE = frozenset({S.RUNNING, S.COMPLETING, S.SUSPENDED})
# The job waits for a node and may be mid-dispatch to any node: PREEMPTED and REQUEUED runs
# ended, but the job itself returns to PENDING.
WAITING = frozenset({S.PENDING, S.PREEMPTED, S.REQUEUED})
# What the controller may age out of its job map (spur's "finalized").
FINALIZED = TERMINAL | {S.PREEMPTED, S.REQUEUED}

assert set(JobState) == TERMINAL | ACTIVE | WAITING
