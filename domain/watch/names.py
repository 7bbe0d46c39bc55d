"""iris job and task names as a zephyr pipeline uses them, and which child attempt is the latest.

A zephyr job J runs each pipeline execution as two child jobs, a one-task coordinator and a
workers pool:

    J/zephyr-<ctx>-<8 hex>-p<pipeline>-a<attempt>-coord
    J/zephyr-<ctx>-<8 hex>-p<pipeline>-a<attempt>-workers

A retry gets a new hash and a higher a<N>; the next pipeline gets p<N+1>. Coordinators of
older attempts may linger RUNNING after a retry (stale coordinators): keeper judges only the
latest attempt and reports the others.

iris states (JOB_STATE_*, TASK_STATE_*, their numbers, or the CLI's lowercase names) read as a
`JobPhase`:

| phase | active | terminal | why |
|---|---|---|---|
| pending, unspecified, missing | no | no | not yet scheduled (missing is a reconcile sentinel) |
| assigned, building, running | yes | no | OPS.md's active states |
| preempted | no | yes | iris's last word on a task whose preemption budget is spent |
| succeeded, failed, killed, worker_failed, unschedulable, cosched_failed | no | yes | over |

A task preempted while it has budget left (`max_retries_preemption`) goes back to PENDING,
its attempt marked PREEMPTED; only a task with no budget left stays PREEMPTED, for good.
iris's JobState has no PREEMPTED: a job whose tasks all ended and one of them PREEMPTED is
WORKER_FAILED (marin-iris 0.2.227.dev40316220070, TERMINAL_TASK_STATES).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated

from pydantic import BeforeValidator

from keeper.domain.watch.values import Frozen


class JobPhase(StrEnum):
    UNSPECIFIED = "unspecified"
    PENDING = "pending"
    BUILDING = "building"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    WORKER_FAILED = "worker_failed"
    UNSCHEDULABLE = "unschedulable"
    ASSIGNED = "assigned"
    PREEMPTED = "preempted"
    COSCHED_FAILED = "cosched_failed"
    MISSING = "missing"

    @property
    def is_active(self) -> bool:
        return self in ACTIVE

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


P = JobPhase
ACTIVE = frozenset({P.ASSIGNED, P.BUILDING, P.RUNNING})
TERMINAL = frozenset(
    {
        P.SUCCEEDED,
        P.FAILED,
        P.KILLED,
        P.WORKER_FAILED,
        P.UNSCHEDULABLE,
        P.PREEMPTED,
        P.COSCHED_FAILED,
    }
)
WAITING = frozenset({P.UNSPECIFIED, P.PENDING, P.MISSING})
assert set(JobPhase) == ACTIVE | TERMINAL | WAITING

# job.proto's numbers: JobState uses 0-8, TaskState the same and then 9-12.
_BY_NUMBER: dict[int, JobPhase] = {
    0: P.UNSPECIFIED, 1: P.PENDING, 2: P.BUILDING, 3: P.RUNNING, 4: P.SUCCEEDED, 5: P.FAILED,
    6: P.KILLED, 7: P.WORKER_FAILED, 8: P.UNSCHEDULABLE, 9: P.ASSIGNED, 10: P.PREEMPTED,
    11: P.COSCHED_FAILED, 12: P.MISSING,
}  # fmt: skip


def phase_of(state: str | int) -> JobPhase:
    """`JOB_STATE_RUNNING`, `TASK_STATE_RUNNING`, `"running"`, 3 or `"3"` → running.

    Anything unrecognised (a state a newer iris added) reads as unspecified: neither active nor
    terminal, so it never ends a watch nor counts as alive.
    """
    if isinstance(state, int):
        return _BY_NUMBER.get(state, P.UNSPECIFIED)
    text = state.strip()
    if text.isdigit():
        return _BY_NUMBER.get(int(text), P.UNSPECIFIED)
    name = text.upper().removeprefix("JOB_STATE_").removeprefix("TASK_STATE_")
    try:
        return JobPhase(name.lower())
    except ValueError:
        return P.UNSPECIFIED


def _read_phase(value: object) -> object:
    return phase_of(value) if isinstance(value, str | int) else value


# A JobPhase field that also takes iris's spellings (`JOB_STATE_RUNNING`, 3, "running").
Phase = Annotated[JobPhase, BeforeValidator(_read_phase)]


class ChildRole(StrEnum):
    COORD = "coord"
    WORKERS = "workers"


class ChildName(Frozen):
    """A zephyr child job's id, read."""

    job_id: str
    parent: str
    # The context's name (may be empty) and its 8 hex: together they name the actor group.
    ctx: str
    hash: str
    pipeline: int
    attempt: int
    role: ChildRole

    @property
    def group(self) -> str:
        """What the coord and workers children of one attempt share (`<ctx>-<hash>-pN-aN`)."""
        head = f"{self.ctx}-{self.hash}" if self.ctx else self.hash
        return f"{head}-p{self.pipeline}-a{self.attempt}"


# The last path component. "zephyr-" is optional because OPS.md writes the short
# `<hash>-p<N>-a<N>-coord`; the ctx name may itself contain dashes, so the hash is the last
# 8-hex word before -p<N>.
_CHILD = re.compile(
    r"^(?:zephyr-)?(?:(?P<ctx>.+?)-)??(?P<hash>[0-9a-fA-F]{8})"
    r"-p(?P<pipeline>\d+)-a(?P<attempt>\d+)-(?P<role>coord|workers)$"
)


def parse_child(job_id: str) -> ChildName | None:
    """The zephyr child named by `job_id`, or None when it is not one (or is a task id)."""
    parent, sep, last = job_id.rstrip("/").rpartition("/")
    if not sep or not parent:
        return None
    match = _CHILD.match(last)
    if match is None:
        return None
    return ChildName(
        job_id=job_id.rstrip("/"),
        parent=parent,
        ctx=match["ctx"] or "",
        hash=match["hash"].lower(),
        pipeline=int(match["pipeline"]),
        attempt=int(match["attempt"]),
        role=ChildRole(match["role"]),
    )


class ChildRef(Frozen):
    """A child job as a listing shows it: its id, state and submit time."""

    job_id: str
    state: Phase = P.UNSPECIFIED
    submitted_at_ms: int = 0


class AttemptRef(Frozen):
    """The latest attempt of a zephyr job, and the coordinators older attempts left running."""

    parent: str
    # The attempt's key: it changes when a retry or the next pipeline starts, and the watch
    # follows it.
    group: str
    pipeline: int
    attempt: int
    # Either may be missing for a moment: iris creates the coordinator before the workers.
    coord: str | None = None
    coord_state: JobPhase | None = None
    workers: str | None = None
    workers_state: JobPhase | None = None
    stale_coordinators: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How the timeline names it: `p0-a1 (<group>)`."""
        return f"p{self.pipeline}-a{self.attempt} ({self.group})"


def pick_latest(children: Iterable[ChildRef], parent: str | None = None) -> AttemptRef | None:
    """The latest zephyr attempt among `children` (only `parent`'s when given).

    Latest is the highest (pipeline, attempt); a tie (two groups with the same numbers) goes to
    the one submitted last. Children that are not zephyr children are ignored. The stale
    coordinators are every other group's coordinator that is still active, sorted.
    """
    groups: dict[str, dict[ChildRole, tuple[ChildName, ChildRef]]] = {}
    for ref in children:
        name = parse_child(ref.job_id)
        if name is None or (parent is not None and name.parent != parent.rstrip("/")):
            continue
        groups.setdefault(f"{name.parent}/{name.group}", {})[name.role] = (name, ref)
    if not groups:
        return None

    def rank(members: dict[ChildRole, tuple[ChildName, ChildRef]]) -> tuple[int, int, int]:
        name = next(iter(members.values()))[0]
        submitted = max(ref.submitted_at_ms for _, ref in members.values())
        return name.pipeline, name.attempt, submitted

    latest_key = max(groups, key=lambda k: (rank(groups[k]), k))
    latest = groups[latest_key]
    name = next(iter(latest.values()))[0]
    coord = latest.get(ChildRole.COORD)
    workers = latest.get(ChildRole.WORKERS)
    stale = sorted(
        members[ChildRole.COORD][1].job_id
        for key, members in groups.items()
        if key != latest_key
        and ChildRole.COORD in members
        and members[ChildRole.COORD][1].state.is_active
    )
    return AttemptRef(
        parent=name.parent,
        group=name.group,
        pipeline=name.pipeline,
        attempt=name.attempt,
        coord=coord[1].job_id if coord else None,
        coord_state=coord[1].state if coord else None,
        workers=workers[1].job_id if workers else None,
        workers_state=workers[1].state if workers else None,
        stale_coordinators=tuple(stale),
    )


_TASK = re.compile(r"^(?P<job>/.+)/(?P<index>\d+)(?::(?P<attempt>\d+))?$")


def task_id(job_id: str, index: int = 0) -> str:
    """The id of task `index` of `job_id` (`/alice/job/0`); a coordinator's task is index 0."""
    return f"{job_id.rstrip('/')}/{index}"


def attempt_target(task: str, attempt_id: int) -> str:
    """One attempt of a task, as ProfileTask and the log keys name it (`/alice/job/0:3`)."""
    return f"{task}:{attempt_id}"


def parse_task_id(text: str) -> tuple[str, int] | None:
    """(job id, index) of a task id (an `:<attempt>` suffix is allowed), or None."""
    match = _TASK.match(text.strip())
    if match is None:
        return None
    return match["job"], int(match["index"])
