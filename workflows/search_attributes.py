"""Search attributes keeper workflows set; `keeper dev up` registers them on the dev server."""

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


RUNNER_NAME = SearchAttributeKey.for_keyword("RunnerName")
SCALE_SET = SearchAttributeKey.for_keyword("ScaleSet")
RUNNER_STEP = SearchAttributeKey.for_keyword("RunnerStep")

RUNNER_ATTRIBUTES = (RUNNER_NAME, SCALE_SET, RUNNER_STEP)


def for_runner(runner: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(RUNNER_NAME, runner)])


ALL = (*SLICE_ATTRIBUTES, *RUNNER_ATTRIBUTES)
