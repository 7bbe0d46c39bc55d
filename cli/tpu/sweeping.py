"""`keeper tpu sweep`: the scheduled sweep, now, and never a second one beside it.

Two sweeps at once race to delete the same orphan. So every sweep that deletes is a run of
the schedule `tpu-sweeper`, whose overlap policy SKIP starts none while one runs: the command
triggers the schedule rather than starting a workflow of its own, and when a sweep is
already running (scheduled, or asked for by another operator) it reports that one. A dry
run deletes nothing and runs on its own, beside any other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from temporalio.client import (
    Client,
    ScheduleActionExecution,
    ScheduleActionExecutionStartWorkflow,
    ScheduleOverlapPolicy,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from keeper.cli.output import CommandFailed
from keeper.domain.common.untrusted import terminal_text
from keeper.domain.tpu.models import SweepReport
from keeper.domain.tpu.naming import SWEEPER_SCHEDULE_ID

# The scheduler acts on a trigger within a second or so; a minute means it is not acting.
TRIGGER_WITHIN_S = 60.0
LOOK_EVERY_S = 0.2
MAX_NAMED = 10


@dataclass(frozen=True)
class ScheduledSweep:
    handle: WorkflowHandle[Any, SweepReport]
    # False when a sweep was already running and this is that one.
    started: bool


async def scheduled_sweep(client: Client) -> ScheduledSweep:
    """The schedule's sweep: the one running, or the one a trigger just started."""
    schedule = client.get_schedule_handle(SWEEPER_SCHEDULE_ID)
    try:
        before = (await schedule.describe()).info
    except RPCError as err:
        if err.status is not RPCStatusCode.NOT_FOUND:
            raise
        raise CommandFailed(
            f"there is no schedule {SWEEPER_SCHEDULE_ID} in namespace {client.namespace}, so "
            "no worker that serves the tpu family has started there to run a sweep; nothing "
            "was swept",
            hint="Start one (`keeper worker`, or `keeper-dev up` for the local stack): it "
            "creates the schedule. Then run `keeper tpu sweep` again.",
            schedule_id=SWEEPER_SCHEDULE_ID,
        ) from None
    if before.running_actions:
        return ScheduledSweep(_handle(client, before.running_actions[-1]), started=False)
    # SKIP whatever the schedule says: an operator may have changed its policy by hand.
    await schedule.trigger(overlap=ScheduleOverlapPolicy.SKIP)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TRIGGER_WITHIN_S
    while True:
        info = (await schedule.describe()).info
        skipped = info.num_actions_skipped_overlap > before.num_actions_skipped_overlap
        if skipped or info.num_actions > before.num_actions:
            break
        if loop.time() > deadline:
            raise CommandFailed(
                f"the schedule {SWEEPER_SCHEDULE_ID} did not act on the trigger within "
                f"{TRIGGER_WITHIN_S:g}s; no sweep was seen to start",
                hint=f"See `temporal schedule describe --schedule-id {SWEEPER_SCHEDULE_ID}`, "
                "then run `keeper tpu sweep` again.",
                schedule_id=SWEEPER_SCHEDULE_ID,
            )
        await asyncio.sleep(LOOK_EVERY_S)
    if info.running_actions:
        action: ScheduleActionExecution = info.running_actions[-1]
    else:
        # It started and already finished (a sweep with nothing to delete takes a moment).
        action = max(info.recent_actions, key=lambda result: result.started_at).action
    # Skipped: a sweep started between the look above and the trigger; this is that one.
    return ScheduledSweep(_handle(client, action), started=not skipped)


def _handle(client: Client, action: ScheduleActionExecution) -> WorkflowHandle[Any, SweepReport]:
    assert isinstance(action, ScheduleActionExecutionStartWorkflow), action
    return client.get_workflow_handle(
        action.workflow_id, run_id=action.first_execution_run_id, result_type=SweepReport
    )


def orphan_name(item: str) -> str:
    """The resource name of a `failed` entry, `<name> (owner ...): <error>`."""
    return terminal_text(item.split(" (", 1)[0])


def unfinished(report: SweepReport) -> str | None:
    """What a sweep left undone, in one sentence; None when it did all it could."""
    parts = []
    for field, what, named, sep in (
        ("failed", "orphan(s) could not be deleted", orphan_name, ", "),
        ("errors", "location(s) or owner(s) could not be read", terminal_text, "; "),
    ):
        if items := getattr(report, field):
            more = len(items) - MAX_NAMED
            shown = sep.join(named(item) for item in items[:MAX_NAMED])
            parts.append(
                f"{len(items)} {what}: {shown}"
                + (f" and {more} more (see `{field}`)" if more > 0 else "")
            )
    return "; ".join(parts) or None
