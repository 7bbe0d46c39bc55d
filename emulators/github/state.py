"""In-memory state of the GitHub emulator: runners per scope, injected faults, request log."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from keeper.domain.runners.github import GitHubScope

FIRST_RUNNER_ID = 1000
DEFAULT_LABELS = ("self-hosted", "Linux", "X64")
# GitHub marks the labels it derives from the runner itself as read-only.
_READ_ONLY_LABELS = frozenset({"self-hosted", "linux", "windows", "macos", "x64", "arm", "arm64"})
RunnerStatus = Literal["online", "offline"]


def scope_key(text: str) -> str:
    """'repo:acme/api' in its canonical form; ValueError names what is wrong."""
    return str(GitHubScope.parse(text))


@dataclass
class Runner:
    id: int
    scope: str
    name: str
    os: str
    status: RunnerStatus
    busy: bool
    labels: list[str]

    def to_api(self, label_ids: dict[str, int]) -> dict[str, Any]:
        """The REST API's runner object."""
        return {
            "id": self.id,
            "name": self.name,
            "os": self.os,
            "status": self.status,
            "busy": self.busy,
            "ephemeral": False,
            "labels": [
                {
                    "id": label_ids[label],
                    "name": label,
                    "type": "read-only" if label.lower() in _READ_ONLY_LABELS else "custom",
                }
                for label in self.labels
            ],
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RunnerBook:
    def __init__(self) -> None:
        self._runners: dict[int, Runner] = {}
        self._label_ids: dict[str, int] = {}
        self.next_id = FIRST_RUNNER_ID

    def add(
        self,
        scope: str,
        name: str,
        *,
        labels: Sequence[str],
        status: RunnerStatus,
        busy: bool,
        os: str,
    ) -> Runner:
        key = scope_key(scope)
        if not name:
            raise ValueError("invalid field name: must not be empty")
        if any(r.scope == key and r.name == name for r in self._runners.values()):
            # GitHub refuses a second registration under a taken name in one scope.
            raise ValueError(f"invalid field name: {key} already has a runner named {name!r}")
        runner = Runner(self.next_id, key, name, os, status, busy, list(labels))
        self.next_id += 1
        for label in runner.labels:
            self._label_ids.setdefault(label, len(self._label_ids) + 1)
        self._runners[runner.id] = runner
        return runner

    def get(self, runner_id: int) -> Runner:
        try:
            return self._runners[runner_id]
        except KeyError:
            raise KeyError(f"no runner with id {runner_id}") from None

    def find(self, scope: str, runner_id: int) -> Runner | None:
        runner = self._runners.get(runner_id)
        return runner if runner is not None and runner.scope == scope else None

    def in_scope(self, scope: str) -> list[Runner]:
        return sorted((r for r in self._runners.values() if r.scope == scope), key=lambda r: r.id)

    def remove(self, runner_id: int) -> Runner:
        runner = self.get(runner_id)
        del self._runners[runner_id]
        return runner

    def api_json(self, runner: Runner) -> dict[str, Any]:
        return runner.to_api(self._label_ids)

    def clear(self) -> None:
        self._runners.clear()
        self._label_ids.clear()
        self.next_id = FIRST_RUNNER_ID

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        by_scope: dict[str, list[dict[str, Any]]] = {}
        for runner in sorted(self._runners.values(), key=lambda r: r.id):
            by_scope.setdefault(runner.scope, []).append(runner.to_json())
        return by_scope


class Fault(BaseModel):
    """The next `times` matching requests get `status` instead of their real answer."""

    model_config = ConfigDict(extra="forbid")

    status: int = Field(ge=400, le=599)
    # Canonical scope key such as "repo:acme/api"; None matches every scope.
    scope: str | None = None
    # None matches every runner, and list requests (which name no runner).
    runner_id: int | None = None
    times: int = Field(default=1, ge=1)
    # Seconds for a `retry-after` header; with rate_limited, when x-ratelimit-reset falls.
    retry_after: float | None = Field(default=None, ge=0)
    # Primary rate limit: x-ratelimit-remaining: 0 and x-ratelimit-reset (use with 403/429).
    rate_limited: bool = False
    # Replaces the default body message; for 400 it also drops the JobStillRunning body.
    message: str | None = None
    # DELETE (removal), GET (list and get), or * for both.
    method: Literal["DELETE", "GET", "*"] = "DELETE"

    @field_validator("scope")
    @classmethod
    def _canonical_scope(cls, value: str | None) -> str | None:
        return None if value is None else scope_key(value)

    def matches(self, method: str, scope: str, runner_id: int | None) -> bool:
        if self.method not in ("*", method):
            return False
        if self.scope is not None and self.scope != scope:
            return False
        return self.runner_id is None or self.runner_id == runner_id


@dataclass
class RequestLog:
    entries: list[dict[str, Any]] = field(default_factory=list)

    def record(self, method: str, path: str, query: str, status: int) -> None:
        # `at` (epoch seconds, when the answer was sent) lets a test order these requests
        # against other processes' clocks, such as the provider's invocation log.
        self.entries.append(
            {"method": method, "path": path, "query": query, "status": status, "at": time.time()}
        )

    def clear(self) -> None:
        self.entries.clear()
