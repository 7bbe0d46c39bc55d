"""keeper's search attributes on a namespace made before 1.0: the four it retired (Phase,
RunnerStep, ReclaimStep, JobState) hold Keyword columns until someone removes them."""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from keeper.runtime.search_attributes import ALL, RETIRED, drop_retired, register_missing
from tests.e2e_support import own_namespace

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


async def _listed(client: Client) -> dict[str, int]:
    answer = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return dict(answer.custom_attributes)


async def test_a_namespace_full_of_retired_attributes_is_named_and_dropping_them_makes_room(
    dev_env: WorkflowEnvironment,
) -> None:
    client = await own_namespace(dev_env, "sa-retired", _listed)
    # As keeper 0.x registered it, beside three Keyword attributes of the namespace's own.
    older = [*RETIRED, "TeamA", "TeamB", "TeamC"]
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace, search_attributes=dict.fromkeys(older, KEYWORD)
        )
    )
    with pytest.raises(ValueError) as refused:
        await register_missing(client)
    message = str(refused.value)
    for name in RETIRED:
        assert name in message
    assert "temporal operator search-attribute remove" in message
    assert "--name Phase --name RunnerStep --name ReclaimStep --name JobState" in message

    assert await drop_retired(client) == list(RETIRED)
    assert await register_missing(client) == sorted(key.name for key in ALL)
    listed = await _listed(client)
    assert {key.name for key in ALL} <= set(listed)
    assert not set(RETIRED) & set(listed)
    assert {"TeamA", "TeamB", "TeamC"} <= set(listed)
    # Nothing left to drop or add: a second run changes nothing.
    assert await drop_retired(client) == []
    assert await register_missing(client) == []
