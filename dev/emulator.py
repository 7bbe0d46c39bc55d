"""`keeper-dev emulator`: run the TPU emulator and drive it through its control API."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TextIO

import click
import yaml
from pydantic import ValidationError

from dev.control_api import at_stack, indented_table, show
from dev.emulator_iris import iris
from dev.emulator_spur import spur
from emulators.tpu.faults import ERROR_CODES, FAULT_METHODS
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.output import OneOf, Output, UsageProblem, json_options, rfc3339
from keeper.domain.common.durations import documented_duration
from keeper.domain.tpu.slice_request import SLICE_NAME_PATTERN
from keeper.runtime.dev_ports import dial_host

# The scenario id that replaces the default scenario (PUT /scenarios/_default).
DEFAULT_SCENARIO = "_default"
METHOD_TYPE = OneOf(["*", *FAULT_METHODS], metavar="METHOD")
CODE_TYPE = OneOf(ERROR_CODES, metavar="CODE")


@click.group(commands=[spur, iris])
def emulator() -> None:
    """Run the TPU emulator and script it: scenarios, injected faults, its clock.

    The emulator serves the Cloud TPU v2 gRPC API on emulator.host:emulator.grpc_port
    (what the worker dials when tpu.endpoint is `emulator`) and a small HTTP control API
    on emulator.control_port, which every command here except `serve` talks to.
    `keeper-dev up` starts it in the background; `keeper-dev emulator serve` runs it in the
    foreground instead. `keeper-dev emulator spur ...` drives the spur emulator job reclaim
    runs against.
    """


def _call(keeper: KeeperContext, method: str, path: str, body: Any = None) -> Any:
    start = "Start it with `keeper-dev up` (or `keeper-dev emulator serve`)"
    control = at_stack(keeper.settings, "TPU emulator", "emulator.control_port", start)
    return control.call(method, path, body)


# -- serve ---------------------------------------------------------------------------------


@emulator.command()
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Level of the emulator's log lines on stderr.",
)
@pass_keeper
def serve(keeper: KeeperContext, log_level: str) -> None:
    """Run the emulator in the foreground with the `emulator:` settings (Ctrl-C stops it).

    Uses emulator.host, grpc_port, control_port, ip_prefix, vm_health_port and
    scenario_file. Do not run it while `keeper-dev up` has one running on the same ports.
    """
    from emulators.tpu import EmulatorConfig
    from emulators.tpu import serve as serve_emulator

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = keeper.settings.emulator
    config = EmulatorConfig(**settings.model_dump(include=set(EmulatorConfig.model_fields)))
    click.echo(
        f"TPU emulator: gRPC {settings.host}:{settings.grpc_port}, "
        f"control http://{dial_host(settings.host)}:{settings.control_port}/",
        err=True,
    )
    try:
        asyncio.run(serve_emulator(config))
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


# -- state ---------------------------------------------------------------------------------


def render_state(state: Mapping[str, Any]) -> str:
    """A compact, human summary of the emulator's GET /state answer."""
    lines = [f"emulator clock: {state['now']}"] if state.get("now") else []
    qrs = state.get("queued_resources", [])
    lines.append(f"queued resources ({len(qrs)}):")
    if qrs:
        rows = [(qr["id"], qr["state"], qr.get("deleted_at") or "-") for qr in qrs]
        lines += indented_table(("ID", "STATE", "DELETED_AT"), rows)
    nodes = state.get("nodes", [])
    lines.append(f"nodes ({len(nodes)}):")
    if nodes:
        lines += indented_table(
            ("ID", "STATE", "IPS"), [(n["id"], n["state"], len(n["ips"])) for n in nodes]
        )
    vms = state.get("vms", [])
    booted, phoned, stopped = (
        sum(1 for vm in vms if vm.get(key)) for key in ("booted_at", "phoned_home_at", "stopped_at")
    )
    lines.append(f"VMs: {len(vms)} total, {booted} booted, {phoned} phoned home, {stopped} stopped")
    calls = state.get("calls", {})
    if calls:
        lines.append(f"API calls ({sum(calls.values())}):")
        width = max(len(k) for k in calls)
        lines += [f"  {k.ljust(width)}  {v}" for k, v in sorted(calls.items())]
    else:
        lines.append("API calls: none")
    faults = state.get("faults", [])
    if faults:
        lines.append(f"pending faults ({len(faults)}):")
        lines += [
            f"  {f['method']} -> {f['code']} x{f['count']}"
            + (f" (slice {f['slice']})" if f.get("slice") else "")
            for f in faults
        ]
    return "\n".join(lines)


@emulator.command()
@json_options
@pass_keeper
def state(keeper: KeeperContext, out: Output) -> None:
    """Show the emulator's state: queued resources, nodes, VMs and API call counts.

    Reads GET /state from the control API. Without --json it prints a compact table:
    queued resources (id, state, deleted_at), nodes (id, state, number of IPs), how many
    VMs booted and phoned home, and the API calls received per method. --json prints
    the emulator's state document as it is.
    """
    answer = _call(keeper, "GET", "/state")
    show(out, answer, render_state(answer))


# -- scripting -----------------------------------------------------------------------------


def _slice_id(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # A scenario is looked up by QR id, which is the slice name: any other id never applies.
    if value != DEFAULT_SCENARIO and not re.fullmatch(SLICE_NAME_PATTERN, value):
        raise click.BadParameter(
            f"{value!r} is not a slice name (lowercase letters, digits and '-', starting "
            f"with a letter, at most 40) nor {DEFAULT_SCENARIO}"
        )
    return value


@emulator.command()
@click.argument("slice_id", callback=_slice_id)
@click.option(
    "-f",
    "--file",
    "file",
    type=click.File("r"),
    help="The scenario as a YAML (or JSON) file; - reads standard input.",
)
@click.option("--inline", metavar="JSON", help="The scenario as inline JSON.")
@json_options
@pass_keeper
def scenario(
    keeper: KeeperContext, slice_id: str, file: TextIO | None, inline: str | None, out: Output
) -> None:
    """Set how the emulator plays out slice SLICE_ID (PUT /scenarios/SLICE_ID).

    Give the scenario with exactly one of --file F.yaml or --inline '{...}'; the fields
    are described in docs/emulator.md and checked before anything is sent. SLICE_ID
    `_default` replaces the default scenario.

    \b
    Examples:
      keeper-dev emulator scenario train-a --inline '{"assign_after": 5, "active_after": 2}'
      keeper-dev emulator scenario _default -f emulators/scenarios/demo.yaml
    """
    from emulators.tpu import Scenario

    if (file is None) == (inline is None):
        raise UsageProblem("give the scenario with exactly one of --file or --inline")
    flag = "--file" if file is not None else "--inline"
    try:
        body = yaml.safe_load(file.read()) if file is not None else json.loads(inline or "")
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        raise UsageProblem(f"not valid {'YAML' if file else 'JSON'}: {err}", flag) from err
    try:
        Scenario.model_validate(body)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'scenario'}: {e['msg']}" for e in err.errors()
        )
        raise UsageProblem(f"not a scenario: {problems} (docs/emulator.md)", flag) from None
    accepted = _call(keeper, "PUT", f"/scenarios/{slice_id}", body)["scenario"]
    text = f"scenario set for {slice_id}\n  " + json.dumps(accepted, separators=(", ", ": "))
    show(out, {"slice_id": slice_id, "scenario": accepted}, text)


@emulator.command()
@click.argument("method", type=METHOD_TYPE)
@click.argument("code", type=CODE_TYPE)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many calls of METHOD fail before it behaves again.",
)
@click.option(
    "--slice",
    "slice_name",
    metavar="ID",
    default=None,
    help="Only calls about this QR or node id (a QR's nodes included); default any call.",
)
@click.option(
    "--when",
    type=click.Choice(["before", "after"]),
    default="before",
    show_default=True,
    help="before: the call fails and does nothing; after: it takes effect, then fails "
    "(a response lost to a timeout).",
)
@json_options
@pass_keeper
def fault(
    keeper: KeeperContext,
    method: str,
    code: str,
    count: int,
    slice_name: str | None,
    when: str,
    out: Output,
) -> None:
    """Make the next calls of API METHOD fail with gRPC status CODE (POST /faults).

    METHOD is one the emulator serves, or * for every method: {methods}.

    CODE is a gRPC status name other than OK, in any case: {codes}.

    \b
    Examples:
      keeper-dev emulator fault CreateQueuedResource RESOURCE_EXHAUSTED
      keeper-dev emulator fault GetQueuedResource UNAVAILABLE --count 3
    """
    body = {"method": method, "code": code, "count": count, "slice": slice_name, "when": when}
    added = _call(keeper, "POST", "/faults", body)["fault"]
    text = (
        f"fault added: the next {added['count']} call(s) of {added['method']} fail with "
        f"{added['code']}" + (f" (slice {slice_name})" if slice_name else "")
    )
    show(out, {"fault": added}, text)


@emulator.command()
@click.argument("seconds")
@json_options
@pass_keeper
def advance(keeper: KeeperContext, seconds: str, out: Output) -> None:
    """Move the emulator's clock forward by SECONDS (POST /clock/advance).

    SECONDS is a number of seconds or a duration such as 90s, 10m or 1h30m. Phases that
    are timed (QR provisioning, VM boot) complete as if that much time had passed.
    """
    amount = _positive_seconds(seconds)
    answer = _call(keeper, "POST", "/clock/advance", {"seconds": amount})
    now = rfc3339(datetime.fromisoformat(answer["now"]))
    show(
        out,
        {"advanced_by": amount, "now": now},
        f"clock advanced by {amount:g}s; emulator time is now {now}",
    )


def _positive_seconds(text: str) -> float:
    try:
        number: float | None = float(text)  # a bare number of seconds
    except ValueError:
        number = None
    try:
        amount = documented_duration(text.strip() if number is None else number)
    except ValueError as err:
        raise UsageProblem(str(err), "SECONDS") from None
    if amount <= timedelta(0):
        raise UsageProblem(f"{text!r}: must be positive", "SECONDS")
    return amount.total_seconds()


# The lists come from the emulator itself, so the help never names a method it lacks.
fault.help = (fault.help or "").format(
    methods=", ".join(FAULT_METHODS), codes=", ".join(ERROR_CODES)
)
