"""`keeper-dev emulator iris`: read and drive the iris emulator (emulators/iris) through its
control API under /control/ on the emulator's one port (docs/iris-emulator.md)."""

from __future__ import annotations

import click

from dev.control_api import ControlAPI, at_stack, show
from dev.devstack.layout import iris_emulator_serves
from keeper.cli.context import KeeperContext, current_keeper
from keeper.cli.output import Output, json_options
from keeper.runtime.dev_ports import PORT_BASE_ENV

URL_ENV = "KEEPER_IRIS_EMULATOR_URL"
# The scenarios and the jobs: what to look at when the emulator refuses a call.
LOOK = (
    "`keeper-dev emulator iris scenario` lists the scenarios it plays, "
    "`keeper-dev emulator iris state` its jobs."
)


def _control(url: str | None) -> ControlAPI:
    """The control API at --url (or KEEPER_IRIS_EMULATOR_URL), else where the dev stack runs
    the emulator: emulator.host and emulator.iris_port, which the port base moves, as every
    other emulator command's address follows the stack's settings."""
    if url:
        source = click.get_current_context().get_parameter_source("url")
        given_by = URL_ENV if source is click.core.ParameterSource.ENVIRONMENT else "--url"
        hint = (
            f"Check {given_by}, or leave it out to use the dev stack's emulator "
            "(emulator.iris_port; `keeper-dev up` starts it)."
        )
        return ControlAPI("iris emulator", url.rstrip("/"), given_by, hint, LOOK, "/control")
    settings = (current_keeper() or KeeperContext()).settings
    if iris_emulator_serves(settings):
        start = "Start the dev stack with `keeper-dev up` (it runs the iris emulator there)"
    else:
        # The stack would not start one: the worker watches a real controller.
        start = (
            f"watch.controller_url is {settings.watch.controller_url}, not the emulator, so "
            "`keeper-dev up` runs none"
        )
    also = f"; an emulator elsewhere: --url or {URL_ENV}"
    return at_stack(
        settings,
        "iris emulator",
        "emulator.iris_port",
        start,
        also,
        refused_hint=LOOK,
        prefix="/control",
    )


URL_OPTION = click.option(
    "--url",
    envvar=URL_ENV,
    default=None,
    metavar="URL",
    help=f"The emulator's address (or ${URL_ENV}). Default: the dev stack's, "
    "http://emulator.host:emulator.iris_port, which the port base moves "
    f"(dev.port_base, {PORT_BASE_ENV}: base + 10).",
)


@click.group()
def iris() -> None:
    """Read and script the iris emulator job watch runs against.

    `keeper-dev up` runs it (`python -m emulators.iris`) on emulator.iris_port (10000, or
    base + 10 with dev.port_base / KEEPER_DEV_PORT_BASE): iris's Connect-JSON controller
    API and, on the same port, a control API under /control/ that these commands use.
    They talk to that port unless --url (KEEPER_IRIS_EMULATOR_URL) names another.
    """


@iris.command()
@URL_OPTION
@json_options
def state(url: str | None, out: Output) -> None:
    """Show every job (its scenario, children, task states, CPU rates), the faults and every
    LaunchJob/TerminateJob call received (the action log)."""
    snapshot = _control(url).call("GET", "/state")
    lines = [f"next scenario {snapshot['next_scenario']}, speed {snapshot['speed']}x"]
    for job in snapshot["jobs"]:
        lines.append(f"\n{job['job_id']}  scenario {job['scenario']}  t={job['t']:.0f}s")
        for child in job["children"]:
            states = sorted({task["state"] for task in child["tasks"]})
            lines.append(f"  {child['job_id']}  {child['state']}  tasks: {', '.join(states)}")
    lines.append(f"\nactions ({len(snapshot['actions'])})")
    lines += [f"  {a['method']} {a['job_id']} -> {a.get('outcome')}" for a in snapshot["actions"]]
    show(out, snapshot, "\n".join(lines))


@iris.command()
@click.argument("name")
@click.option("--scenario", default="healthy", show_default=True, help="What the job plays.")
@click.option("--user", default="alice", show_default=True, help="The job id is /USER/NAME.")
@click.option("--seed", type=int, default=None, help="Fixes names and culprits.")
@URL_OPTION
@json_options
def launch(
    name: str, scenario: str, user: str, seed: int | None, url: str | None, out: Output
) -> None:
    """Create job /USER/NAME playing SCENARIO (not recorded as a LaunchJob action)."""
    body = {"name": name, "user": user, "scenario": scenario, "seed": seed}
    job_id = name if name.startswith("/") else f"/{user}/{name}"
    taken = (
        f"Job {job_id} is still running: launch under another NAME (or --user), or again once "
        "it has finished; `keeper-dev emulator iris state` lists the jobs."
    )
    job = _control(url).call("POST", "/jobs", body, refused={409: taken})
    show(out, job, f"{job['job_id']} playing {job['scenario']}")


@iris.command()
@click.option("--next", "next_name", default=None, help="Make LaunchJob play this one.")
@URL_OPTION
@json_options
def scenario(next_name: str | None, url: str | None, out: Output) -> None:
    """List the scenarios (with --next, set the one the next LaunchJob plays)."""
    control = _control(url)
    if next_name:
        control.call("POST", "/next-scenario", {"scenario": next_name})
    listing = control.call("GET", "/scenarios")
    rows = [
        f"{'*' if row['name'] == listing['default'] else ' '} {row['name']:<20} {row['summary']}"
        for row in listing["scenarios"]
    ]
    show(out, listing, "\n".join(rows))
