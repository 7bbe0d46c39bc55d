"""Every search attribute keeper's workflows set, from the families' own definitions:
what `keeper dev up` and the tests register, and what a real cluster needs
(docs/operations.md)."""

from temporalio.common import SearchAttributeKey

from runtime.reclaim.search_attributes import RECLAIM_ATTRIBUTES
from runtime.runners.search_attributes import RUNNER_ATTRIBUTES
from runtime.tpu.search_attributes import SLICE_ATTRIBUTES

ALL: tuple[SearchAttributeKey[str], ...] = (
    *SLICE_ATTRIBUTES,
    *RUNNER_ATTRIBUTES,
    *RECLAIM_ATTRIBUTES,
)


def registrations() -> dict[str, str]:
    """Name -> the indexed value type as the temporal CLI spells it (`Keyword`)."""
    return {
        key.name: key.indexed_value_type.name.removeprefix("INDEXED_VALUE_TYPE_").title()
        for key in ALL
    }
