"""What a reclaim shows in the Temporal UI (current details) and in `keeper reclaim status`."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.common.untrusted import md_text
from keeper.domain.reclaim.calls import Assessment
from keeper.domain.reclaim.evidence import ReleaseTally
from keeper.domain.reclaim.models import Holding
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.steps import Mode, Step


class ReclaimView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    holding: Holding
    step: Step = Step.ASSESS
    mode: Mode = Mode.OBSERVE
    attempts: int = 0
    # What keeper did (act) or would have done (observe), newest last, bounded.
    actions: list[str] = Field(default_factory=list)
    tally: ReleaseTally = Field(default_factory=ReleaseTally)
    drained: bool = False
    attention: str = ""
    last: Assessment | None = None
    # Cancels that may have reached the agent (keeper's send ledger, answers lost to a crash
    # included); None until the first cancel call answered.
    cancels_sent: int | None = None


MAX_ACTIONS = 8


def _at(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def render_details(view: ReclaimView, policy: ReclaimPolicy) -> str:
    h = view.holding
    sent = view.attempts if view.cancels_sent is None else view.cancels_sent
    lines = [
        f"**{h.node}** holds job **{h.job_id}** (incarnation {h.incarnation}, first seen "
        f"{_at(h.first_seen)})",
        f"step: {view.step.value} · mode: {view.mode.value} · cancels sent: {sent}",
    ]
    if view.attention:
        lines.append(f"ATTENTION: {md_text(view.attention)}")
    if view.last is not None:
        d = view.last.decision
        lines.append(f"verdict: {d.verdict.value} ({d.reason.value}): {md_text(d.detail)}")
        job = (
            f"job {d.job.job_id} {d.job.state.name} nodes [{md_text(d.job.nodelist)}]"
            if d.job is not None
            else "job not tracked"
        )
        node = view.last.node
        lines.append(
            f"controller at {_at(view.last.read_at)}: {job}; "
            f"watermark {d.watermark}, epoch {d.epoch}; node {md_text(node.name)} "
            f"{node.state}" + (f" ({md_text(node.reason)})" if node.reason else "")
        )
        if view.last.listed_at is not None:
            lines.append(
                f"its agent last listed the job at {_at(view.last.listed_at)} "
                f"(keeper's memory, as of {_at(view.last.read_at)})"
            )
    t = view.tally
    last = f"; last heard: {t.last.value} at {_at(t.last_at)}" if t.last and t.last_at else ""
    evidence = f"{t.absent_in_a_row}/{policy.release_beats} heartbeats listing other jobs"
    if t.idle_in_a_row:
        evidence += (
            f", {t.idle_in_a_row}/{policy.idle_release_beats} empty ones while the node "
            "runs nothing"
        )
    lines.append(f"release evidence: {evidence}{last}")
    if view.drained:
        lines.append("node drained by keeper until the agent releases the job")
    lines.extend(f"- {md_text(a)}" for a in view.actions[-MAX_ACTIONS:])
    return "\n".join(lines)
