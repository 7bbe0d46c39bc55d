"""What one node agent holds and how it answers CancelJob, following spurd. No I/O.

An agent tracks each job by id with the run_attempt it was launched with (0 for an
allocation-only salloc entry). CancelJob carries only (job_id, signal), so the one fence
the agent has is the delayed SIGKILL's re-check of that run_attempt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from emulators.clock import iso

HoldingKind = Literal["process", "allocation"]
ContentionMode = Literal["off", "empty", "partial"]
SIGKILL = 9
SIGTERM = 15


@dataclass
class Holding:
    job_id: int
    run_attempt: int
    kind: HoldingKind
    # "running", or "terminating" once a SIGTERM (or other signal) was delivered.
    status: str = "running"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CancelRecord:
    """One CancelJob as the agent received it, and what it did about it."""

    at: float
    node: str
    hostname: str
    job_id: int
    signal: int
    # The attempt the agent held for this id when the cancel arrived (None: not held).
    run_attempt: int | None
    # The controller had this job active with this node in its allocation at receipt.
    live_here: bool
    # dropped | sigterm | sigkill | signal | nothing | ignored (a timed-out cancel that did not act)
    action: str
    # What the delayed step did: sigkill | spared | terminated | None while pending or n/a.
    followup: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "at": iso(self.at)}


@dataclass
class Knobs:
    contention: ContentionMode = "off"
    # partial mode leaves these ids out; empty means every second holding.
    omit: list[int] = field(default_factory=list)
    # CancelJob sleeps this long before answering (longer than the caller's deadline).
    cancel_delay: float = 0.0
    # Whether a delayed cancel still does its work (it acts at once, the answer is late).
    cancel_acts: bool = True
    down: bool = False
    # Whether the agent's completion report (ReportJobStatus, after it reaps a killed
    # process) reaches the controller; off: spurd gave up reporting (controller unreachable).
    reports: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AgentState:
    # The controller's name for the physical node this agent runs on.
    node: str
    # What the agent calls itself in RegisterAgent and Heartbeat (may differ in case/domain).
    hostname: str
    boot_time: float
    cpus: int = 64
    memory_mb: int = 512_000
    gpus: int = 8
    holdings: dict[int, Holding] = field(default_factory=dict)
    knobs: Knobs = field(default_factory=Knobs)
    cancels: list[CancelRecord] = field(default_factory=list)
    restarts: int = 0

    def hold(self, job_id: int, run_attempt: int, kind: HoldingKind = "process") -> Holding:
        # Allocation-only entries carry run_attempt 0 in spurd, whatever the controller's epoch.
        attempt = 0 if kind == "allocation" else run_attempt
        holding = Holding(job_id, attempt, kind)
        self.holdings[job_id] = holding
        return holding

    def release(self, job_id: int) -> bool:
        return self.holdings.pop(job_id, None) is not None

    def reported(self) -> list[int]:
        """The job ids the next heartbeat carries, after contention."""
        held = sorted(self.holdings)
        if self.knobs.contention == "empty":
            return []
        if self.knobs.contention == "partial":
            if self.knobs.omit:
                return [job_id for job_id in held if job_id not in self.knobs.omit]
            return held[::2]
        return held

    def receive_cancel(
        self, job_id: int, signal: int, live_here: bool, now: float, act: bool = True
    ) -> CancelRecord:
        """Apply spurd's CancelJob. A record whose action is sigterm or signal needs the
        delayed step (`after_grace`)."""
        held = self.holdings.get(job_id)
        record = CancelRecord(
            at=now,
            node=self.node,
            hostname=self.hostname,
            job_id=job_id,
            signal=signal,
            run_attempt=None if held is None else held.run_attempt,
            live_here=live_here,
            action="nothing",
        )
        self.cancels.append(record)
        if not act:
            record.action = "ignored"
        elif held is None:
            record.action = "nothing"
        elif held.kind == "allocation":
            del self.holdings[job_id]
            record.action = "dropped"
        elif signal <= 0:
            held.status = "terminating"
            record.action = "sigterm"
        elif signal == SIGKILL:
            del self.holdings[job_id]
            record.action = "sigkill"
        else:
            held.status = "terminating"
            record.action = "signal"
        return record

    def after_grace(self, record: CancelRecord) -> str:
        """The delayed step, guarded like spurd: only the same job id with the same attempt."""
        held = self.holdings.get(record.job_id)
        if held is None or held.run_attempt != record.run_attempt:
            record.followup = "spared"
        else:
            del self.holdings[record.job_id]
            record.followup = "sigkill" if record.action == "sigterm" else "terminated"
        return record.followup

    def fresh(self, now: float) -> AgentState:
        """The same node's agent as it starts: nothing held, knobs off, no records."""
        return AgentState(self.node, self.hostname, now, self.cpus, self.memory_mb, self.gpus)

    def restart(self, now: float, keep_holdings: bool) -> None:
        self.boot_time = now
        self.restarts += 1
        if not keep_holdings:
            self.holdings.clear()

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "hostname": self.hostname,
            "boot_time": iso(self.boot_time),
            "restarts": self.restarts,
            "holdings": [self.holdings[job_id].to_json() for job_id in sorted(self.holdings)],
            "knobs": self.knobs.to_json(),
        }
