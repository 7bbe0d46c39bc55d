"""Search attributes keeper workflows set; `keeper dev up` registers them on the dev server."""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

SLICE_NAME = SearchAttributeKey.for_keyword("SliceName")
PHASE = SearchAttributeKey.for_keyword("Phase")
ZONE = SearchAttributeKey.for_keyword("Zone")

ALL = (SLICE_NAME, PHASE, ZONE)


def for_slice(slice_name: str, zone: str, phase: str | None = None) -> TypedSearchAttributes:
    """Attributes set when a slice's workflow starts, so it is findable before it runs."""
    pairs: list[SearchAttributePair[str]] = [
        SearchAttributePair(SLICE_NAME, slice_name),
        SearchAttributePair(ZONE, zone),
    ]
    if phase is not None:
        pairs.append(SearchAttributePair(PHASE, phase))
    return TypedSearchAttributes(pairs)
