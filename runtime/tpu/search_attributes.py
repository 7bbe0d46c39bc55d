"""The search attributes of the TPU family's workflows: the one place their names live."""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

SLICE_NAME = SearchAttributeKey.for_keyword("SliceName")
PHASE = SearchAttributeKey.for_keyword("Phase")
ZONE = SearchAttributeKey.for_keyword("Zone")

SLICE_ATTRIBUTES = (SLICE_NAME, PHASE, ZONE)


def for_slice(slice_name: str, zone: str, phase: str | None = None) -> TypedSearchAttributes:
    """Attributes set when a slice's workflow starts, so it is findable before it runs."""
    pairs: list[SearchAttributePair[str]] = [
        SearchAttributePair(SLICE_NAME, slice_name),
        SearchAttributePair(ZONE, zone),
    ]
    if phase is not None:
        pairs.append(SearchAttributePair(PHASE, phase))
    return TypedSearchAttributes(pairs)
