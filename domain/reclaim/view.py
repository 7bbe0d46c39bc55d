"""What a reclaim shows: the `status` query's view, the current details in the Temporal UI
(and `keeper reclaim status`), and the alert of a drain, each rendered from the run's state by
a pure function."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from keeper.domain.common.alerts import Alert, AlertKind, make_alert
from keeper.domain.common.untrusted import md_text
from keeper.domain.reclaim.calls import Assessment, DrainResult, OperatorRelease
from keeper.domain.reclaim.evidence import ReleaseTally
from keeper.domain.reclaim.models import Holding
from keeper.domain.reclaim.policy import ReclaimPolicy
from keeper.domain.reclaim.state import MAX_ACTIONS, Drain, ReclaimState
from keeper.domain.reclaim.steps import Mode, Outcome, Step


class ReclaimView(BaseModel):
    """The `status` query's answer: the state's fields of the same names (their meaning is
    ReclaimState's), and whether keeper's drain is made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    holding: Holding
    step: Step = Step.ASSESS
    mode: Mode = Mode.OBSERVE
    attempts: int = 0
    actions: tuple[str, ...] = ()
    tally: ReleaseTally = ReleaseTally()
    drained: bool = False
    attention: str = ""
    last: Assessment | None = None
    cancels_sent: int | None = None
    operator: OperatorRelease | None = None
    outcome: Outcome | None = None

    @property
    def sent(self) -> int:
        """Cancels sent: the ledger's count once a cancel answered, else the tries spent."""
        return self.attempts if self.cancels_sent is None else self.cancels_sent


def render_view(state: ReclaimState) -> ReclaimView:
    shown = {name: getattr(state, name) for name in ReclaimView.model_fields if name != "drained"}
    return ReclaimView(**shown, drained=state.drain is Drain.MADE)


def _at(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def render_details(view: ReclaimView, policy: ReclaimPolicy) -> str:
    h = view.holding
    lines = [
        f"**{h.node}** holds job **{h.job_id}** (incarnation {h.incarnation}, first seen "
        f"{_at(h.first_seen)})",
        f"step: {view.step.value} · mode: {view.mode.value} · cancels sent: {view.sent}",
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


def drained_alert(state: ReclaimState, result: DrainResult, reason: str, workflow_id: str) -> Alert:
    """The operator's alert of a drain keeper made. A drain is made once per run chain (a
    carried drain skips the step), so the fence key alone names the event."""
    return make_alert(
        AlertKind.NODE_DRAINED,
        workflow_id,
        "drain",
        f"{result.node} drained: its agent still holds job {state.holding.job_id}",
        [state.attention, f"why: {reason}"],
    )
