"""What a workflow shows in the Temporal UI: its current details, and its search attributes.

Every family publishes the same way: the details are rendered from the state on every change
(they cost no history event), and only the search attributes whose value changed are upserted
(each upsert is a command and a history event).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate


class Publisher:
    """One per workflow run. Seeded with the attributes the run started with, so a value
    set at the start is not upserted again."""

    def __init__(self) -> None:
        self._set: dict[str, Any] = {}
        self._seeded = False

    def publish(self, details: str, attributes: Sequence[SearchAttributeUpdate[Any]] = ()) -> None:
        workflow.set_current_details(details)
        if not self._seeded:
            self._seeded = True
            for key, value in workflow.info().typed_search_attributes:
                self._set[key.name] = value
        changed = [u for u in attributes if self._set.get(u.key.name, _UNSET) != u.value]
        if changed:
            workflow.upsert_search_attributes(changed)
            self._set.update({u.key.name: u.value for u in changed})


_UNSET = object()
