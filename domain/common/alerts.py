"""The events an operator must act on, whichever family sees them, and how each is told.

An alert carries names, states and evidence only; where it goes (the webhook URL, a secret)
is the worker's business (runtime/alerts.py). Its key is stable per event, so the workflow,
an activity retry and a continued-as-new run all name the same event the same way, and the
activity posts it once.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# A webhook message is read on a phone: a headline, a few lines of evidence.
SUMMARY_LIMIT = 300
EVIDENCE_LIMIT = 500
EVIDENCE_LINES = 8
KEY_LIMIT = 400

# Attempts to post one alert before it is given up (and logged as such): a webhook that
# stays down must not keep an alert retrying for the life of the workflow.
ALERT_ATTEMPTS = 5


class AlertKind(StrEnum):
    COMPENSATION_STUCK = "compensation_stuck"
    DELETION_ESCALATED = "deletion_escalated"
    NODE_DRAINED = "node_drained"
    VERDICT_STALLED = "verdict_stalled"
    PROPOSAL_AWAITING = "proposal_awaiting"
    # Anything else a watch tells its operator (a failed step, the job's end, a lost job).
    WATCH_NOTICE = "watch_notice"


# kind -> (family, the headline's prefix, what the operator does next)
ALERT_TABLE: dict[AlertKind, tuple[str, str, str]] = {
    AlertKind.COMPENSATION_STUCK: (
        "tpu",
        "TPU compensation stuck",
        "fix the cause or delete the resource by hand; keeper retries until NotFound",
    ),
    AlertKind.DELETION_ESCALATED: (
        "runners",
        "Runner deletion escalated",
        "fix the record, or `keeper runner delete <runner> --force`",
    ),
    AlertKind.NODE_DRAINED: (
        "reclaim",
        "Node drained by reclaim",
        "free the node, then `keeper reclaim release <node> <job>`",
    ),
    AlertKind.VERDICT_STALLED: (
        "watch",
        "Job stalled",
        "read the evidence; approve or deny keeper's proposal",
    ),
    AlertKind.PROPOSAL_AWAITING: (
        "watch",
        "Proposal awaiting approval",
        "`keeper job approve` or `keeper job deny`",
    ),
    AlertKind.WATCH_NOTICE: ("watch", "Job watch", "see `keeper job status`"),
}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Alert(BaseModel):
    """One event, as the workflow hands it to the alert activity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: AlertKind
    key: str = Field(min_length=1, max_length=KEY_LIMIT)
    summary: str = Field(max_length=SUMMARY_LIMIT)
    evidence: list[str] = Field(default_factory=list, max_length=EVIDENCE_LINES)

    @property
    def title(self) -> str:
        return f"{ALERT_TABLE[self.kind][1]}: {self.summary}"

    @property
    def lines(self) -> list[str]:
        """The evidence, then what to do next."""
        return [*self.evidence, f"next: {ALERT_TABLE[self.kind][2]}"]

    def footer(self, workflow_id: str) -> str:
        return f"keeper {ALERT_TABLE[self.kind][0]} {workflow_id}"


def alert_key(workflow_id: str, episode: str, kind: AlertKind) -> str:
    """One event: a workflow (the chain of its runs), the episode within it, the kind."""
    return _clip(f"{workflow_id}/{episode}/{kind.value}", KEY_LIMIT)


def make_alert(
    kind: AlertKind, workflow_id: str, episode: str, summary: str, evidence: list[str]
) -> Alert:
    """An alert within its bounds: untrusted text past a limit is cut, never refused, since
    an alert that fails to build would be an alert lost."""
    return Alert(
        kind=kind,
        key=alert_key(workflow_id, episode, kind),
        summary=_clip(summary, SUMMARY_LIMIT),
        evidence=[_clip(line, EVIDENCE_LIMIT) for line in evidence[:EVIDENCE_LINES]],
    )


# A watch's notice, by the start of its key (domain/watch/assess.py), as the alert it is;
# the first match wins and the rest are WATCH_NOTICE.
WATCH_NOTICE_KINDS: tuple[tuple[str, AlertKind], ...] = (
    ("proposal/", AlertKind.PROPOSAL_AWAITING),
    ("stuck_stage:", AlertKind.VERDICT_STALLED),
    ("zombie_coordinator:", AlertKind.VERDICT_STALLED),
)


def watch_notice_kind(notice_key: str) -> AlertKind:
    return next(
        (kind for prefix, kind in WATCH_NOTICE_KINDS if notice_key.startswith(prefix)),
        AlertKind.WATCH_NOTICE,
    )
