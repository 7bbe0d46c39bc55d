"""The search attributes of the TPU family's workflows: the one place their names live.

KeeperStep (every family's "where this run is") is, for a bootstrap, its phase (`assign`,
..., `compensate`, `done`); for a teardown, `teardown` then `released`.
"""

from typing import Any

from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

from keeper.runtime.shared_search_attributes import KEEPER_STEP

SLICE_NAME = SearchAttributeKey.for_keyword("SliceName")
ZONE = SearchAttributeKey.for_keyword("Zone")

SLICE_ATTRIBUTES = (SLICE_NAME, KEEPER_STEP, ZONE)


def for_slice(slice_name: str, zone: str, step: str | None = None) -> TypedSearchAttributes:
    """Attributes set when a slice's workflow starts, so it is findable before it runs."""
    pairs: list[SearchAttributePair[str]] = [
        SearchAttributePair(SLICE_NAME, slice_name),
        SearchAttributePair(ZONE, zone),
    ]
    if step is not None:
        pairs.append(SearchAttributePair(KEEPER_STEP, step))
    return TypedSearchAttributes(pairs)


def current(slice_name: str, zone: str, step: str) -> list[SearchAttributeUpdate[Any]]:
    """What a slice's workflow publishes (workflows/common/publishing.py upserts only the
    ones that changed)."""
    return [
        SLICE_NAME.value_set(slice_name),
        ZONE.value_set(zone),
        KEEPER_STEP.value_set(step),
    ]
