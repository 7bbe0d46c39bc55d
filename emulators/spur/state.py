"""The controller's view: jobs, nodes, the id watermark, drains and updates. No I/O.

Mirrors spur's job map: ids come from a watermark allocated at submit, a dispatch flips the
state to RUNNING before the node allocation commits, finalized jobs age out after a
retention, and a wipe forgets everything and restarts the ids. Node names here are the
controller's names; what an agent calls itself is the agent's business (see holdings.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulators.clock import Clock, iso
from keeper.wire.spur import slurm_pb2

JobState = slurm_pb2.JobState
NodeState = slurm_pb2.NodeState

TERMINAL: frozenset[int] = frozenset(
    {
        slurm_pb2.JOB_COMPLETED,
        slurm_pb2.JOB_FAILED,
        slurm_pb2.JOB_CANCELLED,
        slurm_pb2.JOB_TIMEOUT,
        slurm_pb2.JOB_NODE_FAIL,
        slurm_pb2.JOB_DEADLINE,
        slurm_pb2.JOB_OUT_OF_MEMORY,
    }
)
ACTIVE: frozenset[int] = frozenset(
    {slurm_pb2.JOB_RUNNING, slurm_pb2.JOB_COMPLETING, slurm_pb2.JOB_SUSPENDED}
)
# The run ended: terminal, or preempted/requeued on the way back to PENDING.
FINALIZED: frozenset[int] = TERMINAL | {slurm_pb2.JOB_PREEMPTED, slurm_pb2.JOB_REQUEUED}
# A node held in these states keeps it until an admin (UpdateNode) says otherwise.
_ADMIN_STATES: frozenset[int] = frozenset(
    {slurm_pb2.NODE_DOWN, slurm_pb2.NODE_DRAIN, slurm_pb2.NODE_DRAINING, slurm_pb2.NODE_ERROR}
)
DEFAULT_AGENT_PORT = 6818


class NotFound(LookupError):
    """Unknown job or node; the gRPC layer answers NOT_FOUND, the control API 404."""


def job_state(value: str | int) -> int:
    """A JobState from 'COMPLETED', 'JOB_COMPLETED' or its number; ValueError otherwise."""
    if isinstance(value, int):
        if value not in JobState.values():
            raise ValueError(f"unknown job state {value}")
        return value
    name = value.upper()
    name = name if name.startswith("JOB_") else "JOB_" + name
    if name not in JobState.DESCRIPTOR.values_by_name:
        raise ValueError(f"unknown job state {value!r}")
    return int(JobState.Value(name))


def state_name(enum: Any, value: int) -> str:
    return str(enum.Name(value))


@dataclass
class Job:
    job_id: int
    name: str
    user: str
    state: int
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    # The controller's node names, set by the allocation commit (after the RUNNING flip).
    allocated_nodes: list[str] = field(default_factory=list)
    # Where the current run was dispatched, committed or not.
    dispatched_to: list[str] = field(default_factory=list)
    # spur's internal dispatch epoch: 0 before the first dispatch, +1 per dispatch.
    run_attempt: int = 0
    array_job_id: int = 0
    array_task_id: int = 0
    exit_code: int = 0
    state_reason: str = ""
    # Nodes of the current run that reported their process finished (ReportJobStatus).
    node_completions: dict[str, int] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def finalized(self) -> bool:
        return self.state in FINALIZED

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "user": self.user,
            "state": state_name(JobState, self.state),
            "submit_time": iso(self.submit_time),
            "start_time": iso(self.start_time),
            "end_time": iso(self.end_time),
            "allocated_nodes": list(self.allocated_nodes),
            "dispatched_to": list(self.dispatched_to),
            "run_attempt": self.run_attempt,
            "array_job_id": self.array_job_id,
            "array_task_id": self.array_task_id,
        }


@dataclass
class Node:
    name: str
    state: int = slurm_pb2.NODE_IDLE
    state_reason: str = ""
    address: str = ""
    port: int = DEFAULT_AGENT_PORT
    hostname: str = ""
    slurmd_start_time: float | None = None
    boot_time: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    last_heartbeat: float | None = None
    last_running_jobs: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": state_name(NodeState, self.state),
            "state_reason": self.state_reason,
            "hostname": self.hostname,
            "address": self.address,
            "port": self.port,
            "slurmd_start_time": iso(self.slurmd_start_time),
            "labels": dict(self.labels),
            "last_heartbeat": iso(self.last_heartbeat),
            "last_running_jobs": list(self.last_running_jobs),
        }


@dataclass
class Registration:
    hostname: str
    address: str
    port: int
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)


class Cluster:
    def __init__(self, clock: Clock, *, first_job_id: int = 1, retention: float = 3600.0) -> None:
        if first_job_id < 1:
            raise ValueError("first_job_id must be at least 1")
        self.clock = clock
        self.first_job_id = first_job_id
        self.retention = retention
        self.jobs: dict[int, Job] = {}
        self.nodes: dict[str, Node] = {}
        self.next_job_id = first_job_id
        self.drains: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        # Bumped by every wipe, so /state shows which controller life a view came from.
        self.incarnation = 1

    # ------------------------------------------------------------- jobs

    def job(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise NotFound(f"job {job_id} not found") from None

    def submit(self, name: str = "job", user: str = "alice", array_size: int = 0) -> list[Job]:
        """One job, or with array_size > 0 an array: the parent id is consumed, never stored."""
        if array_size < 0:
            raise ValueError("array_size must not be negative")
        now, pending = self.clock.now(), slurm_pb2.JOB_PENDING
        parent = self._take_id() if array_size else 0
        jobs = [
            Job(self._take_id(), name, user, pending, now, array_job_id=parent, array_task_id=i)
            for i in range(array_size or 1)
        ]
        self.jobs.update((job.job_id, job) for job in jobs)
        return jobs

    def _take_id(self) -> int:
        # Single-threaded on the event loop, so read-and-bump is atomic with the insert.
        job_id = self.next_job_id
        self.next_job_id += 1
        return job_id

    def start(self, job_id: int, nodes: list[str]) -> Job:
        """The first half of a dispatch: RUNNING, a new run_attempt, no nodes committed yet."""
        job = self.job(job_id)
        if job.state != slurm_pb2.JOB_PENDING:
            raise ValueError(f"job {job_id} is {state_name(JobState, job.state)}, not PENDING")
        for name in nodes:
            self.node(name)
        if not nodes:
            raise ValueError("a dispatch needs at least one node")
        job.state = slurm_pb2.JOB_RUNNING
        job.start_time = self.clock.now()
        job.end_time = None
        job.run_attempt += 1
        job.dispatched_to = list(nodes)
        job.allocated_nodes = []
        job.node_completions = {}
        return job

    def commit(self, job_id: int) -> Job:
        """The second half: allocated_nodes is set, so the job shows a nodelist."""
        job = self.job(job_id)
        if not job.active:
            raise ValueError(f"job {job_id} is {state_name(JobState, job.state)}, not active")
        job.allocated_nodes = list(job.dispatched_to)
        for name in job.allocated_nodes:
            self._refresh_node(name)
        return job

    def finish(self, job_id: int, state: int = slurm_pb2.JOB_COMPLETED) -> Job:
        if state not in TERMINAL:
            raise ValueError(f"{state_name(JobState, state)} is not a terminal state")
        job = self.job(job_id)
        if job.state in TERMINAL:
            raise ValueError(f"job {job_id} already ended {state_name(JobState, job.state)}")
        job.state = state
        job.end_time = self.clock.now()
        job.exit_code = 0 if state == slurm_pb2.JOB_COMPLETED else 1
        for name in job.allocated_nodes:
            self._refresh_node(name)
        return job

    def node_complete(
        self, job_id: int, node: str, exit_code: int, signal: int, run_attempt: int
    ) -> str:
        """spurctld's node_complete, for an agent's ReportJobStatus: raises NotFound for a job
        it does not track and ValueError for a node outside the job's allocation; answers
        "already-terminal", "stale-report" (a superseded run), "completing" or "all-done"."""
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        if job.state in TERMINAL:
            return "already-terminal"
        if run_attempt and job.run_attempt and run_attempt < job.run_attempt:
            return "stale-report"
        if node not in job.allocated_nodes:
            raise ValueError(f"node {node} is not allocated to job {job_id}")
        job.node_completions[node] = exit_code if not signal else 128 + signal
        if set(job.node_completions) < set(job.allocated_nodes):
            return "completing"
        failed = any(code != 0 for code in job.node_completions.values())
        self.finish(job_id, slurm_pb2.JOB_FAILED if failed else slurm_pb2.JOB_COMPLETED)
        return "all-done"

    def requeue(self, job_id: int) -> tuple[Job, list[str]]:
        """The run ends and the job waits again; returns the nodes the ended run was sent to."""
        job = self.job(job_id)
        if job.state in TERMINAL:
            raise ValueError(f"job {job_id} ended {state_name(JobState, job.state)}")
        previous = list(job.dispatched_to)
        job.state = slurm_pb2.JOB_PENDING
        job.end_time = None
        job.allocated_nodes = []
        job.dispatched_to = []
        for name in previous:
            self._refresh_node(name)
        return job, previous

    def evict(self) -> list[int]:
        """Forget finalized jobs that ended more than `retention` ago; the watermark stays."""
        cutoff = self.clock.now() - self.retention
        gone = [
            job.job_id
            for job in self.jobs.values()
            if job.finalized and job.end_time is not None and job.end_time < cutoff
        ]
        for job_id in gone:
            del self.jobs[job_id]
        return gone

    def wipe(self) -> None:
        """A controller that lost its state: no jobs, ids from the start, nodes unregistered."""
        self.jobs.clear()
        self.nodes.clear()
        self.next_job_id = self.first_job_id
        self.incarnation += 1

    def live_on(self, job_id: int, node: str) -> bool:
        """The controller believes this job's current run is on this node right now."""
        job = self.jobs.get(job_id)
        return job is not None and job.active and node in job.allocated_nodes

    def query(
        self,
        *,
        states: set[int] | None = None,
        job_ids: set[int] | None = None,
        nodes: set[str] | None = None,
        user: str = "",
        names: set[str] | None = None,
    ) -> list[Job]:
        found = []
        for job in sorted(self.jobs.values(), key=lambda j: j.job_id):
            if states and job.state not in states:
                continue
            if job_ids and job.job_id not in job_ids:
                continue
            if nodes and not nodes.intersection(job.allocated_nodes):
                continue
            if user and job.user != user:
                continue
            if names and job.name not in names:
                continue
            found.append(job)
        return found

    # ------------------------------------------------------------- nodes

    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise NotFound(f"node {name} not found") from None

    def register(self, name: str, reg: Registration, slurmd_start_time: float) -> Node:
        now = self.clock.now()
        node = self.nodes.get(name)
        if node is None:
            node = Node(name=name, boot_time=now)
            self.nodes[name] = node
        node.hostname = reg.hostname
        node.address = reg.address
        node.port = reg.port or DEFAULT_AGENT_PORT
        node.cpus, node.memory_mb, node.gpus = reg.cpus, reg.memory_mb, reg.gpus
        node.labels.update(reg.labels)
        node.slurmd_start_time = slurmd_start_time
        node.last_heartbeat = now
        if node.state == slurm_pb2.NODE_DOWN and node.state_reason == "Not responding":
            node.state_reason = ""
            node.state = slurm_pb2.NODE_IDLE
        self._refresh_node(name)
        return node

    def heartbeat(self, name: str, running_jobs: list[int]) -> Node:
        node = self.node(name)
        node.last_heartbeat = self.clock.now()
        node.last_running_jobs = list(running_jobs)
        if node.state in (slurm_pb2.NODE_DOWN, slurm_pb2.NODE_ERROR) and (
            node.state_reason == "Not responding"
        ):
            # spur #613: a node that talks again recovers from its current allocations.
            node.state = slurm_pb2.NODE_IDLE
            node.state_reason = ""
            self._refresh_node(name)
        return node

    def mark_unresponsive(self, timeout: float) -> list[str]:
        """The leader's health tick: nodes silent for longer than `timeout` go DOWN."""
        cutoff = self.clock.now() - timeout
        downed = []
        for node in self.nodes.values():
            if node.state in (slurm_pb2.NODE_DOWN, slurm_pb2.NODE_DRAIN):
                continue
            if node.last_heartbeat is not None and node.last_heartbeat < cutoff:
                node.state = slurm_pb2.NODE_DOWN
                node.state_reason = "Not responding"
                downed.append(node.name)
        return downed

    def mark_down(self, name: str, reason: str = "Not responding") -> Node:
        node = self.node(name)
        node.state = slurm_pb2.NODE_DOWN
        node.state_reason = reason
        return node

    def active_jobs_on(self, name: str) -> list[Job]:
        return [job for job in self.jobs.values() if job.active and name in job.allocated_nodes]

    def drain(self, name: str, reason: str) -> tuple[str, int]:
        node = self.node(name)
        running = len(self.active_jobs_on(name))
        node.state = slurm_pb2.NODE_DRAINING if running else slurm_pb2.NODE_DRAIN
        node.state_reason = reason
        actual = "draining" if running else "drained"
        self.drains.append(
            {"at": iso(self.clock.now()), "name": name, "reason": reason, "actual_state": actual}
        )
        return actual, running

    def update(
        self,
        name: str,
        state: int | None,
        reason: str | None,
        labels: dict[str, str],
        remove_labels: list[str],
    ) -> Node:
        if state is not None and state not in slurm_pb2.NodeState.values():
            raise ValueError(f"invalid node state {state}")
        node = self.node(name)
        self.updates.append(
            {
                "at": iso(self.clock.now()),
                "name": name,
                "state": None if state is None else state_name(NodeState, state),
                "reason": reason,
                "labels": dict(labels),
                "remove_labels": list(remove_labels),
            }
        )
        if state is not None:
            node.state = state
            if state == slurm_pb2.NODE_IDLE:
                # Resuming: derive the real state from what is allocated there.
                self._refresh_node(name, resume=True)
        if reason is not None:
            node.state_reason = reason
        node.labels.update(labels)
        for key in remove_labels:
            node.labels.pop(key, None)
        return node

    def _refresh_node(self, name: str, resume: bool = False) -> None:
        node = self.nodes.get(name)
        if node is None:
            return
        busy = bool(self.active_jobs_on(name))
        if node.state == slurm_pb2.NODE_DRAINING and not busy:
            node.state = slurm_pb2.NODE_DRAIN
        if node.state in _ADMIN_STATES and not resume:
            return
        node.state = slurm_pb2.NODE_ALLOCATED if busy else slurm_pb2.NODE_IDLE

    def to_json(self) -> dict[str, Any]:
        return {
            "incarnation": self.incarnation,
            "next_job_id": self.next_job_id,
            "first_job_id": self.first_job_id,
            "retention": self.retention,
            "jobs": [job.to_json() for job in sorted(self.jobs.values(), key=lambda j: j.job_id)],
            "nodes": [node.to_json() for node in self.nodes.values()],
            "drains": list(self.drains),
            "updates": list(self.updates),
        }
