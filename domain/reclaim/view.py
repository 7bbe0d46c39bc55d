"""What a reclaim shows in the Temporal UI (current details) and in `keeper reclaim status`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from domain.common.untrusted import md_text
from domain.reclaim.calls import Assessment
from domain.reclaim.evidence import ReleaseTally
from domain.reclaim.models import Holding
from domain.reclaim.steps import Mode, Step


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


MAX_ACTIONS = 8


def render_details(view: ReclaimView, release_beats: int) -> str:
    h = view.holding
    lines = [
        f"**{h.node}** holds job **{h.job_id}** (incarnation {h.incarnation}, first seen "
        f"{h.first_seen.isoformat(timespec='seconds')})",
        f"step: {view.step.value} · mode: {view.mode.value} · cancels sent: {view.attempts}",
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
            f"controller at {view.last.read_at.isoformat(timespec='seconds')}: {job}; "
            f"watermark {d.watermark}, epoch {d.epoch}; node {md_text(node.name)} "
            f"{node.state}" + (f" ({md_text(node.reason)})" if node.reason else "")
        )
    t = view.tally
    last = f", last {t.last.value} at {t.last_at.isoformat(timespec='seconds')}" if t.last else ""
    lines.append(
        f"release evidence: {t.absent_in_a_row}/{release_beats} heartbeats without it{last}"
    )
    if view.drained:
        lines.append("node drained by keeper until the agent releases the job")
    lines.extend(f"- {md_text(a)}" for a in view.actions[-MAX_ACTIONS:])
    return "\n".join(lines)
