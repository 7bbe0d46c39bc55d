"""`keeper-dev emulator spur`: read and drive the spur emulator (emulators/spur) through its
control API, on emulator.host:emulator.spur_control_port (docs/spur-emulator.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import click

from dev.control_api import at_stack, indented_table, show
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import CommandFailed, OneOf, Output, json_options, rfc3339
from keeper.runtime.settings import Settings

TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


class SpurControl:
    """The calls the spur commands and the reclaim demo make on its control API."""

    def __init__(self, settings: Settings) -> None:
        self.api = at_stack(
            settings,
            "spur emulator",
            "emulator.spur_control_port",
            "Start it with `keeper-dev up`",
            refused_hint="`keeper-dev emulator spur state` shows its jobs and nodes.",
        )

    def state(self) -> dict[str, Any]:
        return with_rfc3339(self.api.call("GET", "/state"))

    def submit(self, node: str, name: str = "job") -> dict[str, Any]:
        """A job dispatched and committed on `node` at once: RUNNING there."""
        self.known_node(node)
        return self.api.call("POST", "/jobs", {"name": name, "nodes": [node]})["jobs"][0]

    def known_node(self, node: str, registered: bool = False) -> None:
        """Refuses a node the emulator has no agent on (with `registered`, none registered)."""
        agents = [
            a for a in self.state().get("agents", []) if a.get("registered") or not registered
        ]
        nodes = [str(a.get("node")) for a in agents]
        if node not in nodes:
            what = "registered " if registered else ""
            raise CommandFailed(
                f"the spur emulator has no {what}agent on node {node!r}; nothing was done",
                hint=f"Its {what}nodes: {', '.join(nodes) or 'none'}.",
                node=node,
            )

    def complete(self, job_id: int, state: str = "COMPLETED", leak: bool = False) -> dict[str, Any]:
        return self.api.call("POST", f"/jobs/{job_id}/complete", {"state": state, "leak": leak})


_TIME_KEYS = frozenset(
    {"clock", "at", "submit_time", "start_time", "end_time", "last_heartbeat",
     "slurmd_start_time", "boot_time"}
)  # fmt: skip


def with_rfc3339(value: Any, key: str = "") -> Any:
    """The emulator's ISO timestamps in keeper's one format (RFC 3339 UTC, `Z`)."""
    if isinstance(value, Mapping):
        return {k: with_rfc3339(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [with_rfc3339(v, key) for v in value]
    if key in _TIME_KEYS and isinstance(value, str):
        return rfc3339(datetime.fromisoformat(value))
    return value


def holdings_of(state: Mapping[str, Any], node: str) -> list[int]:
    for agent in state.get("agents", []):
        if agent.get("node") == node:
            return sorted(int(h["job_id"]) for h in agent.get("holdings", []))
    return []


def _joined(items: list[Any] | None) -> str:
    return ",".join(map(str, items or [])) or "-"


def _holds(agent: Mapping[str, Any]) -> str:
    holdings = agent.get("holdings", [])
    return ", ".join(f"{h['job_id']} ({h.get('kind')}, {h.get('status')})" for h in holdings) or "-"


Row = Callable[[Mapping[str, Any]], tuple[Any, ...]]
# The sections of `spur state` as text: the list in GET /state, its columns, a row per item.
_SECTIONS: tuple[tuple[str, tuple[str, ...], Row], ...] = (
    ("jobs", ("JOB", "NAME", "STATE", "NODES", "ENDED"), lambda j: (
        j["job_id"], j.get("name", ""), j.get("state", ""), _joined(j.get("allocated_nodes")),
        j.get("end_time") or "-")),
    ("nodes", ("NODE", "STATE", "REASON", "LAST HEARTBEAT", "JOBS IN IT"), lambda n: (
        n["name"], n.get("state", ""), n.get("state_reason") or "-",
        n.get("last_heartbeat") or "-", _joined(n.get("last_running_jobs")))),
    ("agents", ("NODE", "TARGET", "REGISTERED", "HOLDS"), lambda a: (
        a.get("node"), a.get("target", ""), "yes" if a.get("registered") else "no", _holds(a))),
    ("cancels", ("AT", "NODE", "JOB", "SIGNAL", "LIVE HERE", "ACTION"), lambda c: (
        c.get("at"), c.get("node"), c.get("job_id"), c.get("signal"),
        "YES" if c.get("live_here") else "no",
        c.get("action", "") + (f" -> {c['followup']}" if c.get("followup") else ""))),
    ("drains", ("AT", "NODE", "STATE", "REASON"), lambda d: (
        d.get("at"), d.get("name"), d.get("actual_state"), d.get("reason"))),
)  # fmt: skip


def render_spur_state(state: Mapping[str, Any]) -> str:
    """`keeper-dev emulator spur state` as text: jobs, nodes, agents, cancels, drains."""
    cancels = state.get("cancels", [])
    live = sum(1 for c in cancels if c.get("live_here"))
    titles = {"cancels": f"cancels received ({len(cancels)}, {live} of a job live there)"}
    lines = [f"clock {state.get('clock')}, next job id {state.get('next_job_id')}"]
    for key, headers, row in _SECTIONS:
        items = state.get(key, [])
        lines.append("\n" + titles.get(key, f"{key} ({len(items)})"))
        if items:
            lines += indented_table(headers, [row(item) for item in items])
    return "\n".join(lines)


# `leak` and `complete`: how the job ends.
END_STATE = click.option(
    "--state",
    "end_state",
    type=OneOf(TERMINAL_STATES, metavar="STATE"),
    default="COMPLETED",
    show_default=True,
    help="How the job ends.",
)


@click.group()
def spur() -> None:
    """Read and script the spur emulator job reclaim runs against.

    `keeper-dev up` starts it (`python -m emulators.spur`): a controller on
    emulator.spur_controller_port and agents gpu-node-01 .. NN that dial reclaim.tap_address
    as their controller. These commands talk to its control API on
    emulator.spur_control_port (docs/spur-emulator.md).
    """


@spur.command()
@json_options
@pass_keeper
def state(keeper: KeeperContext, out: Output) -> None:
    """Show every job, node, agent holding, every cancel the agents received (live_here: the
    controller had that job running on that node, so a cancel hit a live run) and every
    drain.

    \b
    --json prints the control API's GET /state:
      {"clock", "next_job_id", "jobs": [{"job_id", "state", "allocated_nodes", "end_time", ...}],
       "nodes": [{"name", "state", "state_reason", "last_heartbeat", ...}],
       "agents": [{"node", "hostname", "target", "registered", "holdings": [{"job_id",
         "run_attempt", "kind", "status"}], ...}],
       "cancels": [{"at", "node", "job_id", "signal", "live_here", "action", "followup"}],
       "drains": [{"at", "name", "reason", "actual_state"}], "updates": [...]}
    """
    snapshot = SpurControl(keeper.settings).state()
    show(out, snapshot, render_spur_state(snapshot))


@spur.command()
@click.argument("node")
@click.option("--name", default="job", show_default=True, help="The job's name.")
@json_options
@pass_keeper
def submit(keeper: KeeperContext, node: str, name: str, out: Output) -> None:
    """Submit a job and run it on NODE (its agent holds it while it runs)."""
    job = SpurControl(keeper.settings).submit(node, name)
    show(out, job, f"job {job['job_id']} {job['state']} on {node}")


@spur.command()
@click.argument("node")
@END_STATE
@json_options
@pass_keeper
def leak(keeper: KeeperContext, node: str, end_state: str, out: Output) -> None:
    """Run a job on NODE and end it, while NODE's agent keeps holding it: the stale holding
    job reclaim exists to release. Its next heartbeats list the job; once the job has been
    over for reclaim.timing.end_grace, keeper's tap starts a reclaim."""
    control = SpurControl(keeper.settings)
    job = control.submit(node, "leaked")
    ended = control.complete(int(job["job_id"]), end_state.upper(), leak=True)
    show(out, ended, f"job {ended['job_id']} {ended['state']}; {node}'s agent still holds it")


@spur.command()
@click.argument("job_id", type=click.IntRange(1, 2**32 - 1))
@END_STATE
@click.option("--leak", is_flag=True, help="Its agents keep holding it.")
@json_options
@pass_keeper
def complete(keeper: KeeperContext, job_id: int, end_state: str, leak: bool, out: Output) -> None:
    """End JOB_ID; its agents let go of it unless --leak."""
    ended = SpurControl(keeper.settings).complete(job_id, end_state.upper(), leak=leak)
    show(out, ended, f"job {ended['job_id']} {ended['state']}")
