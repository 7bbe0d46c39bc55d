"""`keeper-dev emulator iris`: read and drive the iris emulator (emulators/iris) through its
control API under /control/ on the emulator's one port (docs/iris-emulator.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
import httpx

from dev.devstack.layout import iris_emulator_serves
from keeper.cli.context import KeeperContext, current_keeper
from keeper.cli.local_stack import other_base_advice
from keeper.cli.output import CommandFailed, Output, json_options
from keeper.runtime.dev_ports import PORT_BASE_ENV, PORT_OFFSETS, dial_host

HTTP_TIMEOUT = 10.0
URL_ENV = "KEEPER_IRIS_EMULATOR_URL"


@dataclass(frozen=True)
class IrisAddress:
    """Where the commands find the emulator, and how the operator came to point there."""

    url: str
    # The settings or option that gave the URL, as an error names it.
    origin: str
    # What to do when nothing answers there.
    hint: str


def emulator_address(url: str | None, given_by: str = "--url") -> IrisAddress:
    """The URL given (--url or KEEPER_IRIS_EMULATOR_URL), else the one the dev stack runs the
    emulator on: emulator.host and emulator.iris_port, which the port base moves, as every
    other emulator command's address follows the stack's settings."""
    if url:
        return IrisAddress(
            url,
            given_by,
            f"Check {given_by}, or leave it out to use the dev stack's emulator "
            "(emulator.iris_port; `keeper-dev up` starts it).",
        )
    settings = (current_keeper() or KeeperContext()).settings
    emu = settings.emulator
    base = settings.dev.port_base
    if base is not None:
        origin = f"dev.port_base {base} + {PORT_OFFSETS['emulator.iris_port']}"
    else:
        origin = "emulator.host/emulator.iris_port"
    elsewhere = f"{other_base_advice(settings)}; an emulator elsewhere: --url or {URL_ENV}."
    if iris_emulator_serves(settings):
        start = "Start the dev stack with `keeper-dev up` (it runs the iris emulator there); "
    else:
        # The stack would not start one: the worker watches a real controller.
        start = (
            f"watch.controller_url is {settings.watch.controller_url}, not the emulator, so "
            "`keeper-dev up` runs none; "
        )
    return IrisAddress(f"http://{dial_host(emu.host)}:{emu.iris_port}", origin, start + elsewhere)


class IrisControl:
    """The iris emulator's control API; every failure is a CommandFailed that says what to do."""

    def __init__(self, address: IrisAddress) -> None:
        self.address = address
        self.base = address.url.rstrip("/")

    def call(
        self, method: str, path: str, body: Any = None, refused: dict[int, str] | None = None
    ) -> Any:
        """`refused`: what to do next when the emulator answers with that HTTP status."""
        url = f"{self.base}/control{path}"
        try:
            response = httpx.request(method, url, json=body, timeout=HTTP_TIMEOUT)
        except httpx.ConnectError as err:
            raise CommandFailed(
                f"The iris emulator is not running at {self.base} ({self.address.origin}): {err}",
                hint=self.address.hint,
                url=self.base,
            ) from err
        except httpx.HTTPError as err:
            raise CommandFailed(f"{method} {url} failed: {err}") from err
        if response.status_code >= 300:
            try:
                text = str(response.json().get("error", response.text))
            except ValueError:
                text = response.text
            raise CommandFailed(
                f"the iris emulator refused {method} {path}: {text}",
                hint=(refused or {}).get(response.status_code)
                or "`keeper-dev emulator iris scenario` lists the scenarios it plays, "
                "`keeper-dev emulator iris state` its jobs.",
                url=self.base,
                http_status=response.status_code,
            )
        return response.json()


def _control(url: str | None) -> IrisControl:
    """The control API at --url (or KEEPER_IRIS_EMULATOR_URL), else the dev stack's."""
    context = click.get_current_context(silent=True)
    from_env = (
        context is not None
        and context.get_parameter_source("url") is click.core.ParameterSource.ENVIRONMENT
    )
    return IrisControl(emulator_address(url, URL_ENV if from_env else "--url"))


def _url_option(func: Any) -> Any:
    return click.option(
        "--url",
        envvar=URL_ENV,
        default=None,
        metavar="URL",
        help=f"The emulator's address (or ${URL_ENV}). Default: the dev stack's, "
        "http://emulator.host:emulator.iris_port, which the port base moves "
        f"(dev.port_base, {PORT_BASE_ENV}: base + 10).",
    )(func)


@click.group()
def iris() -> None:
    """Read and script the iris emulator job watch runs against.

    `keeper-dev up` runs it (`python -m emulators.iris`) on emulator.iris_port (10000, or
    base + 10 with dev.port_base / KEEPER_DEV_PORT_BASE): iris's Connect-JSON controller
    API and, on the same port, a control API under /control/ that these commands use.
    They talk to that port unless --url (KEEPER_IRIS_EMULATOR_URL) names another.
    """


@iris.command()
@_url_option
@json_options
def state(url: str | None, out: Output) -> None:
    """Show every job (its scenario, children, task states, CPU rates), the faults and every
    LaunchJob/TerminateJob call received (the action log)."""
    snapshot = _control(url).call("GET", "/state")
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
    if out.json:
        out.data(job)
    else:
        out.line(f"{job['job_id']} playing {job['scenario']}")


@iris.command()
@click.option("--next", "next_name", default=None, help="Make LaunchJob play this one.")
@_url_option
@json_options
def scenario(next_name: str | None, url: str | None, out: Output) -> None:
    """List the scenarios (with --next, set the one the next LaunchJob plays)."""
    control = _control(url)
    if next_name:
        control.call("POST", "/next-scenario", {"scenario": next_name})
    listing = control.call("GET", "/scenarios")
    if out.json:
        out.data(listing)
        return
    for row in listing["scenarios"]:
        mark = "*" if row["name"] == listing["default"] else " "
        out.line(f"{mark} {row['name']:<20} {row['summary']}")
