"""The worker's log lines on stderr: text for a terminal, or one JSON object a line.

A JSON line carries time (RFC 3339, UTC), level, logger and message, and inside a workflow
or an activity the run it belongs to: workflow_id, run_id, workflow_type, activity_type,
attempt, task_queue. The SDK's workflow.logger and activity.logger put those in the record
(`temporal_workflow`, `temporal_activity`); any other logger called from inside an activity
gets them from the activity's context, so a line from a client library is tied to its run
too. Nothing here adds a value a caller did not log: secrets stay out as they do in text.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from temporalio import activity, workflow

from keeper.runtime.settings import LogFormat

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The SDK's names -> keeper's, for the fields every JSON line may carry.
_WORKFLOW_FIELDS = {
    "workflow_id": "workflow_id",
    "run_id": "run_id",
    "workflow_type": "workflow_type",
    "attempt": "attempt",
    "task_queue": "task_queue",
    "namespace": "namespace",
}
_ACTIVITY_FIELDS = {
    "workflow_id": "workflow_id",
    "workflow_run_id": "run_id",
    "workflow_type": "workflow_type",
    "activity_type": "activity_type",
    "activity_id": "activity_id",
    "attempt": "attempt",
    "task_queue": "task_queue",
    "namespace": "namespace",
}


def _renamed(details: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    return {ours: details[theirs] for theirs, ours in names.items() if theirs in details}


def run_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The workflow or activity a record was logged in, as the JSON line names it."""
    details = getattr(record, "temporal_workflow", None)
    if isinstance(details, Mapping):
        return _renamed(details, _WORKFLOW_FIELDS)
    details = getattr(record, "temporal_activity", None)
    if isinstance(details, Mapping):
        return _renamed(details, _ACTIVITY_FIELDS)
    # Another logger, called from an activity's own task or thread.
    if activity.in_activity():
        info = activity.info()
        return {
            "workflow_id": info.workflow_id,
            "run_id": info.workflow_run_id,
            "workflow_type": info.workflow_type,
            "activity_type": info.activity_type,
            "activity_id": info.activity_id,
            "attempt": info.attempt,
            "task_queue": info.task_queue,
            "namespace": info.namespace,
        }
    return {}


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            # RFC 3339 allows either; "Z" is what most pipelines expect.
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **run_fields(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """The root logger of the worker process, writing to `stream` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    json_lines = log_format is LogFormat.JSON
    handler.setFormatter(JsonLines() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # A JSON line carries the run's fields; the SDK's "({...})" after the text would repeat
    # them inside the message.
    workflow.logger.workflow_info_on_message = not json_lines
    activity.logger.activity_info_on_message = not json_lines
