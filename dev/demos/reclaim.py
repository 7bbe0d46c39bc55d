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
from dataclasses import dataclass, field
from typing import Any

import click
import httpx
from temporalio.client import Client

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
from keeper.runtime.dev_ports import dial_host, split_address
from keeper.runtime.reclaim import search_attributes as sa
from keeper.runtime.settings import Settings

POLL_INTERVAL = 0.5
SIGNALS = {0: "graceful (signal 0)", 9: "forced kill (signal 9)"}


@dataclass
class _Seen:
    """What the demo has reported so far: a line is printed only when one of these changes."""

    workflow_id: str | None = None
    run_id: str | None = None
    step: str | None = None
    status: str | None = None
    cancels: int = 0
    drains: int = 0
    held: bool = True
    lines: list[str] = field(default_factory=list)


class _Progress:
    """One line per change on stderr; on a terminal, a waiting line redrawn in between."""

    def __init__(self, out: Output, began: float) -> None:
        self.out = out
        self.began = began
        self.tty = sys.stderr.isatty() and not out.json
        self._drawn = False

    def line(self, text: str) -> None:
        self._clear()
        self.out.note(f"  {time.monotonic() - self.began:5.1f}s  {text}")

    def waiting(self, what: str) -> None:
        if not self.tty:
            return
        self._clear()
        click.echo(f"  {time.monotonic() - self.began:5.1f}s  ({what})", err=True, nl=False)
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            click.echo("\r\033[K", err=True, nl=False)
            self._drawn = False

    def done(self) -> None:
        self._clear()


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
    names = [str(a["node"]) for a in agents]
    if node is not None and node not in names:
        raise CommandFailed(
            f"the spur emulator has no registered agent on node {node!r}; nothing was done",
            hint=f"Its registered nodes: {', '.join(names)}.",
            node=node,
        )
    host, port = split_address(settings.reclaim.intake_address, "reclaim.intake_address")
    url = f"http://{dial_host(host)}:{port}/healthz"
    try:
        httpx.get(url, timeout=5).raise_for_status()
    except httpx.HTTPError as err:
        raise CommandFailed(
            f"keeper's reclaim tap is not answering at {url} (reclaim.intake_address): {err}",
            hint="Start the local stack with `keeper-dev up`; `keeper-dev status` shows the tap.",
        ) from err
    return node or names[0]


async def _find(client: Client, node_id: str, job_id: int, earlier: set[str]) -> Any:
    """The reclaim of the holding the demo made: a run of (node, job) that did not exist
    when it leaked the job (a restarted stack issues job ids again, and keeper's reclaims of
    the last stack's job of that id stay in Temporal), running first, then the newest."""
    found = [wf for wf in await reclaims_of(client, node_id, job_id) if wf.run_id not in earlier]
    return found[0] if found else None


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


@dataclass
class _Leak:
    live_id: int
    job_id: int
    seen: _Seen
    result: JobReclaimResult | None


async def _leak_and_follow(
    settings: Settings,
    control: SpurControl,
    node: str,
    since: str,
    out: Output,
    progress: _Progress,
    within: float,
) -> _Leak:
    """Runs a job that keeps running and one that ends while the agent keeps holding it,
    then follows the reclaim keeper starts for the leaked one."""
    client = await client_for(settings)
    node_id = canonical_node(node, settings.reclaim.node_aliases)
    live = control.submit(node, "demo-running")
    leaked = control.submit(node, "demo-leaked")
    job_id = int(leaked["job_id"])
    # Still running on its node: keeper spares it, so no reclaim of this holding exists yet;
    # every run of (node, job) there is now is another holding's.
    earlier = {wf.run_id for wf in await reclaims_of(client, node_id, job_id)}
    control.complete(job_id, leak=True)
    out.note(
        f"Job {job_id} finished on {node} but its agent keeps holding it; job "
        f"{live['job_id']} keeps running there. keeper spares a job that ended less than "
        f"{format_duration(settings.reclaim.timing.end_grace)} ago, then reclaims it:"
    )
    seen, result = await _follow(
        client, settings, control, (node, node_id), job_id, (earlier, since), progress, within
    )
    return _Leak(int(live["job_id"]), job_id, seen, result)


async def _follow(
    client: Client,
    settings: Settings,
    control: SpurControl,
    names: tuple[str, str],
    job_id: int,
    before: tuple[set[str], str],
    progress: _Progress,
    within: float,
) -> tuple[_Seen, JobReclaimResult | None]:
    node, node_id = names
    earlier, since = before
    seen = _Seen()
    deadline = time.monotonic() + within
    grace = format_duration(settings.reclaim.timing.end_grace)
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

        wf = await _find(client, node_id, job_id, earlier)
        if wf is not None:
            if seen.workflow_id != wf.id:
                seen.workflow_id, seen.run_id = wf.id, wf.run_id
                progress.line(f"reclaim started: {wf.id}")
                progress.line(f"  {settings.temporal.workflow_url(wf.id, wf.run_id)}")
            step = wf.typed_search_attributes.get(sa.KEEPER_STEP)
            if step and step != seen.step:
                seen.step = step
                progress.line(f"step {step}")
            status = status_name(wf)
            if status != "RUNNING":
                seen.status = status
                if status == "COMPLETED":
                    handle = client.get_workflow_handle(wf.id, result_type=JobReclaimResult)
                    result = await handle.result()
                    progress.line(f"reclaim ended: {result.outcome.value}")
                    return seen, result
                progress.line(f"reclaim ended: {status}")
                return seen, None
            seen.status = status
            progress.waiting(
                "waiting for heartbeats that show the release"
                if not held
                else f"waiting in step {step}"
            )
        if time.monotonic() >= deadline:
            return seen, None
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
        leak = asyncio.run(_leak_and_follow(settings, control, node, since, out, progress, timeout))
    finally:
        progress.done()
    seconds = time.monotonic() - began
    job_id, seen, result = leak.job_id, leak.seen, leak.result

    state = control.state()
    cancels = _cancels(state, node, job_id, since)
    live_cancels = [c for c in _since(state.get("cancels", []), since) if c.get("live_here")]
    live_id = leak.live_id
    live_held = live_id in holdings_of(state, node)
    # The running job has done its part (it kept the heartbeats non-empty): end it cleanly.
    control.complete(live_id)

    outcome = result.outcome.value if result else None
    ok = result is not None and result.outcome is Outcome.RELEASED and not live_cancels
    ui_url = (
        settings.temporal.workflow_url(seen.workflow_id, seen.run_id) if seen.workflow_id else None
    )
    if out.json:
        out.data(
            {
                "node": node,
                "job_id": job_id,
                "live_job_id": live_id,
                "workflow_id": seen.workflow_id,
                "run_id": seen.run_id,
                "ui_url": ui_url,
                "status": seen.status,
                "outcome": outcome,
                "mode": result.mode.value if result else settings.reclaim.mode.value,
                "cancels_sent": result.attempts if result else None,
                "drained": result.drained if result else None,
                "undrained": result.undrained if result else None,
                "cancels": cancels,
                "live_cancels": live_cancels,
                "live_job_held": live_held,
                "seconds": round(seconds, 1),
            }
        )
    else:
        _print_outcome(
            out, node, job_id, (live_id, live_held), seen, result, cancels, live_cancels, ui_url
        )
        out.line(f"  took     {seconds:.1f}s")
    if not ok:
        if result is None and seen.status in (None, "RUNNING"):
            where = (
                f"`keeper reclaim status {node} {job_id}` shows where it is"
                if seen.workflow_id
                else "no reclaim started: .dev/logs/tap.log shows what the tap decided"
            )
            out.note(f"Not released within {timeout:g}s (--timeout): {where}.")
        raise SystemExit(1)


def _print_outcome(
    out: Output,
    node: str,
    job_id: int,
    live: tuple[int, bool],
    seen: _Seen,
    result: JobReclaimResult | None,
    cancels: list[dict[str, Any]],
    live_cancels: list[dict[str, Any]],
    ui_url: str | None,
) -> None:
    if result is not None and result.outcome is Outcome.RELEASED:
        out.line(f"Released job {job_id} on {node}.")
    elif result is not None:
        out.line(f"Job {job_id} on {node} was not released: {result.outcome.value}.")
    else:
        out.line(f"Job {job_id} on {node} was not released ({seen.status or 'no reclaim'}).")
    out.line(f"  workflow {seen.workflow_id or '-'}")
    out.line(f"  UI       {ui_url or '-'}")
    if cancels:
        for cancel in cancels:
            out.line(f"  sent     {_cancel_text(cancel)}")
    else:
        out.line("  sent     nothing")
    if result is not None:
        drain = "drained and lifted" if result.undrained else "drained" if result.drained else "no"
        out.line(f"  drain    {drain}")
    if live_cancels:
        out.line(f"  LIVE JOBS CANCELLED: {len(live_cancels)}")
        for cancel in live_cancels:
            out.line(f"           {_cancel_text(cancel)}")
    else:
        out.line(
            "  live     no live job was cancelled during the demo (the spur emulator's cancel log)"
        )
    live_id, held = live
    kept = "kept running" if held else "was NOT held any more"
    out.line(f"  running  job {live_id} {kept} on {node} (the demo ends it now)")
