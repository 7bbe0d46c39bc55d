"""What a campaign found: runs and faults by family, the auditor's findings, the secrets scan.

The figures a campaign prints, in one place, so the text report, the JSON file and the test
read the same numbers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

# The auditor's finding kinds; each one's goal is zero.
LEAK = "leak"
ZOMBIE = "zombie-phone-home"
WRONGFUL_KILL = "wrongful-kill"
DUPLICATE_WRITE = "duplicate-write"
FINDING_KINDS = (LEAK, ZOMBIE, WRONGFUL_KILL, DUPLICATE_WRITE)
# Run statuses of a run the campaign could not finish driving (a step never seen in time).
UNDRIVEN = ("ERROR", "TIMED_OUT")


@dataclass(frozen=True)
class Finding:
    kind: str
    family: str
    # What was found, e.g. "queued_resource/s-1 (ACTIVE), owner tpu-bootstrap-s-1: FAILED".
    what: str


@dataclass
class RunOutcome:
    family: str
    label: str
    faults: tuple[str, ...]
    # The workflow that owned the run (its id), and how it closed: COMPLETED, FAILED, ...
    workflow_id: str
    status: str
    detail: str = ""


@dataclass
class Report:
    seed: int
    runs: list[RunOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # Histories read by the secrets scan, and every secret found in one (goal: none).
    histories_scanned: int = 0
    # The same by family (the dev-server restart's runs are in the total only).
    histories_by_family: dict[str, int] = field(default_factory=dict)
    secrets_found: list[str] = field(default_factory=list)
    # Faults injected outside any one run (a dev-server restart), by kind.
    campaign_faults: Counter[str] = field(default_factory=Counter)
    # Worker kills performed by family (fewer than worker-kill runs: runs share a kill).
    worker_kills: dict[str, int] = field(default_factory=dict)
    # Property tests run by the long version: name -> {"cases", "examples", "batch",
    # "seed", "passed", "seconds", "summary"}.
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    # The command that replays this campaign: the seed with every count and option it ran.
    replay: str = ""

    def replay_command(self) -> str:
        return self.replay or f"python bench/campaign.py --seed {self.seed}"

    def runs_by_family(self) -> dict[str, int]:
        return dict(Counter(run.family for run in self.runs))

    def outcomes_by_family(self) -> dict[str, dict[str, int]]:
        found: dict[str, Counter[str]] = {}
        for run in self.runs:
            found.setdefault(run.family, Counter())[run.status] += 1
        return {family: dict(counts) for family, counts in found.items()}

    def faults_by_kind(self) -> dict[str, int]:
        counts: Counter[str] = Counter(self.campaign_faults)
        for run in self.runs:
            counts.update(f for f in run.faults if f != "none")
        return dict(sorted(counts.items()))

    def count(self, kind: str) -> int:
        return sum(1 for finding in self.findings if finding.kind == kind)

    def undriven(self) -> list[RunOutcome]:
        """Runs the campaign could not drive to their end: not evidence of a leak, but no
        evidence of anything either."""
        return [run for run in self.runs if run.status in UNDRIVEN]

    @property
    def clean(self) -> bool:
        return not self.findings and not self.secrets_found and not self.undriven()

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "runs_by_family": self.runs_by_family(),
            "outcomes_by_family": self.outcomes_by_family(),
            "faults_by_kind": self.faults_by_kind(),
            "worker_kills_performed": self.worker_kills,
            "leaks": self.count(LEAK),
            "zombie_phone_homes": self.count(ZOMBIE),
            "wrongful_kills": self.count(WRONGFUL_KILL),
            "duplicate_writes": self.count(DUPLICATE_WRITE),
            "undriven_runs": len(self.undriven()),
            "findings": [asdict(f) for f in self.findings],
            "histories_scanned": self.histories_scanned,
            "histories_by_family": self.histories_by_family,
            "secrets_found": self.secrets_found,
            "properties": self.properties,
            "replay": self.replay_command(),
            "runs": [asdict(run) for run in self.runs],
        }

    def text(self) -> str:
        lines = [f"campaign seed {self.seed} ({self.seconds:.0f} s)"]
        outcomes = self.outcomes_by_family()
        for family, runs in self.runs_by_family().items():
            shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes[family].items()))
            lines.append(f"  runs {family:<8} {runs:>6}  ({shown})")
        lines.append("  faults injected by kind:")
        for kind, n in self.faults_by_kind().items():
            lines.append(f"    {kind:<24} {n:>6}")
        kills = ", ".join(f"{k} {v}" for k, v in self.worker_kills.items())
        lines.append(f"  worker kills performed: {kills}")
        lines += [
            f"  leaks                    {self.count(LEAK):>6}  (goal 0)",
            f"  zombie phone-homes       {self.count(ZOMBIE):>6}  (goal 0)",
            f"  wrongful kills           {self.count(WRONGFUL_KILL):>6}  (goal 0)",
            f"  records written twice    {self.count(DUPLICATE_WRITE):>6}  (goal 0)",
            f"  runs not driven to an end {len(self.undriven()):>5}  (goal 0)",
            f"  histories scanned        {self.histories_scanned:>6}, "
            f"secrets found {len(self.secrets_found)} (goal 0)",
        ]
        if self.histories_by_family:
            by = ", ".join(f"{k} {v}" for k, v in self.histories_by_family.items())
            lines.append(f"    by family: {by}")
        for name, figures in self.properties.items():
            verdict = "passed" if figures["passed"] else "FAILED"
            lines.append(
                f"  property {name}: {figures['cases']:,} cases "
                f"({figures['examples']:,} examples of {figures['batch']}), {verdict} "
                f"({figures['seconds']:.0f} s)"
            )
            # The assertion it failed on; the whole report is in the JSON's "failure".
            errors = [line for line in figures.get("failure", []) if line.startswith("E ")]
            lines += [f"    {line}" for line in errors[:5]]
        for finding in self.findings:
            lines.append(f"  ! {finding.kind} [{finding.family}] {finding.what}")
        for run in self.undriven():
            lines.append(f"  ! {run.status} {run.label} {','.join(run.faults)}: {run.detail}")
        for secret in self.secrets_found:
            lines.append(f"  ! secret in history: {secret}")
        lines.append(f"  replay: {self.replay_command()}")
        return "\n".join(lines)
