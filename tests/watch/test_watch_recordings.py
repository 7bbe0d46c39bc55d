"""Recordings of JobWatch runs, replayed by tests/common/test_replay.py like every other recording:
every path a watch takes on the dev server against the iris emulator (its end, a retry
followed, each operator's decision, a roll-over, a confirmed stall, the escalations that
propose nothing, the alerts, a preempted task, a queued job). On demand, into a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=<folder> \\
        pytest tests/watch/test_watch_recordings.py
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from keeper.domain.watch.models import (
    APPROVE_UPDATE,
    DENY_UPDATE,
    Decision,
    Proposal,
    ProposalKind,
    WatchView,
)
from keeper.runtime.alerts import ALERT_WEBHOOK_ENV
from tests.reclaim.world import until
from tests.recording import on_demand, write_recording
from tests.watch.world import WatchWorld, watch_world
from tests.webhook_receiver import webhook_receiver

# A secret environment value of a job keeper launched: in its launch store, never in history.
SECRET_ENV = {"HF_TOKEN": "hf_recorded-secret-never-shown"}
COMMAND = ["python", "-m", "pipeline", "--resume"]


@dataclass(frozen=True)
class Scenario:
    """What the emulator plays, how the job is launched, and what the recorder does."""

    scenario: str
    overrides: dict[str, Any] = field(default_factory=dict)
    # The job launched as `keeper job run` launches one (the watch holds its request), and
    # its environment (a secret's full request goes to the launch store).
    held: dict[str, str] | None = None
    # An operator's answer to the first pending proposal of this kind, and its command.
    decide: tuple[ProposalKind, str] | None = None
    command: list[str] | None = None
    # Unwatched once the view shows this (after any decision); None: the watch ends itself.
    unwatch_when: Callable[[WatchView], bool] | None = None
    what: str = ""


SCENARIOS: dict[str, Scenario] = {
    # The job ends well; a killed attempt is retried and followed to its end.
    "watch-succeeded": Scenario("healthy"),
    "watch-followed-retry": Scenario("killed-retry"),
    # A zombie coordinator: restart approved, of a job keeper launched (its request held as
    # is), with a secret (the full request in the launch store), and of a job keeper only
    # watched, with the operator's command.
    "watch-restart-approved": Scenario(
        "zombie-coordinator", held={}, decide=(ProposalKind.RESTART, APPROVE_UPDATE)
    ),
    "watch-restart-held": Scenario(
        "zombie-coordinator", held=SECRET_ENV, decide=(ProposalKind.RESTART, APPROVE_UPDATE)
    ),
    "watch-restart-command": Scenario(
        "zombie-coordinator", decide=(ProposalKind.RESTART, APPROVE_UPDATE), command=COMMAND
    ),
    # The same error again and again: a stop approved.
    "watch-stop-approved": Scenario(
        "repeated-failure",
        {"max_task_errors": 50, "failure_gap": 20},
        decide=(ProposalKind.STOP, APPROVE_UPDATE),
    ),
    # A stuck stage: the restart denied, then the watch ended by an operator.
    "watch-denied-unwatched": Scenario(
        "stuck-stage",
        decide=(ProposalKind.RESTART, DENY_UPDATE),
        unwatch_when=lambda v: True,
    ),
    # A hung process: the stall confirmed by the delta probe, then unwatched.
    "watch-probe-confirmed": Scenario(
        "hung-busy", unwatch_when=lambda v: v.verdict == "stalled", what="a stalled verdict"
    ),
    # Stragglers: escalated with no proposal (to debug, not a kill), then unwatched.
    "watch-stragglers-escalated": Scenario(
        "stragglers",
        {"workers": 32},
        unwatch_when=lambda v: any("straggl" in e for e in v.escalations),
        what="a stragglers escalation",
    ),
    # A task preempted with budget left (pending again), then for good: the job ends.
    "watch-preempted": Scenario("preempted"),
    # A job that waits in iris's queue: one retrying activity until it is scheduled.
    "watch-queued": Scenario("healthy", {"queued": 300}),
}
# Recorded by their own tests below: a roll-over (both runs) and the alerts on a webhook.
ROLLED_OVER = ("watch-continued-as-new", "watch-continued-as-new.next")
ALERTED = "watch-stalled-alert"
LABELS: list[str] = [*SCENARIOS, *ROLLED_OVER, ALERTED]


async def _decide(w: WatchWorld, handle: WorkflowHandle[Any, Any], s: Scenario) -> None:
    assert s.decide is not None
    kind, update = s.decide
    view = await w.until_view(
        handle,
        lambda v: any(p.kind is kind for p in v.pending()),
        within=60,
        what=f"a {kind.value} proposal",
    )
    proposal = next(p for p in view.pending() if p.kind is kind)
    await handle.execute_update(
        update,
        Decision(proposal=proposal.id, by="recorder", command=s.command),
        result_type=Proposal,
    )


@on_demand
@pytest.mark.parametrize("label", sorted(SCENARIOS))
async def test_record_watch(dev_env: WorkflowEnvironment, label: str) -> None:
    s = SCENARIOS[label]
    async with watch_world(dev_env.client) as w:
        if s.held is not None:
            job, held = w.launch_held(s.scenario, env=s.held or None)
            handle = await w.watch(job, held)
        else:
            handle = await w.watch(w.launch(s.scenario, **s.overrides))
        if s.decide is not None:
            await _decide(w, handle, s)
        if s.unwatch_when is not None:
            await w.until_view(handle, s.unwatch_when, within=60, what=s.what)
            await handle.cancel()
        result = await w.result(handle)
        if result.new_watch_id:
            await dev_env.client.get_workflow_handle(result.new_watch_id).cancel()
        history = await handle.fetch_history()
    write_recording(f"{label}.json", history.to_json())


@on_demand
async def test_record_watch_continued_as_new(dev_env: WorkflowEnvironment) -> None:
    """A watch whose history reaches its limit hands its whole state to the next run, which
    is then unwatched."""
    async with watch_world(dev_env.client, history_events_limit=200) as w:
        handle = await w.watch(w.launch("cpu-bound-quiet"))
        first_run = (await handle.describe()).run_id
        await w.until_view(handle, lambda v: v.generation >= 1, within=90, what="a new run")
        await handle.cancel()
        await w.result(handle)
        first = dev_env.client.get_workflow_handle(handle.id, run_id=first_run)
        runs = {
            "watch-continued-as-new": first,
            "watch-continued-as-new.next": dev_env.client.get_workflow_handle(handle.id),
        }
        for label, run in runs.items():
            write_recording(f"{label}.json", (await run.fetch_history()).to_json())


@on_demand
async def test_record_watch_stalled_alert(
    dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie coordinator alerts its stall and its restart proposal on keeper's alert
    channel (`common.alert`), then is unwatched."""
    async with webhook_receiver("T0KEEPER/B0WATCH/recorded") as receiver:
        monkeypatch.setenv(ALERT_WEBHOOK_ENV, receiver.url)
        async with watch_world(dev_env.client) as w:
            handle = await w.watch(w.launch("zombie-coordinator"))
            await until(
                lambda: receiver.of("Job stalled") and receiver.of("Proposal awaiting approval"),
                within=60,
                what="the stall and the proposal alerts",
            )
            await handle.cancel()
            await w.result(handle)
            history = await handle.fetch_history()
    write_recording(f"{ALERTED}.json", history.to_json())
