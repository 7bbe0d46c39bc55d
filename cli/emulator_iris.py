"""`keeper emulator iris`: read and drive the iris emulator (emulators/iris) through its
control API under /control/ on the emulator's one port (docs/iris-emulator.md)."""

from __future__ import annotations

from typing import Any

import click
import httpx

from keeper.cli.output import CommandFailed, Output, json_options

HTTP_TIMEOUT = 10.0
DEFAULT_URL = "http://127.0.0.1:10000"
URL_ENV = "KEEPER_IRIS_EMULATOR_URL"


class IrisControl:
    """The iris emulator's control API; every failure is a CommandFailed that says what to do."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.base}/control{path}"
        try:
            response = httpx.request(method, url, json=body, timeout=HTTP_TIMEOUT)
        except httpx.ConnectError as err:
            raise CommandFailed(
                f"The iris emulator is not running at {self.base}: {err}",
                hint=f"Start it with `python -m emulators.iris --port 10000`, or set {URL_ENV}.",
            ) from err
        except httpx.HTTPError as err:
            raise CommandFailed(f"{method} {url} failed: {err}") from err
        if response.status_code >= 300:
            try:
                text = str(response.json().get("error", response.text))
            except ValueError:
                text = response.text
            raise CommandFailed(f"the iris emulator refused {method} {path}: {text}")
        return response.json()


def _url_option(func: Any) -> Any:
    return click.option(
        "--url",
        envvar=URL_ENV,
        default=DEFAULT_URL,
        show_default=True,
        help=f"The emulator's address (or ${URL_ENV}).",
    )(func)


@click.group()
def iris() -> None:
    """Read and script the iris emulator job watch runs against.

    `python -m emulators.iris --port 10000` serves iris's Connect-JSON controller API and,
    on the same port, a control API under /control/ that these commands use.
    """


@iris.command()
@_url_option
@json_options
def state(url: str, out: Output) -> None:
    """Show every job (its scenario, children, task states, CPU rates), the faults and every
    LaunchJob/TerminateJob call received (the action log)."""
    snapshot = IrisControl(url).call("GET", "/state")
    if out.json:
        out.data(snapshot)
        return
    out.line(f"next scenario {snapshot['next_scenario']}, speed {snapshot['speed']}x")
    for job in snapshot["jobs"]:
        out.line(f"\n{job['job_id']}  scenario {job['scenario']}  t={job['t']:.0f}s")
        for child in job["children"]:
            states = sorted({task["state"] for task in child["tasks"]})
            out.line(f"  {child['job_id']}  {child['state']}  tasks: {', '.join(states)}")
    out.line(f"\nactions ({len(snapshot['actions'])})")
    for action in snapshot["actions"]:
        out.line(f"  {action['method']} {action['job_id']} -> {action.get('outcome')}")


@iris.command()
@click.argument("name")
@click.option("--scenario", default="healthy", show_default=True, help="What the job plays.")
@click.option("--user", default="alice", show_default=True, help="The job id is /USER/NAME.")
@click.option("--seed", type=int, default=None, help="Fixes names and culprits.")
@_url_option
@json_options
def launch(name: str, scenario: str, user: str, seed: int | None, url: str, out: Output) -> None:
    """Create job /USER/NAME playing SCENARIO (not recorded as a LaunchJob action)."""
    body = {"name": name, "user": user, "scenario": scenario, "seed": seed}
    job = IrisControl(url).call("POST", "/jobs", body)
    if out.json:
        out.data(job)
    else:
        out.line(f"{job['job_id']} playing {job['scenario']}")


@iris.command()
@click.option("--next", "next_name", default=None, help="Make LaunchJob play this one.")
@_url_option
@json_options
def scenario(next_name: str | None, url: str, out: Output) -> None:
    """List the scenarios (with --next, set the one the next LaunchJob plays)."""
    control = IrisControl(url)
    if next_name:
        control.call("POST", "/next-scenario", {"scenario": next_name})
    listing = control.call("GET", "/scenarios")
    if out.json:
        out.data(listing)
        return
    for row in listing["scenarios"]:
        mark = "*" if row["name"] == listing["default"] else " "
        out.line(f"{mark} {row['name']:<20} {row['summary']}")
