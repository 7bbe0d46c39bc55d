"""keeper's workflow runner (workers/runner.py): with a converter no serialization context
changes, the SDK's per-payload context questions are answered without running code in the
sandbox, and a converter that does use contexts still gets every one."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import _runner as sandbox

from keeper.runtime.temporal_client import DATA_CONVERTER
from keeper.workers.runner import ignores_contexts, workflow_runner


@activity.defn(name="test.echo")
async def echo(text: str) -> str:
    return text


@workflow.defn(name="TestEcho")
class Echo:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(
            echo, text, start_to_close_timeout=timedelta(seconds=30)
        )


class ContextCodec(PayloadCodec, WithSerializationContext):
    """Passes payloads through, noting the context it was given for each batch."""

    def __init__(
        self, seen: list[SerializationContext | None], context: SerializationContext | None = None
    ) -> None:
        self.seen = seen
        self.context = context

    def with_context(self, context: SerializationContext) -> ContextCodec:
        return ContextCodec(self.seen, context)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(self.context)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(self.context)
        return list(payloads)


def with_codec(seen: list[SerializationContext | None]) -> DataConverter:
    return dataclasses.replace(DATA_CONVERTER, payload_codec=ContextCodec(seen))


@pytest.mark.parametrize(
    ("converter", "ignores"),
    [
        (DATA_CONVERTER, True),
        (DataConverter.default, True),
        (with_codec([]), False),
        # No probe reaches external storage: any configured at all keeps the SDK's way.
        (dataclasses.replace(DATA_CONVERTER, external_storage=object()), False),
    ],
    ids=["keeper", "sdk-default", "context-codec", "external-storage"],
)
def test_a_converter_ignores_contexts_only_when_none_can_change_it(
    converter: DataConverter, ignores: bool
) -> None:
    assert ignores_contexts(converter) is ignores


async def _echo_on(env: WorkflowEnvironment, converter: DataConverter) -> str:
    config = env.client.config()
    client = Client(**{**config, "data_converter": converter})
    queue = f"keeper-runner-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[Echo],
        activities=[echo],
        workflow_runner=workflow_runner(False, converter),
    ):
        return await client.execute_workflow(
            Echo.run, "hello", id=f"echo-{uuid.uuid4().hex[:8]}", task_queue=queue
        )


def _count_sandbox_questions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    asked: list[Any] = []
    inner = sandbox._Instance.get_serialization_context

    def counted(self: Any, command_info: Any) -> Any:
        asked.append(command_info)
        return inner(self, command_info)

    monkeypatch.setattr(sandbox._Instance, "get_serialization_context", counted)
    return asked


async def test_keepers_converter_asks_the_sandbox_no_context_question(
    dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _count_sandbox_questions(monkeypatch)
    assert await _echo_on(dev_env, DATA_CONVERTER) == "hello"
    assert asked == []


async def test_a_context_aware_converter_still_gets_each_payloads_context(
    dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _count_sandbox_questions(monkeypatch)
    seen: list[SerializationContext | None] = []
    assert await _echo_on(dev_env, with_codec(seen)) == "hello"
    assert asked, "the sandbox was never asked"
    kinds = {type(c) for c in seen}
    assert {WorkflowSerializationContext, ActivitySerializationContext} <= kinds, seen
    activity_types = {c.activity_type for c in seen if isinstance(c, ActivitySerializationContext)}
    assert activity_types == {"test.echo"}
