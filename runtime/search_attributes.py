"""Every search attribute keeper's workflows set, from the families' own definitions:
what `keeper-dev up` and the tests register, and what a real cluster needs
(docs/operations.md)."""

from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
    RemoveSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from keeper.runtime.reclaim.search_attributes import RECLAIM_ATTRIBUTES
from keeper.runtime.runners.search_attributes import RUNNER_ATTRIBUTES
from keeper.runtime.tpu.search_attributes import SLICE_ATTRIBUTES
from keeper.runtime.watch.search_attributes import WATCH_ATTRIBUTES

# Each once, in the order the families list them (JobId is shared by reclaim and watch).
# SQL visibility (the dev server's SQLite, a cluster's PostgreSQL or MySQL) has ten Keyword
# columns; keeper uses seven (Verdict is a KeywordList).
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


# What keeper set before 1.0 and no workflow sets since: KeeperStep took the place of all four.
# They hold four of a namespace's ten Keyword columns until an operator removes them.
RETIRED: tuple[str, ...] = ("Phase", "RunnerStep", "ReclaimStep", "JobState")


def removal_command(names: list[str], namespace: str) -> str:
    flags = " ".join(f"--name {name}" for name in names)
    return f"temporal operator search-attribute remove --namespace {namespace} {flags} --yes"


async def drop_retired(client: Client) -> list[str]:
    """Removes keeper's pre-1.0 search attributes from the namespace; the names removed. For
    the local stack, whose namespace is keeper's alone: a cluster's operator decides."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    retired = [name for name in RETIRED if name in listed.custom_attributes]
    if retired:
        await client.operator_service.remove_search_attributes(
            RemoveSearchAttributesRequest(namespace=client.namespace, search_attributes=retired)
        )
    return retired


async def register_missing(client: Client) -> list[str]:
    """Adds keeper's search attributes the namespace lacks (a dev-server database made by an
    older keeper has only the older ones); the names added. Raises ValueError naming an
    attribute registered with another type, which only an operator can sort out, or, when
    the namespace has no Keyword column left because keeper's pre-1.0 attributes still hold
    theirs, naming those and the command that removes them."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    have = dict(listed.custom_attributes)
    retired = [name for name in RETIRED if name in have]
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
    if not missing:
        return []
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
        )
    except RPCError as err:
        if not retired or "cannot have more than" not in err.message:
            raise
        raise ValueError(
            f"namespace {client.namespace} has no room for {', '.join(sorted(missing))}: "
            f"keeper's pre-1.0 search attributes {', '.join(retired)} still hold Keyword "
            "columns and no keeper workflow sets them since 1.0; remove them with "
            f"`{removal_command(retired, client.namespace)}`, then rerun"
        ) from None
    return sorted(missing)
