"""Where a slice stands: its bootstrap and, once that handed it over, its teardown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import Client, WorkflowHandle

from keeper.cli.workflow_view import describe, describe_as, query, status_name
from keeper.domain.tpu.models import BootstrapResult, BootstrapStatus, DeletionReport
from keeper.domain.tpu.naming import (
    BOOTSTRAP_WORKFLOW_TYPE,
    TEARDOWN_WORKFLOW_TYPE,
    bootstrap_run_workflow_id,
    bootstrap_workflow_id,
    teardown_workflow_id,
)
from keeper.domain.tpu.outcome import is_live, slice_state
from keeper.domain.tpu.sweep import counts_as_release


@dataclass
class SliceWorkflows:
    bootstrap: WorkflowHandle[Any, BootstrapResult]
    bootstrap_description: Any  # None: no bootstrap of this name
    teardown: WorkflowHandle[Any, DeletionReport]
    # Only a teardown that started after the bootstrap closed releases this slice; an older
    # one released an earlier slice of the same name.
    teardown_description: Any

    @property
    def exists(self) -> bool:
        return self.bootstrap_description is not None

    @property
    def bootstrap_status(self) -> str:
        return status_name(self.bootstrap_description) or "NOT_FOUND"

    @property
    def teardown_status(self) -> str | None:
        return status_name(self.teardown_description)

    @property
    def live(self) -> bool:
        return is_live(self.bootstrap_status, self.teardown_status)

    def state(self, phase: str | None) -> str:
        return slice_state(self.bootstrap_status, phase, self.teardown_status)


def released_after(teardown: Any, bootstrap: Any) -> bool:
    """Whether `teardown` (None: none) started after `bootstrap` closed: it released that
    bootstrap's slice, not an earlier one of the same name."""
    return teardown is not None and counts_as_release(bootstrap.close_time, teardown.start_time)


async def slice_workflows(client: Client, slice_name: str) -> SliceWorkflows:
    """Refuses (exit 1) when either id holds a workflow of another type."""
    bootstrap = client.get_workflow_handle(
        bootstrap_workflow_id(slice_name), result_type=BootstrapResult
    )
    teardown = client.get_workflow_handle(
        teardown_workflow_id(slice_name), result_type=DeletionReport
    )
    check = f"Check the slice name {slice_name!r}"
    described = await describe_as(bootstrap, BOOTSTRAP_WORKFLOW_TYPE, name_hint=check)
    teardown_described = await describe_as(teardown, TEARDOWN_WORKFLOW_TYPE, name_hint=check)
    if described is None or not released_after(teardown_described, described):
        teardown_described = None
    return SliceWorkflows(bootstrap, described, teardown, teardown_described)


async def phase_child(
    client: Client, slice_name: str, bootstrap_id: str, bootstrap_run_id: str
) -> tuple[str | None, BootstrapStatus | None]:
    """The phase child of that bootstrap run: its status name and its status query answer
    ((None, None): none found). A terminated supervisor records nothing more, while its
    child, cancelled with it, compensates and records what it deleted."""
    handle = client.get_workflow_handle(bootstrap_run_workflow_id(slice_name))
    description = await describe(handle)
    # Only this run's own child: a child id outlives its parent run.
    if description is None or (description.parent_id, description.parent_run_id) != (
        bootstrap_id,
        bootstrap_run_id,
    ):
        return None, None
    # No worker serves its queue: the status says less, nothing more.
    return status_name(description), await query(handle, "status", BootstrapStatus)
