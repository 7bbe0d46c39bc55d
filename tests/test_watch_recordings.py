"""Recordings of JobWatch runs, replayed by tests/test_replay.py like every other recording
(tests/histories/2026-12-01-watch/, since the watch-probe-deadline patch
tests/histories/2026-12-04-watch/, and since the watch-close-truthfully,
watch-stragglers-escalate and watch-check-waits-in-activity patches
tests/histories/2026-12-04-watch-checks/, and since the watch-relaunch-held-request and
watch-preempted-terminal patches tests/histories/2026-12-04-watch-relaunch/). On demand, into
a new folder:

    KEEPER_RECORD_HISTORIES=1 KEEPER_HISTORY_DIR=2026-12-01-watch \\
        pytest tests/test_watch_recordings.py
"""

from __future__ import annotations

from typing import Any

import pytest

from keeper.domain.watch.models import APPROVE_UPDATE, DENY_UPDATE, Decision, Proposal, ProposalKind
from tests.harness import env_flag
from tests.recording import write_recording
from tests.watch_world import watch_world

SCENARIOS = {
    # label: (emulator scenario, its overrides, what the recorder does)
    "watch-succeeded": ("healthy", {}, None),
    "watch-followed-retry": ("killed-retry", {}, None),
    "watch-restart-approved": ("zombie-coordinator", {}, (ProposalKind.RESTART, APPROVE_UPDATE)),
    "watch-stop-approved": (
        "repeated-failure",
        {"max_task_errors": 50, "failure_gap": 20},
        (ProposalKind.STOP, APPROVE_UPDATE),
    ),
    "watch-denied-unwatched": ("stuck-stage", {}, (ProposalKind.RESTART, DENY_UPDATE)),
    "watch-continued-as-new": ("cpu-bound-quiet", {}, None),
    # Since watch-probe-deadline: a stall confirmed by a probe with its deadline and clock.
    "watch-probe-confirmed": ("hung-busy", {}, None),
    # Since watch-stragglers-escalate: stragglers escalated with no proposal, then unwatched.
    "watch-stragglers-escalated": ("stragglers", {"workers": 32}, None),
    # Since watch-relaunch-held-request: a restart of a job keeper launched with a secret
    # (its request held, the secret in the launch store), and one of a job it did not launch,
    # approved with the operator's command.
    "watch-restart-held": ("zombie-coordinator", {}, (ProposalKind.RESTART, APPROVE_UPDATE)),
    "watch-restart-command": ("zombie-coordinator", {}, (ProposalKind.RESTART, APPROVE_UPDATE)),
    # Since watch-preempted-terminal: a task preempted with budget left, then for good.
    "watch-preempted": ("preempted", {}, None),
}
# What a restart approval is given: a held launch (the job launched as `keeper job run` does)
# or a command; `watch-restart-approved` was recorded before either was needed.
HELD = {"watch-restart-approved", "watch-restart-held"}
COMMAND = ["python", "-m", "pipeline", "--resume"]


@pytest.mark.skipif(not env_flag("KEEPER_RECORD_HISTORIES"), reason="recording is on demand")
@pytest.mark.parametrize("label", sorted(SCENARIOS))
async def test_record_watch(dev_env: Any, label: str) -> None:
    scenario, overrides, decide = SCENARIOS[label]
    extra = {"history_events_limit": 200} if label == "watch-continued-as-new" else {}
    async with watch_world(dev_env.client, **extra) as w:
        if label in HELD:
            job, held = w.launch_held(scenario, env={"HF_TOKEN": "hf_recorded-secret-never-shown"})
            handle = await w.watch(job, held)
        else:
            job = w.launch(scenario, **overrides)
            handle = await w.watch(job)
        if label == "watch-continued-as-new":
            await w.until_view(handle, lambda v: v.generation >= 1, within=90, what="a new run")
            runs = [r async for r in dev_env.client.list_workflows(f'WorkflowId="{handle.id}"')]
            first = min(runs, key=lambda r: r.start_time)
            history = await dev_env.client.get_workflow_handle(
                handle.id, run_id=first.run_id
            ).fetch_history()
            write_recording(f"{label}.json", history.to_json())
            await handle.cancel()
            return
        if label in ("watch-probe-confirmed", "watch-stragglers-escalated"):
            await w.until_view(
                handle,
                lambda v: (
                    v.verdict == "stalled"
                    if label == "watch-probe-confirmed"
                    else any("straggl" in e for e in v.escalations)
                ),
                within=60,
                what="a stalled verdict or a stragglers escalation",
            )
            await handle.cancel()
            await w.result(handle)
            write_recording(f"{label}.json", (await handle.fetch_history()).to_json())
            return
        if decide is not None:
            kind, update = decide
            view = await w.until_view(
                handle,
                lambda v: any(p.kind is kind for p in v.pending()),
                within=60,
                what=f"a {kind.value} proposal",
            )
            proposal = next(p for p in view.pending() if p.kind is kind)
            command = COMMAND if label == "watch-restart-command" else None
            await handle.execute_update(
                update,
                Decision(proposal=proposal.id, by="recorder", command=command),
                result_type=Proposal,
            )
            if update == DENY_UPDATE:
                await handle.cancel()
        result = await w.result(handle)
        if result.new_watch_id:
            await dev_env.client.get_workflow_handle(result.new_watch_id).cancel()
        history = await handle.fetch_history()
    write_recording(f"{label}.json", history.to_json())
