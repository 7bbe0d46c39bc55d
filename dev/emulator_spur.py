"""`keeper-dev emulator spur`: read and drive the spur emulator (emulators/spur) through its
control API, on emulator.host:emulator.spur_control_port (docs/spur-emulator.md)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import click
import httpx

from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import CommandFailed, OneOf, Output, json_options, rfc3339
from keeper.domain.common.untrusted import terminal_text
from keeper.runtime.dev_ports import dial_host
from keeper.runtime.settings import Settings

HTTP_TIMEOUT = 10.0
TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


def control_url(settings: Settings) -> str:
    emu = settings.emulator
    return f"http://{dial_host(emu.host)}:{emu.spur_control_port}"


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, Mapping) and isinstance(body.get("error"), str):
        return str(body["error"])
    return str(body)


class SpurControl:
    """The spur emulator's control API; every failure is a CommandFailed that says what to do."""

    def __init__(self, settings: Settings) -> None:
        self.base = control_url(settings)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.base}{path}"
        try:
            response = httpx.request(method, url, json=body, timeout=HTTP_TIMEOUT)
        except httpx.ConnectError as err:
            raise CommandFailed(
                f"The spur emulator is not running at {self.base} "
                f"(emulator.host/emulator.spur_control_port): {err}",
                hint="Start it with `keeper-dev up`.",
            ) from err
        except httpx.HTTPError as err:
            raise CommandFailed(f"{method} {url} failed: {err}") from err
        if response.status_code in (400, 404, 409):
            raise CommandFailed(
                f"the spur emulator refused {method} {path}: {_error_text(response)}",
                hint="`keeper-dev emulator spur state` shows its jobs and nodes.",
            )
        if response.status_code >= 300:
            raise CommandFailed(
                f"{method} {url}: HTTP {response.status_code}: {_error_text(response)}"
            )
        return response.json()

    def state(self) -> dict[str, Any]:
        state = with_rfc3339(self.call("GET", "/state"))
        assert isinstance(state, dict)
        return state

    def submit(self, node: str, name: str = "job") -> dict[str, Any]:
        """A job dispatched and committed on `node` at once: RUNNING there."""
        answer = self.call("POST", "/jobs", {"name": name, "nodes": [node]})
        job = answer["jobs"][0]
        assert isinstance(job, dict)
        return job

    def complete(self, job_id: int, state: str = "COMPLETED", leak: bool = False) -> dict[str, Any]:
        job = self.call("POST", f"/jobs/{job_id}/complete", {"state": state, "leak": leak})
        assert isinstance(job, dict)
        return job


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
        try:
            return rfc3339(datetime.fromisoformat(value))
        except ValueError:
            return value
    if key in _TIME_KEYS and isinstance(value, int | float) and not isinstance(value, bool):
        return rfc3339(datetime.fromtimestamp(value, UTC))
    return value


def holdings_of(state: Mapping[str, Any], node: str) -> list[int]:
    for agent in state.get("agents", []):
        if agent.get("node") == node:
            return sorted(int(h["job_id"]) for h in agent.get("holdings", []))
    return []


def _agent_nodes(state: Mapping[str, Any]) -> list[str]:
    return [str(a.get("node")) for a in state.get("agents", [])]


def _table(headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    cells = [headers, *[tuple(terminal_text(str(c)) for c in row) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]


def render_spur_state(state: Mapping[str, Any]) -> str:
    """`keeper-dev emulator spur state` as text: jobs, nodes, agents, cancels, drains."""
    lines = [f"clock {state.get('clock')}, next job id {state.get('next_job_id')}"]
    jobs = state.get("jobs", [])
    lines.append(f"\njobs ({len(jobs)})")
    if jobs:
        lines += _table(
            ("JOB", "NAME", "STATE", "NODES", "ENDED"),
            [
                (
                    j["job_id"],
                    j.get("name", ""),
                    j.get("state", ""),
                    ",".join(j.get("allocated_nodes") or []) or "-",
                    j.get("end_time") or "-",
                )
                for j in jobs
            ],
        )
    nodes = state.get("nodes", [])
    lines.append(f"\nnodes ({len(nodes)})")
    if nodes:
        lines += _table(
            ("NODE", "STATE", "REASON", "LAST HEARTBEAT", "JOBS IN IT"),
            [
                (
                    n["name"],
                    n.get("state", ""),
                    n.get("state_reason") or "-",
                    n.get("last_heartbeat") or "-",
                    ",".join(map(str, n.get("last_running_jobs") or [])) or "-",
                )
                for n in nodes
            ],
        )
    agents = state.get("agents", [])
    lines.append(f"\nagents ({len(agents)})")
    if agents:
        lines += _table(
            ("NODE", "TARGET", "REGISTERED", "HOLDS"),
            [
                (
                    a.get("node"),
                    a.get("target", ""),
                    "yes" if a.get("registered") else "no",
                    ", ".join(
                        f"{h['job_id']} ({h.get('kind')}, {h.get('status')})"
                        for h in a.get("holdings", [])
                    )
                    or "-",
                )
                for a in agents
            ],
        )
    cancels = state.get("cancels", [])
    live = sum(1 for c in cancels if c.get("live_here"))
    lines.append(f"\ncancels received ({len(cancels)}, {live} of a job live there)")
    if cancels:
        lines += _table(
            ("AT", "NODE", "JOB", "SIGNAL", "LIVE HERE", "ACTION"),
            [
                (
                    c.get("at"),
                    c.get("node"),
                    c.get("job_id"),
                    c.get("signal"),
                    "YES" if c.get("live_here") else "no",
                    c.get("action", "") + (f" -> {c['followup']}" if c.get("followup") else ""),
                )
                for c in cancels
            ],
        )
    drains = state.get("drains", [])
    lines.append(f"\ndrains ({len(drains)})")
    if drains:
        lines += _table(
            ("AT", "NODE", "STATE", "REASON"),
            [(d.get("at"), d.get("name"), d.get("actual_state"), d.get("reason")) for d in drains],
        )
    return "\n".join(lines)


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
    if out.json:
        out.data(snapshot)
    else:
        out.line(render_spur_state(snapshot))


@spur.command()
@click.argument("node")
@click.option("--name", default="job", show_default=True, help="The job's name.")
@json_options
@pass_keeper
def submit(keeper: KeeperContext, node: str, name: str, out: Output) -> None:
    """Submit a job and run it on NODE (its agent holds it while it runs)."""
    control = SpurControl(keeper.settings)
    _known_node(control, node)
    job = control.submit(node, name)
    if out.json:
        out.data(job)
    else:
        out.line(f"job {job['job_id']} {job['state']} on {node}")


@spur.command()
@click.argument("node")
@click.option(
    "--state",
    "end_state",
    type=OneOf(TERMINAL_STATES, metavar="STATE"),
    default="COMPLETED",
    show_default=True,
    help="How the job ends.",
)
@json_options
@pass_keeper
def leak(keeper: KeeperContext, node: str, end_state: str, out: Output) -> None:
    """Run a job on NODE and end it, while NODE's agent keeps holding it: the stale holding
    job reclaim exists to release. Its next heartbeats list the job; once the job has been
    over for reclaim.timing.end_grace, keeper's tap starts a reclaim."""
    control = SpurControl(keeper.settings)
    _known_node(control, node)
    job = control.submit(node, "leaked")
    ended = control.complete(int(job["job_id"]), end_state.upper(), leak=True)
    if out.json:
        out.data(ended)
    else:
        out.line(f"job {ended['job_id']} {ended['state']}; {node}'s agent still holds it")


@spur.command()
@click.argument("job_id", type=click.IntRange(1, 2**32 - 1))
@click.option(
    "--state",
    "end_state",
    type=OneOf(TERMINAL_STATES, metavar="STATE"),
    default="COMPLETED",
    show_default=True,
    help="How the job ends.",
)
@click.option("--leak", is_flag=True, help="Its agents keep holding it.")
@json_options
@pass_keeper
def complete(keeper: KeeperContext, job_id: int, end_state: str, leak: bool, out: Output) -> None:
    """End JOB_ID; its agents let go of it unless --leak."""
    ended = SpurControl(keeper.settings).complete(job_id, end_state.upper(), leak=leak)
    if out.json:
        out.data(ended)
    else:
        out.line(f"job {ended['job_id']} {ended['state']}")


def _known_node(control: SpurControl, node: str) -> None:
    nodes = _agent_nodes(control.state())
    if node not in nodes:
        raise CommandFailed(
            f"the spur emulator has no agent on node {node!r}; nothing was done",
            hint=f"Its nodes: {', '.join(nodes) or 'none'}.",
            node=node,
        )
