"""Messages between the bootstrap workflows, their activities and their callers.

Everything here crosses the Temporal boundary through the pydantic data converter, so it
holds names, states and timings only: never credentials.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.common.durations import SecondsDuration
from keeper.domain.tpu import naming
from keeper.domain.tpu.naming import SLICE_NAME_PATTERN
from keeper.domain.tpu.observation import VmEndpoint
from keeper.domain.tpu.phases import Phase
from keeper.domain.tpu.slice_request import PROJECT_PATTERN, ZONE_PATTERN, SliceRequest


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True)


class Owner(_Message):
    """The workflow run whose resources these are; written into every label set."""

    workflow_id: str
    run_id: str


class SliceRef(_Message):
    """Where a slice's cloud resources live, derived from the request alone."""

    project: str
    zone: str
    slice_name: str
    queued: bool
    node_ids: list[str]

    @classmethod
    def of(cls, request: SliceRequest) -> SliceRef:
        return cls(
            project=request.project,
            zone=request.zone,
            slice_name=request.slice_name,
            queued=request.capacity.queued,
            node_ids=naming.node_ids(request.slice_name, request.node_count),
        )


class CreateSliceInput(_Message):
    request: SliceRequest
    owner: Owner
    request_id: str
    valid_until: SecondsDuration  # server-side backstop = the assign budget


class CreateOutcome(_Message):
    created: bool  # False: it already existed and is ours (a retried create)
    name: str


class ObserveInput(_Message):
    slice: SliceRef
    expected_vms: int
    last_key: str
    phase: Phase
    # The last look at a phase's deadline: return whatever is seen, progress or not.
    final: bool = False


class HealthCheckInput(_Message):
    targets: list[VmEndpoint]
    port: int
    path: str
    last_bucket: int = -1


class VmFailure(_Message):
    node: str
    index: int
    ip: str
    reason: str


class HealthReport(_Message):
    total: int
    healthy: int
    failing: list[VmFailure] = []
    round_seconds: float = 0.0

    @property
    def all_healthy(self) -> bool:
        return self.total > 0 and self.healthy == self.total


class DeleteSliceInput(_Message):
    slice: SliceRef
    owner_workflow_id: str
    # None deletes whatever any run of the owner workflow created (teardown, sweeper).
    owner_run_id: str | None = None
    reason: str


class CompensationPolicy(_Message):
    """When a compensation that has not finished reads as stuck (it goes on regardless)."""

    stuck_after: SecondsDuration


class SweepPolicy(_Message):
    # Each orphan's deletion in a pass, and how many run at once.
    delete_timeout: SecondsDuration
    max_concurrent_deletes: int = Field(ge=1)


class HealthPolicy(_Message):
    """What a health round's time limit is derived from (domain/tpu/health_round.py)."""

    probe_timeout: SecondsDuration
    in_flight: int = Field(ge=1)


class TpuPolicy(_Message):
    """The worker's TPU settings a workflow follows: the `tpu.policy` local activity returns
    them at the start of each run, so a settings change reaches a running workflow at its
    next run and a run started outside the CLI follows the deployment's settings."""

    compensation: CompensationPolicy
    sweep: SweepPolicy
    # None in the policy a run read from a worker that predates it.
    health: HealthPolicy | None = None


# What a compensation counts (runtime/metrics.py COMPENSATIONS): its start, its end, and
# the moment it turned stuck.
CompensationEvent = Literal["started", "finished", "stuck"]


class CompensationProgress(_Message):
    """Where a compensation stands between its bounded windows of delete attempts."""

    started_at: datetime
    window: SecondsDuration  # what the next window's length doubles from, up to a cap
    window_ends_at: datetime  # its planned end (domain/common/compensation.py)
    windows_ended: int = 0  # windows that ran out before the resources were gone
    last_error: str | None = None
    stuck_since: datetime | None = None

    @property
    def stuck(self) -> bool:
        return self.stuck_since is not None


class DeletionReport(_Message):
    deleted: list[str] = []
    already_gone: list[str] = []
    not_ours: list[str] = []
    # Of `deleted`: those an earlier attempt sent the delete for, before it was cut short
    # (a killed worker); the attempt that reported found them gone.
    deleted_earlier: list[str] = []


class PhaseTiming(_Message):
    phase: Phase
    started_at: datetime
    ended_at: datetime | None = None
    deadline_at: datetime | None = None

    @property
    def seconds(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


class BootstrapStatus(_Message):
    """What the `status` query, the CLI progress view and the UI details show."""

    slice_name: str
    zone: str
    capacity: str
    phase: Phase
    phase_deadline_at: datetime | None = None
    qr_state: str | None = None
    nodes_expected: int = 0
    nodes_ready: int = 0
    vms_expected: int = 0
    vms_with_ip: int = 0
    vms_healthy: int = 0
    failing_vms: list[VmFailure] = []
    timings: list[PhaseTiming] = []
    error: str | None = None
    compensation: str | None = None
    updated_at: datetime | None = None
    # Progress signals can arrive out of order; the receiver keeps the highest revision.
    revision: int = 0
    # A compensation that has not finished within bootstrap.compensation_stuck_after.
    compensation_started_at: datetime | None = None
    compensation_stuck: bool = False
    compensation_stuck_since: datetime | None = None
    compensation_last_error: str | None = None
    # The phase a failed or cancelled bootstrap was in when it stopped (None before that).
    failed_phase: Phase | None = None
    # What the phase child deleted itself when it was cancelled (its own report), so the
    # supervisor can say who deleted what.
    child_compensation: DeletionReport | None = None
    # Health: the number of VMs failing in the last round, when `failing_vms` is cut short.
    vms_failing: int | None = None

    @classmethod
    def initial(cls, request: SliceRequest) -> BootstrapStatus:
        return cls(
            slice_name=request.slice_name,
            zone=request.zone,
            capacity=request.capacity.value,
            phase=Phase.SUBMIT,
            nodes_expected=request.node_count,
            vms_expected=request.expected_vms,
        )


class BootstrapResult(_Message):
    slice_name: str
    capacity: str
    queued_resource: str | None
    nodes: list[str]
    vms: list[VmEndpoint]
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    total_seconds: float = 0.0


class BootstrapFailure(_Message):
    """Details of a failed bootstrap, carried by its ApplicationError."""

    phase: Phase
    # "deadline", "terminal", "error", "cancelled", "terminated", "timeout", or "taken" (the
    # name belongs to another run, whose resources are left alone)
    kind: str
    message: str
    failing_vms: list[VmFailure] = []
    compensation: DeletionReport | None = None
    # What compensation did, in words (domain/tpu/outcome.py); the supervisor sets it when it
    # closes the bootstrap (None on the phase child's own failure, which it reports).
    cleanup: str | None = None
    # Whether the phase child deleted the slice itself (when cancelled).
    compensated_by_child: bool = False


class SupervisorState(_Message):
    """All a supervisor knows; changed only by domain/tpu/transitions.py, carried whole
    across continue-as-new during a long compensation.

    The owner is the run that created the resources: their labels name it, so every later
    run checks ownership against it, not against its own run id.
    """

    owner: Owner
    status: BootstrapStatus
    # Set once the phases did not complete: the supervisor owns the final state from there,
    # and progress signals of its phase child no longer count.
    final: bool = False
    # Why the phases did not complete, and whether a cancel ended them; the cancel that
    # arrives while compensation runs is `cancel_seen` (it closes the bootstrap cancelled).
    failure: BootstrapFailure | None = None
    cancelled: bool = False
    cancel_seen: bool = False
    # Where its compensation stands between windows (None until one has ended).
    progress: CompensationProgress | None = None


class PhaseRunState(_Message):
    """All a phase child knows; changed only by domain/tpu/transitions.py, carried whole
    (its input's `carry`) when a long cancel-path compensation continues as new."""

    status: BootstrapStatus
    # A progress signal found the supervisor gone (terminated), in this run or one before:
    # this child's own compensation is then the only one, and the child counts it.
    orphaned: bool = False
    # Which of its compensation's events are counted already ("started", "stuck"), in the
    # order counted: by this child as an orphan, or (stuck) by its supervisor, which took the
    # stuck status. Each is counted once across every run of the child.
    counted: tuple[CompensationEvent, ...] = ()
    progress: CompensationProgress | None = None


class BootstrapRunInput(_Message):
    request: SliceRequest
    owner: Owner
    request_id: str
    parent_workflow_id: str
    # Set by a supervisor that takes only its own child's progress: the child then reports
    # with ChildProgress, which names it. A supervisor started before knows only the bare
    # status signal, so its child sends that.
    name_the_supervisor: bool = False
    # Set only by the child itself, when its compensation continues as new.
    carry: PhaseRunState | None = None


class ChildProgress(_Message):
    """A phase child's status, naming the supervisor it reports to (the supervisor's owner)."""

    status: BootstrapStatus
    supervisor: Owner


class TeardownState(_Message):
    """All a teardown knows; carried whole across continue-as-new while its delete is stuck."""

    # A cancel arrived: the delete goes on, and the teardown then closes as cancelled.
    cancel_seen: bool = False
    # What the delete did, or why it has not yet: shown in the details.
    deletion: str | None = None
    progress: CompensationProgress | None = None


class TeardownRequest(_Message):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slice_name: str = Field(pattern=SLICE_NAME_PATTERN)
    project: str = Field(pattern=PROJECT_PATTERN)
    zone: str = Field(pattern=ZONE_PATTERN)
    node_count: int = Field(default=1, ge=1, le=64, strict=True)
    reason: str = "operator teardown"


class OwnedResource(_Message):
    kind: str  # "queued_resource" | "node"
    id: str
    name: str
    state: str
    owner_workflow_id: str
    owner_run_id: str | None


class SweepRequest(_Message):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # The configured location; every other one keeper has bootstrapped in is found from
    # its workflows' Zone search attribute and project memo.
    project: str = Field(pattern=PROJECT_PATTERN)
    zone: str = Field(pattern=ZONE_PATTERN)
    dry_run: bool = Field(default=False, strict=True)


class SweepLocation(_Message):
    project: str
    zone: str

    def __str__(self) -> str:
        return f"{self.project}/{self.zone}"


class SweepCandidate(_Message):
    resource: OwnedResource
    owner_status: str  # a WorkflowExecutionStatus name, or NOT_FOUND
    project: str | None = None
    zone: str | None = None
    owner_closed_at: datetime | None = None
    # The latest tpu-teardown-<slice> run that started after the owner closed, if any.
    teardown_status: str | None = None


class SweepSurvey(_Message):
    """One pass's view: every location, every labelled resource and its owner's state."""

    locations: list[SweepLocation]
    candidates: list[SweepCandidate]
    errors: list[str] = []


class SweepReport(_Message):
    examined: int
    deleted: list[str] = []
    kept: list[str] = []
    unknown_owner: list[str] = []
    dry_run: bool = False
    # Orphans whose deletion did not finish within sweeper.delete_timeout, with the error.
    failed: list[str] = []
    # Locations that could not be listed, or owners that could not be looked up.
    errors: list[str] = []
    locations: list[str] = []
