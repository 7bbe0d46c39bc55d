"""The one check of a runner row, whichever back end holds it and whoever wrote it.

The store runs it on every record it adds and on every row it reads: SQLite accepts values
PostgreSQL refuses (a NUL, a provider id over 255 characters) and neither knows what a
GitHub scope is, so the rules cannot be left to the column types. Pure and table-tested.

| field | accepted |
|---|---|
| name | a runner name (RUNNER_NAME_PATTERN) |
| scale_set | a scale-set name (SCALE_SET_PATTERN) |
| provider_id | unset, or 1-255 characters with no control character |
| github_runner_id | unset, or a whole number from 1 to 2^63-1 |
| github_scope | unset, or 'repo:OWNER/REPO', 'org:ORG' or 'enterprise:SLUG' |
| instance_status | one of domain.runners.status.InstanceStatus |
| agent_status | one of domain.runners.status.AgentStatus |
| version | a whole number from 1 |
| created_at, updated_at | a timestamp |
| deleted_at | unset, or a timestamp |
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from keeper.domain.runners.github import GitHubScope
from keeper.domain.runners.models import RUNNER_NAME_PATTERN, SCALE_SET_PATTERN
from keeper.domain.runners.status import AgentStatus, InstanceStatus

PROVIDER_ID_MAX = 255  # the column's width on PostgreSQL
BIGINT_MAX = 2**63 - 1
_NAME_RE = re.compile(RUNNER_NAME_PATTERN)
_SCALE_SET_RE = re.compile(SCALE_SET_PATTERN)
_SHOWN = 40  # characters of a bad value a problem quotes


@dataclass(frozen=True)
class RecordProblem:
    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


def shown(value: object) -> str:
    """A bad value, quoted safely for a terminal: escaped, and cut at _SHOWN characters."""
    if not isinstance(value, str):
        return ascii(value)[:_SHOWN]
    return ascii(value[:_SHOWN] + ("..." if len(value) > _SHOWN else ""))


def _name_problem(value: object, pattern: re.Pattern[str], what: str) -> str | None:
    if not isinstance(value, str) or not pattern.match(value):
        return (
            f"{shown(value)} is not a {what} (1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit)"
        )
    return None


def provider_id_problem(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{shown(value)} is not text"
    if not value:
        return "is empty; leave it unset when the provider gave no id"
    if len(value) > PROVIDER_ID_MAX:
        return f"has {len(value)} characters; at most {PROVIDER_ID_MAX}"
    for position, char in enumerate(value, start=1):
        if unicodedata.category(char) == "Cc":
            return f"contains a control character (U+{ord(char):04X}) at position {position}"
    return None


def _whole_problem(value: object, top: float, what: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        return f"{shown(value)} is not {what} (a whole number from 1)"
    return None


def _scope_problem(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{shown(value)} is not text"
    try:
        GitHubScope.parse(value)
    except ValueError as err:
        return str(err)
    return None


def _enum_problem(value: object, enum: type[InstanceStatus] | type[AgentStatus]) -> str | None:
    if isinstance(value, str) and value in enum._value2member_map_:
        return None
    return f"{shown(value)} is not one of {', '.join(m.value for m in enum)}"


def _time_problem(value: object, *, required: bool) -> str | None:
    if value is None:
        return "is missing" if required else None
    if isinstance(value, datetime):
        return None
    return f"{shown(value)} is not a timestamp"


def record_problems(row: Mapping[str, object]) -> tuple[RecordProblem, ...]:
    """Every problem of one runner row (the store's column names and values), in column
    order; empty when the row is a valid runner record."""
    runner_id = row.get("github_runner_id")
    bad_id = (
        None if runner_id is None else _whole_problem(runner_id, BIGINT_MAX, "a GitHub runner id")
    )
    checks: list[tuple[str, str | None]] = [
        ("name", _name_problem(row.get("name"), _NAME_RE, "runner name")),
        ("scale_set", _name_problem(row.get("scale_set"), _SCALE_SET_RE, "scale-set name")),
        ("provider_id", provider_id_problem(row.get("provider_id"))),
        ("github_runner_id", bad_id),
        ("github_scope", _scope_problem(row.get("github_scope"))),
        ("instance_status", _enum_problem(row.get("instance_status"), InstanceStatus)),
        ("agent_status", _enum_problem(row.get("agent_status"), AgentStatus)),
        ("version", _whole_problem(row.get("version"), math.inf, "a version")),
        ("created_at", _time_problem(row.get("created_at"), required=True)),
        ("updated_at", _time_problem(row.get("updated_at"), required=True)),
        ("deleted_at", _time_problem(row.get("deleted_at"), required=False)),
    ]
    return tuple(RecordProblem(field, problem) for field, problem in checks if problem)


def what_to_do(name: str) -> str:
    """The operator's next step for a row that fails the check."""
    if _NAME_RE.match(name):
        return (
            "fix the field in the runner store, or delete the runner with "
            f"`keeper runner delete {name} --force`; until then keeper skips it"
        )
    return "fix or delete the row in the runner store; until then keeper skips it"
