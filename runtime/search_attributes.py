"""Every search attribute keeper's workflows set, from the families' own definitions:
what `keeper dev up` and the tests register, and what a real cluster needs
(docs/operations.md)."""

from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from keeper.runtime.reclaim.search_attributes import RECLAIM_ATTRIBUTES
from keeper.runtime.runners.search_attributes import RUNNER_ATTRIBUTES
from keeper.runtime.tpu.search_attributes import SLICE_ATTRIBUTES
from keeper.runtime.watch.search_attributes import WATCH_ATTRIBUTES

# Each once, in the order the families list them (JobId is shared by reclaim and watch).
# SQL visibility (the dev server's SQLite, a cluster's PostgreSQL or MySQL) has ten Keyword
# columns; keeper uses all ten, so a new one must be another type (Verdict is a KeywordList).
ALL: tuple[SearchAttributeKey[Any], ...] = tuple(
    {
        key.name: key
        for key in (*SLICE_ATTRIBUTES, *RUNNER_ATTRIBUTES, *RECLAIM_ATTRIBUTES, *WATCH_ATTRIBUTES)
    }.values()
)


def registrations() -> dict[str, str]:
    """Name -> the indexed value type as the temporal CLI spells it (`Keyword`, `KeywordList`)."""
    return {
        key.name: key.indexed_value_type.name.removeprefix("INDEXED_VALUE_TYPE_")
        .title()
        .replace("_", "")
        for key in ALL
    }


async def register_missing(client: Client) -> list[str]:
    """Adds keeper's search attributes the namespace lacks (a dev-server database made by an
    older keeper has only the older ones); the names added. Raises ValueError naming an
    attribute registered with another type, which only an operator can sort out."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    have = dict(listed.custom_attributes)
    missing: dict[str, IndexedValueType.ValueType] = {}
    for key in ALL:
        wanted = IndexedValueType.ValueType(key.indexed_value_type)
        if key.name not in have:
            missing[key.name] = wanted
        elif have[key.name] != wanted:
            raise ValueError(
                f"search attribute {key.name} is registered as "
                f"{IndexedValueType.Name(have[key.name])}; keeper needs "
                f"{IndexedValueType.Name(wanted)} (docs/operations.md#search-attributes)"
            )
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    return sorted(missing)
