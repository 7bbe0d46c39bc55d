"""`keeper tpu bootstrap`'s arguments: parsed and checked in the CLI's own names.

A bad value is refused (exit 2) naming the flag it came from, before anything connects or
starts; the request model's field names never reach the operator.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import click
from pydantic import ValidationError

from keeper.cli.output import UsageProblem
from keeper.domain.common.durations import FORMS, documented_duration
from keeper.domain.tpu.naming import SLICE_NAME_RULE, slice_name_problem
from keeper.domain.tpu.phases import DEFAULT_DEADLINES
from keeper.domain.tpu.slice_request import SliceRequest
from keeper.domain.tpu.topology import topology_problem
from keeper.runtime.settings import Settings

# A request field -> the argument or option that sets it.
FLAGS = {
    "slice_name": "SLICE_NAME",
    "accelerator_type": "--accelerator-type",
    "capacity": "--capacity",
    "reservation_name": "--reservation",
    "guaranteed_min_duration": "--min-duration",
    "runtime_version": "--runtime-version",
    "node_count": "--node-count",
    "vms_per_node": "--vms-per-node",
    "project": "--project (or tpu.project in the settings)",
    "zone": "--zone (or tpu.zone in the settings)",
    "health_port": "--health-port",
    "health_path": "--health-path",
    "labels": "--label",
    "poll_interval": "--poll-interval (or bootstrap.poll_interval in the settings)",
    **{f"deadlines.{phase.value}": f"--{phase.value}-deadline" for phase in DEFAULT_DEADLINES},
}


class Duration(click.ParamType):
    """A positive duration: "30s", "10m", "1h30m", ISO-8601 or seconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta):
            return value
        try:
            parsed = documented_duration(value)
        except ValueError:
            parsed = None
        if str(value).strip().startswith("-") or (
            isinstance(parsed, timedelta) and parsed <= timedelta(0)
        ):
            self.fail(f"{value!r}: a duration must be longer than 0, e.g. 10m", param, ctx)
        if not isinstance(parsed, timedelta):
            self.fail(f"{value!r} is not a duration: expected {FORMS}", param, ctx)
        return parsed


DURATION = Duration()


class SliceName(click.ParamType):
    """A slice name by the one rule (domain/tpu/naming.py): every `keeper tpu` command that
    takes one refuses a bad name alike (exit 2 naming the argument), before connecting."""

    name = "slice_name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = slice_name_problem(str(value))
        if problem is not None:
            self.fail(problem, param, ctx)
        return value


SLICE_NAME = SliceName()


def parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    labels = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep:
            raise UsageProblem(f"{value!r} is not KEY=VALUE", param_hint="--label")
        labels[key] = text
    return labels


def _where(loc: tuple[int | str, ...]) -> str | None:
    path = ".".join(str(p) for p in loc)
    for field, flag in FLAGS.items():
        if path == field or path.startswith(field + "."):
            return flag
    return path or None


# Plain words for the fields whose rule is a pattern (pydantic would quote the regex).
PATTERN_WORDS = {
    "SLICE_NAME": SLICE_NAME_RULE,
    FLAGS["project"]: "must be a GCP project id: 6-30 lowercase letters, digits and '-'",
    FLAGS["zone"]: "must be a zone such as us-central2-b",
    FLAGS["reservation_name"]: "must be a reservation id: lowercase letters, digits and '-'",
    FLAGS["health_path"]: "must be a URL path starting with '/'",
}


def _plain(message: str, where: str | None, kind: str) -> str:
    if kind == "string_pattern_mismatch" and where in PATTERN_WORDS:
        return PATTERN_WORDS[where]
    return message.removeprefix("Value error, ")


def _flag_words(message: str) -> str:
    """A check across fields names them as the model does; say the flags instead."""
    for field, flag in FLAGS.items():
        if "_" in field:
            message = re.sub(rf"(?<![-\w]){field}\b", flag.split(" ")[0], message)
    # "capacity 'reserved'", not the "queued capacity" of a sentence.
    return re.sub(r"(?<![-\w])capacity(?= (is )?')", "--capacity", message)


def request_problems(
    err: ValidationError, accelerator_type: str | None = None
) -> list[tuple[str | None, str]]:
    """Every problem of a request as (the parameter at fault, the line that says what is
    wrong, naming it)."""
    problems: list[tuple[str | None, str]] = []
    for problem in err.errors():
        where = _where(tuple(problem["loc"]))
        message = _plain(problem["msg"], where, problem["type"])
        if where == FLAGS["accelerator_type"] and accelerator_type is not None:
            # The pattern's own message is a regular expression; say it in words.
            message = topology_problem(accelerator_type) or message
        if where is not None:
            problems.append((where.split(" ")[0], f"{where}: {message}"))
            continue
        # A check across fields names its flags itself; the first is the one it is about.
        message = _flag_words(message)
        named = re.search(r"(?<![-\w])(--[a-z-]+)", message)
        problems.append((named.group(1) if named else None, message))
    return problems


def request_problem(
    err: ValidationError, accelerator_type: str | None = None, what: str = "slice request"
) -> UsageProblem:
    """The usage error of a request, listing every problem at once: `param` in JSON is the
    first parameter at fault, `params` lists them all (docs/cli.md#errors)."""
    problems = request_problems(err, accelerator_type)
    params = list(dict.fromkeys(param for param, _ in problems if param))
    text = "; ".join(line for _, line in problems)
    # Each line names its parameter itself, so none leads the message.
    return UsageProblem(f"{text} (invalid {what}; nothing was started)", params=params)


def build_request(settings: Settings, fields: dict[str, Any]) -> SliceRequest:
    """Validates the whole request before anything is started (exit 2 naming the flags)."""
    # Only budgets that differ from the defaults become overrides, so the size rule for
    # ready/health still applies to a stock configuration.
    deadlines = {
        phase.value: configured
        for phase, default in DEFAULT_DEADLINES.items()
        if (configured := getattr(settings.bootstrap, phase.value)) != default
    }
    deadlines.update(fields.pop("deadlines", {}) or {})
    merged = {
        "project": settings.tpu.project,
        "zone": settings.tpu.zone,
        "poll_interval": settings.bootstrap.poll_interval,
        "health_port": settings.default_health_port(),
        **{k: v for k, v in fields.items() if v not in (None, (), {})},
        "deadlines": deadlines,
    }
    try:
        return SliceRequest.model_validate(merged)
    except ValidationError as err:
        accelerator = merged.get("accelerator_type")
        raise request_problem(err, accelerator if isinstance(accelerator, str) else None) from None
