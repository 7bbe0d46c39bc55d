"""Search attributes keeper workflows set; `keeper dev up` registers them on the dev server."""

from temporalio.common import SearchAttributeKey

SLICE_NAME = SearchAttributeKey.for_keyword("SliceName")
PHASE = SearchAttributeKey.for_keyword("Phase")
ZONE = SearchAttributeKey.for_keyword("Zone")

ALL = (SLICE_NAME, PHASE, ZONE)
