"""The secrets scan: every history a campaign produced, read back from the server, searched
for every token and webhook URL the campaign configured.

Payloads are base64 in a history's JSON, so each `data` field is decoded before the search;
a secret split across fields or encoded some other way is out of reach (the payloads are
pydantic JSON, never compressed).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from temporalio.client import Client


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                with contextlib.suppress(binascii.Error, ValueError):
                    yield base64.b64decode(value, validate=True).decode("utf-8", "replace")
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


def secrets_in(history: dict[str, Any], secrets: Iterable[str]) -> list[str]:
    wanted = [s for s in secrets if s]
    found: set[str] = set()
    for text in _strings(history):
        found.update(s for s in wanted if s in text)
    return sorted(found)


async def scan(
    client: Client, workflow_ids: Iterable[str], secrets: dict[str, str]
) -> tuple[int, list[str]]:
    """(histories read, "<workflow id> <run id>: <secret's name>" for every secret found).

    Every run of each id is read, not only the latest: from the latest back through each
    run's start event to the run it continued (a deletion or a watch that continued as new
    left earlier histories). That needs no visibility, so it reads the same on the
    time-skipping server."""
    read = 0
    found: list[str] = []
    by_value = {value: name for name, value in secrets.items() if value}
    for workflow_id in sorted(set(workflow_ids)):
        run_id: str | None = None  # the latest first
        seen: set[str] = set()
        while True:
            history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
            read += 1
            first = history.events[0]
            this_run = first.workflow_execution_started_event_attributes.original_execution_run_id
            for value in secrets_in(history.to_json_dict(), by_value):
                found.append(f"{workflow_id} {run_id or this_run}: {by_value[value]}")
            seen.add(run_id or this_run)
            earlier = first.workflow_execution_started_event_attributes.continued_execution_run_id
            if not earlier or earlier in seen:
                break
            run_id = earlier
    return read, found


async def workflows_on(client: Client, task_queue: str) -> list[str]:
    """Every workflow id the server knows on `task_queue` (visibility), open or closed: what a
    family's runs started, including the workflows no run outcome names."""
    return [wf.id async for wf in client.list_workflows(f'TaskQueue = "{task_queue}"')]
