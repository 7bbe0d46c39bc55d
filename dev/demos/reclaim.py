"""`keeper-dev demo reclaim`: on the local stack, make one spur agent keep a job the controller
has finished, and watch job reclaim release it without touching the job still running there.

The spur emulator (`keeper-dev up` starts it) does the leaking through its control API; its
agents heartbeat through `keeper reclaim tap`, whose intake starts the JobReclaim workflow
once the job has been over for reclaim.timing.end_grace; the worker sends the cancel. The
emulator's cancel log is the judge: it records, for every CancelJob an agent received,
whether the controller had that job live on that node at that moment.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any

import click

from dev.devstack.probes import Probes
from dev.emulator_spur import SpurControl, holdings_of
from keeper.cli.connect import client_for
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import CommandFailed, Output, json_options
from keeper.cli.reclaim.runs import reclaims_of
from keeper.cli.workflow_view import status_name
from keeper.domain.common.durations import format_duration
from keeper.domain.reclaim.identity import NodeNameError, canonical_node
from keeper.domain.reclaim.state import JobReclaimResult
from keeper.domain.reclaim.steps import Mode, Outcome
from keeper.runtime.reclaim import search_attributes as sa
from keeper.runtime.settings import Settings

POLL_INTERVAL = 0.5
SIGNALS = {0: "graceful (signal 0)", 9: "forced kill (signal 9)"}


@dataclass
class _Seen:
    """The demo's two jobs and what it has reported of the reclaim: a line is printed only
    when one of these changes."""

    live_id: int
    job_id: int
    workflow_id: str | None = None
    run_id: str | None = None
    step: str | None = None
    status: str | None = None
    cancels: int = 0
    drains: int = 0
    held: bool = True
    result: JobReclaimResult | None = None


class _Progress:
    """One line per change on stderr; on a terminal, a waiting line redrawn in between."""

    def __init__(self, out: Output, began: float) -> None:
        self.out = out
        self.began = began
        self.tty = sys.stderr.isatty() and not out.json
        self._drawn = False

    def line(self, text: str) -> None:
        self.clear()
        self.out.note(f"  {time.monotonic() - self.began:5.1f}s  {text}")

    def waiting(self, what: str) -> None:
        if not self.tty:
            return
        self.clear()
        click.echo(f"  {time.monotonic() - self.began:5.1f}s  ({what})", err=True, nl=False)
        self._drawn = True

    def clear(self) -> None:
        if self._drawn:
            click.echo("\r\033[K", err=True, nl=False)
            self._drawn = False


def _check_stack(settings: Settings, control: SpurControl, node: str | None) -> str:
    """The node to leak on, once the spur emulator, the tap and the act mode are there."""
    if settings.reclaim.mode is not Mode.ACT:
        raise CommandFailed(
            f"reclaim.mode is {settings.reclaim.mode.value}: keeper would decide the leaked job "
            "but send nothing, so the demo cannot show a release",
            hint="The dev stack's temporal-dev.yaml sets `reclaim.mode: act`; with another "
            "config, set it there (or KEEPER_RECLAIM_MODE=act) and restart the stack with "
            "`keeper-dev down` and `keeper-dev up`.",
        )
    state = control.state()
    agents = [a for a in state.get("agents", []) if a.get("registered")]
    if not agents:
        raise CommandFailed(
            "no spur agent has registered through the tap yet",
            hint="`keeper-dev status` shows the spur emulator and the tap; `keeper-dev up` "
            "starts what is missing.",
        )
    node = node or str(agents[0]["node"])
    control.known_node(node, registered=True)
    tap = asyncio.run(Probes(settings).reclaim_tap())  # as `keeper-dev status` checks it
    if not tap.ok:
        raise CommandFailed(
            f"keeper's reclaim tap is not answering on reclaim.intake_address: {tap.detail}",
            hint="Start the local stack with `keeper-dev up`; `keeper-dev status` shows the tap.",
        )
    return node


def _since(records: list[dict[str, Any]], since: str) -> list[dict[str, Any]]:
    """What the spur emulator logged from `since` (its clock when the demo began) on."""
    return [r for r in records if str(r.get("at", "")) >= since]


def _cancels(state: dict[str, Any], node: str, job_id: int, since: str) -> list[dict[str, Any]]:
    """The cancels of this demo's job on its node."""
    return [
        c
        for c in _since(state.get("cancels", []), since)
        if c.get("job_id") == job_id and c.get("node") == node
    ]


def _cancel_text(cancel: dict[str, Any]) -> str:
    followup = f", then {cancel['followup']}" if cancel.get("followup") else ""
    live = "a job live there" if cancel.get("live_here") else "not live there"
    signal = SIGNALS.get(cancel["signal"], f"signal {cancel['signal']}")
    return (
        f"{cancel['node']}'s agent received CancelJob {signal} for job {cancel['job_id']} "
        f"({live}): {cancel['action']}{followup}"
    )


async def _leak_and_follow(
    settings: Settings,
    control: SpurControl,
    node: str,
    since: str,
    out: Output,
    progress: _Progress,
    within: float,
) -> _Seen:
    """Runs a job that keeps running and one that ends while the agent keeps holding it,
    then follows the reclaim keeper starts for the leaked one."""
    client = await client_for(settings)
    node_id = canonical_node(node, settings.reclaim.node_aliases)
    live = control.submit(node, "demo-running")
    seen = _Seen(int(live["job_id"]), int(control.submit(node, "demo-leaked")["job_id"]))
    job_id = seen.job_id
    # Still running on its node: keeper spares it, so no reclaim of this holding exists yet;
    # every run of (node, job) there is now is another holding's.
    earlier = {wf.run_id for wf in await reclaims_of(client, node_id, job_id)}
    control.complete(job_id, leak=True)
    grace = format_duration(settings.reclaim.timing.end_grace)
    out.note(
        f"Job {job_id} finished on {node} but its agent keeps holding it; job "
        f"{seen.live_id} keeps running there. keeper spares a job that ended less than "
        f"{grace} ago, then reclaims it:"
    )
    deadline = time.monotonic() + within
    progress.waiting(f"waiting for the tap: spared while it ended less than {grace} ago")
    while True:
        state = control.state()
        cancels = _cancels(state, node, job_id, since)
        for cancel in cancels[seen.cancels :]:
            progress.line(_cancel_text(cancel))
        seen.cancels = len(cancels)
        drains = [d for d in _since(state.get("drains", []), since) if d.get("name") == node]
        for drain in drains[seen.drains :]:
            progress.line(f"{node} drained ({drain.get('actual_state')}): {drain.get('reason')}")
        seen.drains = len(drains)
        held = job_id in holdings_of(state, node)
        if seen.held and not held:
            progress.line(f"{node}'s agent let go of job {job_id}")
        seen.held = held

        # The reclaim of the holding the demo made: a run that did not exist when it leaked
        # the job (a restarted stack issues job ids again, and keeper's reclaims of the last
        # stack's job of that id stay in Temporal), running first, then the newest.
        runs = await reclaims_of(client, node_id, job_id)
        wf = next((run for run in runs if run.run_id not in earlier), None)
        if wf is not None:
            if seen.workflow_id != wf.id:
                seen.workflow_id, seen.run_id = wf.id, wf.run_id
                progress.line(f"reclaim started: {wf.id}")
                progress.line(f"  {settings.temporal.workflow_url(wf.id, wf.run_id)}")
            step = wf.typed_search_attributes.get(sa.KEEPER_STEP)
            if step and step != seen.step:
                seen.step = step
                progress.line(f"step {step}")
            seen.status = status_name(wf)
            if seen.status == "COMPLETED":
                handle = client.get_workflow_handle(wf.id, result_type=JobReclaimResult)
                seen.result = await handle.result()
                progress.line(f"reclaim ended: {seen.result.outcome.value}")
                return seen
            if seen.status != "RUNNING":
                progress.line(f"reclaim ended: {seen.status}")
                return seen
            progress.waiting(
                "waiting for heartbeats that show the release"
                if not held
                else f"waiting in step {step}"
            )
        if time.monotonic() >= deadline:
            return seen
        await asyncio.sleep(POLL_INTERVAL)


@click.command()
@click.option(
    "--node",
    default=None,
    help="The node whose agent keeps the job (default: the spur emulator's first agent).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Seconds to wait for the release.",
)
@json_options
@pass_keeper
def demo(keeper: KeeperContext, node: str | None, timeout: float, out: Output) -> None:
    """Leak a job on a node of the local stack's spur emulator and watch keeper release it.

    On NODE it runs one job that keeps running and one that ends while the agent keeps
    holding it. The agent's heartbeats go through `keeper reclaim tap`; once the job has
    been over for reclaim.timing.end_grace, a JobReclaim workflow sends the agent a
    graceful cancel and waits for heartbeats that no longer list the job. Then it checks
    the spur emulator's cancel log: no cancel may have reached a job live on its node.
    Progress goes to stderr, one line per change.

    Exit status: 0 when the job was released and no live job was cancelled, 1 otherwise
    (including a stack that is not up: `keeper-dev up` first). Needs reclaim.mode `act`, as
    the dev stack's temporal-dev.yaml sets it.

    \b
    --json prints {"node", "job_id", "live_job_id", "workflow_id", "run_id", "ui_url",
      "status", "outcome", "mode", "cancels_sent", "drained", "undrained", "cancels",
      "live_cancels", "live_job_held", "seconds"}.
    """
    settings = keeper.settings
    control = SpurControl(settings)
    try:
        node = _check_stack(settings, control, node)
        canonical_node(node, settings.reclaim.node_aliases)
    except NodeNameError as err:
        raise CommandFailed(f"{err}; nothing was done", node=node) from None
    began = time.monotonic()
    # The emulator's clock, in the cancel log's format: cancels from here on are this run's.
    since = str(control.state().get("clock", ""))
    progress = _Progress(out, began)
    try:
        seen = asyncio.run(_leak_and_follow(settings, control, node, since, out, progress, timeout))
    finally:
        progress.clear()
    seconds = time.monotonic() - began
    job_id, result = seen.job_id, seen.result

    state = control.state()
    live_cancels = [c for c in _since(state.get("cancels", []), since) if c.get("live_here")]
    summary = {
        "node": node,
        "job_id": job_id,
        "live_job_id": seen.live_id,
        "workflow_id": seen.workflow_id,
        "run_id": seen.run_id,
        "ui_url": settings.temporal.workflow_url(seen.workflow_id, seen.run_id)
        if seen.workflow_id
        else None,
        "status": seen.status,
        "outcome": result.outcome.value if result else None,
        "mode": result.mode.value if result else settings.reclaim.mode.value,
        "cancels_sent": result.attempts if result else None,
        "drained": result.drained if result else None,
        "undrained": result.undrained if result else None,
        "cancels": _cancels(state, node, job_id, since),
        "live_cancels": live_cancels,
        "live_job_held": seen.live_id in holdings_of(state, node),
        "seconds": round(seconds, 1),
    }
    # The running job has done its part (it kept the heartbeats non-empty): end it cleanly.
    control.complete(seen.live_id)
    if out.json:
        out.data(summary)
    else:
        _print_outcome(out, summary)
        out.line(f"  took     {seconds:.1f}s")
    if result is None or result.outcome is not Outcome.RELEASED or live_cancels:
        if result is None and seen.status in (None, "RUNNING"):
            where = (
                f"`keeper reclaim status {node} {job_id}` shows where it is"
                if seen.workflow_id
                else "no reclaim started: .dev/logs/tap.log shows what the tap decided"
            )
            out.note(f"Not released within {timeout:g}s (--timeout): {where}.")
        raise SystemExit(1)


def _print_outcome(out: Output, summary: dict[str, Any]) -> None:
    """The demo's --json document as text."""
    job, node, outcome = f"job {summary['job_id']}", summary["node"], summary["outcome"]
    if outcome == Outcome.RELEASED.value:
        out.line(f"Released {job} on {node}.")
    elif outcome is not None:
        out.line(f"{job.capitalize()} on {node} was not released: {outcome}.")
    else:
        status = summary["status"] or "no reclaim"
        out.line(f"{job.capitalize()} on {node} was not released ({status}).")
    out.line(f"  workflow {summary['workflow_id'] or '-'}")
    out.line(f"  UI       {summary['ui_url'] or '-'}")
    for cancel in summary["cancels"]:
        out.line(f"  sent     {_cancel_text(cancel)}")
    if not summary["cancels"]:
        out.line("  sent     nothing")
    if outcome is not None:
        drained, undrained = summary["drained"], summary["undrained"]
        out.line(
            f"  drain    {'drained and lifted' if undrained else 'drained' if drained else 'no'}"
        )
    live_cancels = summary["live_cancels"]
    if live_cancels:
        out.line(f"  LIVE JOBS CANCELLED: {len(live_cancels)}")
        for cancel in live_cancels:
            out.line(f"           {_cancel_text(cancel)}")
    else:
        out.line(
            "  live     no live job was cancelled during the demo (the spur emulator's cancel log)"
        )
    kept = "kept running" if summary["live_job_held"] else "was NOT held any more"
    out.line(f"  running  job {summary['live_job_id']} {kept} on {node} (the demo ends it now)")
