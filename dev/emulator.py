"""`keeper-dev emulator`: run the TPU emulator and drive it through its control API."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TextIO

import click
import httpx
import yaml
from pydantic import ValidationError

from dev.emulator_iris import iris
from dev.emulator_spur import spur
from emulators.tpu.faults import ERROR_CODES, FAULT_METHODS
from keeper.cli.context import KeeperContext, pass_keeper
from keeper.cli.local_stack import other_base_advice
from keeper.cli.output import CommandFailed, OneOf, Output, UsageProblem, json_options, rfc3339
from keeper.domain.common.durations import documented_duration
from keeper.domain.tpu.slice_request import SLICE_NAME_PATTERN
from keeper.runtime.dev_ports import PORT_OFFSETS
from keeper.runtime.settings import EmulatorSettings

# The scenario id that replaces the default scenario (PUT /scenarios/_default).
DEFAULT_SCENARIO = "_default"

HTTP_TIMEOUT = 10.0


METHOD_TYPE = OneOf(["*", *FAULT_METHODS], metavar="METHOD")
CODE_TYPE = OneOf(ERROR_CODES, metavar="CODE")


@click.group()
def emulator() -> None:
    """Run the TPU emulator and script it: scenarios, injected faults, its clock.

    The emulator serves the Cloud TPU v2 gRPC API on emulator.host:emulator.grpc_port
    (what the worker dials when tpu.endpoint is `emulator`) and a small HTTP control API
    on emulator.control_port, which every command here except `serve` talks to.
    `keeper-dev up` starts it in the background; `keeper-dev emulator serve` runs it in the
    foreground instead. `keeper-dev emulator spur ...` drives the spur emulator job reclaim
    runs against.
    """


def _control_url(settings: EmulatorSettings, path: str) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.control_port}{path}"


def _server_error(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(body, Mapping):
        for key in ("error", "detail", "message"):
            if body.get(key):
                value = body[key]
                return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(body)


def _call(keeper: KeeperContext, method: str, path: str, body: Any = None) -> Any:
    """One control-API request; the decoded JSON answer (or text), or CommandFailed."""
    settings = keeper.settings.emulator
    url = _control_url(settings, path)
    try:
        response = httpx.request(method, url, json=body, timeout=HTTP_TIMEOUT)
    except httpx.ConnectError as err:
        base = keeper.settings.dev.port_base
        if base is not None:
            origin = f"dev.port_base {base} + {PORT_OFFSETS['emulator.control_port']}"
        else:
            origin = "emulator.host/emulator.control_port"
        served = url.rsplit(path, 1)[0]
        raise CommandFailed(
            f"The TPU emulator is not running at {served} ({origin}): {err}",
            hint="Start it with `keeper-dev up` (or `keeper-dev emulator serve`); "
            f"{other_base_advice(keeper.settings, keeper.config_file)}.",
            url=served,
        ) from err
    except httpx.HTTPError as err:
        raise CommandFailed(f"{method} {url} failed: {err}") from err
    if response.status_code == 400:
        raise CommandFailed(f"the emulator rejected it: {_server_error(response)}")
    if response.status_code >= 300:
        raise CommandFailed(
            f"{method} {url}: HTTP {response.status_code}: {_server_error(response)}"
        )
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


# -- serve ---------------------------------------------------------------------------------


def _config_kwargs(config_type: Any, settings: EmulatorSettings) -> dict[str, Any]:
    values = settings.model_dump()
    if dataclasses.is_dataclass(config_type):
        accepted = {f.name for f in dataclasses.fields(config_type)}
    elif hasattr(config_type, "model_fields"):
        accepted = set(config_type.model_fields)
    else:
        accepted = set(inspect.signature(config_type).parameters)
    return {key: value for key, value in values.items() if key in accepted}


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
    config = EmulatorConfig(**_config_kwargs(EmulatorConfig, settings))
    click.echo(
        f"TPU emulator: gRPC {settings.host}:{settings.grpc_port}, "
        f"control {_control_url(settings, '/')}",
        err=True,
    )
    try:
        result = serve_emulator(config)
        if inspect.isawaitable(result):
            asyncio.run(_await(result))
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


async def _await(awaitable: Any) -> Any:
    return await awaitable


# -- state ---------------------------------------------------------------------------------


def _items(value: Any, id_key: str = "id") -> list[dict[str, Any]]:
    """A list of records from either a list of dicts or a dict keyed by id."""
    if isinstance(value, Mapping):
        out = []
        for key, item in value.items():
            record = dict(item) if isinstance(item, Mapping) else {"state": item}
            record.setdefault(id_key, key)
            out.append(record)
        return out
    if isinstance(value, list):
        return [dict(item) if isinstance(item, Mapping) else {id_key: item} for item in value]
    return []


def _pick(record: Mapping[str, Any], *keys: str, default: Any = "-") -> Any:
    for key in keys:
        if record.get(key) not in (None, ""):
            return record[key]
    return default


def _count(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return len(list(value))
    return 0


def _table(headers: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    cells = [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in cells
    ]
    return lines


def render_state(state: Mapping[str, Any]) -> str:
    """A compact, human summary of the emulator's GET /state answer."""
    lines: list[str] = []
    clock = _pick(state, "now", default=None)
    if clock is not None:
        lines.append(f"emulator clock: {clock}")

    qrs = _items(_pick(state, "queued_resources", default=[]))
    lines.append(f"queued resources ({len(qrs)}):")
    if qrs:
        lines += _table(
            ("ID", "STATE", "DELETED_AT"),
            [
                (
                    _pick(qr, "id", "name"),
                    _pick(qr, "state"),
                    _pick(qr, "deleted_at"),
                )
                for qr in qrs
            ],
        )

    nodes = _items(_pick(state, "nodes", default=[]))
    lines.append(f"nodes ({len(nodes)}):")
    if nodes:
        lines += _table(
            ("ID", "STATE", "IPS"),
            [
                (
                    _pick(node, "id", "name"),
                    _pick(node, "state"),
                    _count(_pick(node, "ips", default=[])),
                )
                for node in nodes
            ],
        )

    vms = _items(_pick(state, "vms", default=[]))
    booted = sum(1 for vm in vms if vm.get("booted_at") or vm.get("booted") is True)
    phoned = sum(1 for vm in vms if vm.get("phoned_home_at") or vm.get("phoned_home") is True)
    stopped = sum(1 for vm in vms if vm.get("stopped_at"))
    lines.append(f"VMs: {len(vms)} total, {booted} booted, {phoned} phoned home, {stopped} stopped")

    calls = _pick(state, "calls", "api_calls", default={})
    if isinstance(calls, Mapping) and calls:
        total = sum(v for v in calls.values() if isinstance(v, int))
        lines.append(f"API calls ({total}):")
        width = max(len(str(k)) for k in calls)
        lines += [f"  {str(k).ljust(width)}  {v}" for k, v in sorted(calls.items())]
    else:
        lines.append("API calls: none")

    faults = _pick(state, "faults", default=[])
    if isinstance(faults, list) and faults:
        lines.append(f"pending faults ({len(faults)}):")
        lines += [
            f"  {_pick(f, 'method')} -> {_pick(f, 'code')} x{_pick(f, 'count')}"
            + (f" (slice {f['slice']})" if f.get("slice") else "")
            for f in faults
            if isinstance(f, Mapping)
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
    if out.json:
        out.data(answer)
    elif isinstance(answer, Mapping):
        out.line(render_state(answer))
    else:
        out.line(str(answer))


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
    answer = _call(keeper, "PUT", f"/scenarios/{slice_id}", body)
    accepted = answer.get("scenario") if isinstance(answer, Mapping) else None
    if out.json:
        out.data({"slice_id": slice_id, "scenario": accepted})
        return
    out.line(f"scenario set for {slice_id}")
    if accepted:
        out.line("  " + json.dumps(accepted, separators=(", ", ": ")))


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
    answer = _call(keeper, "POST", "/faults", body)
    added = answer.get("fault") if isinstance(answer, Mapping) else None
    added = added if isinstance(added, Mapping) else body
    if out.json:
        out.data({"fault": added})
        return
    out.line(
        f"fault added: the next {added.get('count', count)} call(s) of "
        f"{added.get('method', method)} fail with {added.get('code', code)}"
        + (f" (slice {slice_name})" if slice_name else "")
    )


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
    now = answer.get("now") if isinstance(answer, Mapping) else None
    if out.json:
        out.data({"advanced_by": amount, "now": _utc(now)})
        return
    clock = f"; emulator time is now {_utc(now)}" if now else ""
    out.line(f"clock advanced by {amount:g}s{clock}")


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


def _utc(moment: Any) -> Any:
    """The emulator's clock in keeper's one timestamp format."""
    if not isinstance(moment, str):
        return moment
    try:
        return rfc3339(datetime.fromisoformat(moment))
    except ValueError:
        return moment


# The lists come from the emulator itself, so the help never names a method it lacks.
fault.help = (fault.help or "").format(
    methods=", ".join(FAULT_METHODS), codes=", ".join(ERROR_CODES)
)

emulator.add_command(spur)
emulator.add_command(iris)
