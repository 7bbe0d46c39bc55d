"""Deterministic names and ownership labels for everything a bootstrap creates.

Names are derived from the slice name alone so that every retry of a create call, every
compensation and the sweeper agree on what to look for without sharing state.
"""

from __future__ import annotations

import re

BOOTSTRAP_WORKFLOW_TYPE = "TpuSliceBootstrap"
TEARDOWN_WORKFLOW_TYPE = "TpuSliceTeardown"
SWEEPER_WORKFLOW_TYPE = "TpuSweeper"
BOOTSTRAP_PREFIX = "tpu-bootstrap-"
# '.' never appears in a slice name, so no supervisor id can end like a child id (a "-run"
# suffix could: the child of slice X would be the supervisor id of slice "X-run").
RUN_SUFFIX = ".run"
TEARDOWN_PREFIX = "tpu-teardown-"
SWEEPER_WORKFLOW_ID = "tpu-sweeper"
SWEEPER_SCHEDULE_ID = "tpu-sweeper"
MANUAL_SWEEP_PREFIX = "tpu-sweeper-manual-"

# A slice name is also its QR and node id, and part of every workflow id of the slice: one
# rule for every command and workflow that takes one. No '.' ever (see RUN_SUFFIX).
SLICE_NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$"
SLICE_NAME_RULE = (
    "must be 1-40 characters of lowercase letters, digits and '-', starting with a letter "
    "and not ending with '-'"
)
_SLICE_NAME_RE = re.compile(SLICE_NAME_PATTERN)

# GCP label keys/values: lowercase letters, digits, '-' and '_', at most 63 characters.
LABEL_MANAGED = "keeper-managed"
LABEL_OWNER = "keeper-owner"
LABEL_RUN = "keeper-run"
RESERVED_LABEL_PREFIX = "keeper-"
LABEL_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def slice_name_problem(name: str) -> str | None:
    """What is wrong with `name` as a slice name, in words; None when it is one."""
    if _SLICE_NAME_RE.fullmatch(name):
        return None
    return f"{name!r} is not a slice name: it {SLICE_NAME_RULE}"


def bootstrap_workflow_id(slice_name: str) -> str:
    return f"{BOOTSTRAP_PREFIX}{slice_name}"


def bootstrap_run_workflow_id(slice_name: str) -> str:
    """The child that does the phase work; the supervisor above it compensates."""
    return f"{BOOTSTRAP_PREFIX}{slice_name}{RUN_SUFFIX}"


def teardown_workflow_id(slice_name: str) -> str:
    return f"{TEARDOWN_PREFIX}{slice_name}"


def manual_sweep_workflow_id(stamp: str) -> str:
    """A sweep started from the CLI; `stamp` is a UTC time such as 20260101T120000."""
    return f"{MANUAL_SWEEP_PREFIX}{stamp}"


def parent(project: str, zone: str) -> str:
    return f"projects/{project}/locations/{zone}"


def queued_resource_name(project: str, zone: str, slice_name: str) -> str:
    return f"{parent(project, zone)}/queuedResources/{slice_name}"


def node_name(project: str, zone: str, node_id: str) -> str:
    return f"{parent(project, zone)}/nodes/{node_id}"


def node_ids(slice_name: str, node_count: int) -> list[str]:
    """Node ids GCP gives a single slice (node_id) or a multislice (prefix-0..N-1)."""
    if node_count == 1:
        return [slice_name]
    return [f"{slice_name}-{i}" for i in range(node_count)]


def owner_labels(owner_workflow_id: str, owner_run_id: str) -> dict[str, str]:
    # Run ids are UUIDs (36 chars) and workflow ids are bounded by the slice-name rule,
    # so both always fit GCP's 63-character label limit.
    return {
        LABEL_MANAGED: "true",
        LABEL_OWNER: owner_workflow_id,
        LABEL_RUN: owner_run_id,
    }


def slice_from_owner(owner_workflow_id: str) -> str | None:
    if owner_workflow_id.startswith(BOOTSTRAP_PREFIX):
        return owner_workflow_id[len(BOOTSTRAP_PREFIX) :]
    return None


# The rule every slice workflow's id follows; keeper finds them by these ids alone.
ID_RULE = "tpu-bootstrap-<slice>, tpu-bootstrap-<slice>.run, tpu-teardown-<slice>"


def wrong_id_message(workflow_type: str, actual: str, expected: str) -> str:
    return (
        f"{workflow_type} refuses workflow id {actual!r}: keeper finds a slice's workflows by "
        f"id ({ID_RULE}), so this one must be {expected!r}; nothing was created. Start it "
        f"again with --workflow-id {expected}"
    )


# Memo key of a slice workflow's GCP project (the zone is the Zone search attribute).
PROJECT_MEMO = "project"
# Memo key of the state a continued run of a long compensation or delete goes on from.
CARRY_MEMO = "keeper-carry"
