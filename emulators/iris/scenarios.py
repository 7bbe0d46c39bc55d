"""The scenarios a launched job can play: the contract's named cases as rows of settings.

A scenario is a `kind` (which story the job tells; timeline.py plays it) plus the knobs that
shape it: stages, pool size, log format and noise, CPU rates, and when its turn comes. Times
are scenario seconds counted from the launch. A YAML file (`--scenario-file`) can add named
variants: `scenarios: {my-case: {kind: stragglers, workers: 16, event_for: 3600}}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

Kind = Literal[
    "healthy",
    "zombie-coordinator",
    "killed-retry",
    "stuck-stage",
    "stragglers",
    "oom-straggler",
    "repeated-failure",
    "rpc-timeouts",
    "terminated-by-user",
    "cpu-bound-quiet",
    "hung-busy",
    "dead-worker",
    "preempted",
]
# oldest: `[stage] ...`; later: `[exec] [stage] ...; items=...`; newest: `[exec] [stage] ... .`
LogFormat = Literal["oldest", "later", "newest"]
# LogEntry.level as the old string ("INFO") or the newer LogLevel enum ("LOG_LEVEL_INFO").
LevelStyle = Literal["string", "enum"]
# never: the session counter is the container's true total; every-read: each read sees a
# fresh, smaller scope (the false-stall bug's fresh SSH session per tick).
SessionReset = Literal["never", "every-read"]
# readable: `cat /proc/[0-9]*/stat` lists the container's processes; denied: it fails (exit 1,
# nothing printed) while `ps` still answers the session total (a hardened container whose
# /proc is masked): the split that leaves keeper the session total alone.
ProcStat = Literal["readable", "denied"]


class Stage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    shards: int = Field(ge=1)
    seconds: float = Field(gt=0)


DEFAULT_STAGES: tuple[Stage, ...] = (
    Stage(name="stage0-Map → Shuffle", shards=1000, seconds=600),
    Stage(name="stage1-Reduce → Scatter", shards=200, seconds=300),
    Stage(name="stage2-Write", shards=50, seconds=120),
)


class Scenario(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    kind: Kind
    summary: str = ""
    stages: tuple[Stage, ...] = Field(default=DEFAULT_STAGES, min_length=1)
    workers: int = Field(default=8, ge=1, le=256)
    # Sequential pipelines (execute() calls): each gets its own children, p0, p1, ...
    # Played by the healthy kinds (healthy, cpu-bound-quiet, rpc-timeouts, ...).
    pipelines: int = Field(default=1, ge=1, le=8)
    # Noise lines (pull_task, report_result, ...) per progress line.
    noise_ratio: int = Field(default=20, ge=0, le=200)
    # Scenario seconds between two progress lines of the coordinator.
    progress_interval: float = Field(default=1.5, gt=0)
    # Seconds between progress lines once the coordinator goes quiet (cpu-bound-quiet).
    quiet_interval: float | None = Field(default=None, gt=0)
    log_format: LogFormat = "later"
    level_style: LevelStyle = "string"
    # From launch until the children's tasks are RUNNING.
    startup: float = Field(default=10.0, ge=0)
    worker_cores: float = Field(default=4.0, ge=0)
    coord_cores: float = Field(default=0.3, ge=0)
    # When the scenario's turn comes (seconds after launch) and how long it lasts.
    event_at: float = Field(default=300.0, ge=0)
    event_for: float = Field(default=600.0, ge=0)
    session_reset: SessionReset = "never"
    proc_stat: ProcStat = "readable"
    # The job was launched this long before it appears (hung-busy: already busy for hours).
    backdate: float = Field(default=0.0, ge=0)
    # The job waits this long in the queue (PENDING, no children) before its timeline starts.
    queued: float = Field(default=0.0, ge=0)
    # repeated-failure: task errors a shard may have, and the gap between two of them;
    # oom-straggler: one turn of the OOM loop (the shard runs, runs out of memory, waits).
    max_task_errors: int = Field(default=3, ge=1)
    failure_gap: float = Field(default=60.0, gt=0)
    # killed-retry: from the killed workers to the next attempt's children; oom-straggler:
    # how long the shard waits in the queue after each OOM (less than failure_gap).
    retry_delay: float = Field(default=30.0, ge=0)
    # preempted: how often the job's slice is reclaimed (from event_at, failure_gap apart),
    # and the job's max_retries_preemption: a preemption within it puts the job's task back
    # to PENDING (for retry_delay, then a new attempt), the one past it leaves it PREEMPTED.
    preemptions: int = Field(default=2, ge=1, le=8)
    max_retries_preemption: int = Field(default=1, ge=0, le=100)
    # Plain one-task child jobs besides the pipeline's (`<job>/shard-00000`, ...): they
    # appear right after the pipeline's children and end one by one as its stages run.
    extra_children: int = Field(default=0, ge=0, le=20_000)

    @model_validator(mode="after")
    def _an_oom_loop_runs_before_it_waits(self) -> Scenario:
        if self.kind == "oom-straggler" and self.retry_delay >= self.failure_gap:
            raise ValueError("oom-straggler needs retry_delay < failure_gap (the shard runs)")
        return self

    @model_validator(mode="after")
    def _a_preempted_job_retries_at_most_once(self) -> Scenario:
        if self.kind != "preempted":
            return self
        if min(self.preemptions, self.max_retries_preemption) > 1:
            # A plan names two attempts (a0, a1): one retry.
            raise ValueError("preempted retries at most once: preemptions or the budget <= 1")
        if self.retry_delay >= self.failure_gap:
            raise ValueError("preempted needs retry_delay < failure_gap (the retry runs)")
        return self

    @property
    def pipeline_seconds(self) -> float:
        return sum(stage.seconds for stage in self.stages)


def _row(kind: Kind, summary: str, name: str = "", **knobs: Any) -> Scenario:
    """A builtin scenario, named after its kind unless `name` says otherwise."""
    return Scenario(name=name or kind, kind=kind, summary=summary, **knobs)


# The contract's scenarios. Timings assume the default 60x speed: 1 wall second = 1 minute.
BUILTIN: tuple[Scenario, ...] = (
    _row("healthy", "three stages advance to SUCCEEDED"),
    _row(
        "zombie-coordinator",
        "the pipeline exits mid-stage; the coordinator lingers RUNNING, idle in _worker",
        event_at=400,
    ),
    _row(
        "killed-retry",
        "workers KILLED, a new attempt (new hash, a1) runs healthy; the a0 coordinator is stale",
        event_at=300,
    ),
    _row(
        "stuck-stage",
        "stage1's done count stops; workers' CPU flat; the coordinator waits on the stage",
        event_at=700,
    ),
    _row(
        "stragglers",
        "999/1000 complete, 1 in-flight, 0 queued for 8 hours, then the stage completes",
        event_for=8 * 3600,
    ),
    _row(
        "oom-straggler",
        "4999/5000: the last shard runs out of memory, waits queued, runs again, for 8 hours",
        stages=(Stage(name="stage0-Embed → Write", shards=5000, seconds=600),),
        workers=32,
        event_for=8 * 3600,
        failure_gap=300,
        retry_delay=120,
    ),
    _row(
        "repeated-failure",
        "one shard fails with the same traceback until the cap; the job FAILED",
        event_at=200,
    ),
    _row(
        "rpc-timeouts",
        "the controller hangs, then answers unavailable, then recovers; the job is healthy",
        event_at=120,
        event_for=240,
    ),
    _row(
        "terminated-by-user",
        "KILLED 'Terminated by user'; the cause is a worker's CUDA OOM traceback",
        event_at=250,
    ),
    _row(
        "healthy",
        "a short healthy job that completes within about two wall seconds",
        name="finish-while-down",
        stages=(Stage(name="stage0-Map → Write", shards=100, seconds=90),),
        startup=5,
    ),
    _row(
        "healthy",
        "healthy, two pipelines in a row: p0's children succeed, then p1's appear",
        name="two-pipelines",
        stages=(
            Stage(name="stage0-Map → Shuffle", shards=200, seconds=120),
            Stage(name="stage1-Write", shards=20, seconds=60),
        ),
        pipelines=2,
    ),
    _row(
        "cpu-bound-quiet",
        "healthy, 20 cores per worker, a progress line every 40 minutes, session resets",
        stages=(Stage(name="stage0-Tokenize → Write", shards=64, seconds=3 * 3600),),
        worker_cores=20.0,
        noise_ratio=0,
        quiet_interval=2400,
        session_reset="every-read",
        event_at=60,
    ),
    _row(
        "hung-busy",
        "workers burned 20 cores for 3 hours, then hung between stages; CPU flat",
        stages=(
            Stage(name="stage0-Map → Shuffle", shards=5000, seconds=3 * 3600 - 11),
            Stage(name="stage1-Reduce → Scatter", shards=500, seconds=3600),
        ),
        worker_cores=20.0,
        noise_ratio=0,
        event_at=3 * 3600,
        backdate=3 * 3600 + 600,
    ),
    _row(
        "dead-worker",
        "after 2 minutes: exec and profile fail, no new log lines, tasks still RUNNING",
        event_at=120,
    ),
    _row(
        "preempted",
        "preempted twice: PENDING again while the budget lasts, then PREEMPTED for good",
        event_at=200,
        failure_gap=300,
        retry_delay=30,
        preemptions=2,
        max_retries_preemption=1,
    ),
)
SCENARIOS: Mapping[str, Scenario] = {s.name: s for s in BUILTIN}
DEFAULT_SCENARIO = "healthy"


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The scenario LaunchJob plays when nobody chose one.
    default: str | None = None
    # name -> a builtin's knobs overridden; `kind` (or `base`, a scenario name) picks it.
    scenarios: dict[str, dict[str, Any]] = Field(default_factory=dict)


def variant(base: Scenario, name: str, overrides: Mapping[str, Any]) -> Scenario:
    """`base` under a new name with some knobs changed; ValidationError on a bad knob."""
    merged = {**base.model_dump(), **dict(overrides), "name": name}
    return Scenario.model_validate(merged)


def load_scenario_file(path: str | Path) -> tuple[dict[str, Scenario], str | None]:
    """The builtins plus the file's variants, and the file's default scenario name."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    spec = ScenarioFile.model_validate(raw)
    table: dict[str, Scenario] = dict(SCENARIOS)
    for name, knobs in spec.scenarios.items():
        knobs = dict(knobs)
        base_name = knobs.pop("base", None) or knobs.get("kind") or name
        if base_name not in table:
            raise ValueError(f"scenario {name!r}: no scenario {base_name!r} to start from")
        table[name] = variant(table[base_name], name, knobs)
    if spec.default is not None and spec.default not in table:
        raise ValueError(f"default scenario {spec.default!r} is not defined")
    return table, spec.default
