"""Deterministic names and ownership labels for everything a bootstrap creates.

Names are derived from the slice name alone so that every retry of a create call, every
compensation and the sweeper agree on what to look for without sharing state.
"""

from __future__ import annotations

import re

BOOTSTRAP_PREFIX = "tpu-bootstrap-"
TEARDOWN_PREFIX = "tpu-teardown-"
SWEEPER_WORKFLOW_ID = "tpu-sweeper"
SWEEPER_SCHEDULE_ID = "tpu-sweeper"

# GCP label keys/values: lowercase letters, digits, '-' and '_', at most 63 characters.
LABEL_MANAGED = "keeper-managed"
LABEL_OWNER = "keeper-owner"
LABEL_RUN = "keeper-run"
RESERVED_LABEL_PREFIX = "keeper-"
LABEL_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def bootstrap_workflow_id(slice_name: str) -> str:
    return f"{BOOTSTRAP_PREFIX}{slice_name}"


def bootstrap_run_workflow_id(slice_name: str) -> str:
    """The child that does the phase work; the supervisor above it compensates."""
    return f"{BOOTSTRAP_PREFIX}{slice_name}-run"


def teardown_workflow_id(slice_name: str) -> str:
    return f"{TEARDOWN_PREFIX}{slice_name}"


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
