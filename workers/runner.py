"""How keeper's worker runs workflow code: the SDK's sandbox, wrapped for two things the
worker decides once, at start.

| the worker | what the wrapper does |
|---|---|
| unversioned | leaves out the versioning behaviour each workflow type declares |
| its converter ignores contexts | answers "which context?" itself, with "none" |

The first is a behaviour: the server rejects a task that a worker without deployment
options completes with a behaviour ("versioning behavior cannot be specified without
deployment options being set with versioned mode"), and the run then never progresses.

The second is a cost. The SDK asks which serialization context each payload of every
activation and completion is in, each time by running code inside the sandbox (about
0.1 ms a question, tens of questions a run: bench/worker_cpu.py). With a converter that
no context changes (no external storage, every part returning itself for any context)
the answer changes nothing: "none" picks the worker's own converter, which is what any
context would have picked. A converter that does use contexts keeps the SDK's way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.common import VersioningBehavior
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    WorkflowSerializationContext,
)
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

if TYPE_CHECKING:
    # The SDK's own parameter types for these two instance methods.
    from temporalio.converter import SerializationContext
    from temporalio.converter._extstore import StorageDriverStoreContext
    from temporalio.worker._command_aware_visitor import CommandInfo
    from temporalio.workflow import _Definition

# What a context-aware converter would be given; a context-free one returns itself for each.
_PROBES: tuple[SerializationContext, ...] = (
    WorkflowSerializationContext(namespace="keeper", workflow_id="probe"),
    ActivitySerializationContext(
        namespace="keeper",
        activity_id="1",
        activity_type="probe",
        activity_task_queue="probe",
        workflow_id="probe",
        workflow_type="Probe",
        is_local=False,
    ),
)


def ignores_contexts(converter: DataConverter) -> bool:
    """Whether no serialization context can change what `converter` does."""
    if converter.external_storage is not None:
        return False
    return all(converter.with_context(probe) is converter for probe in _PROBES)


class _Instance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance, *, unversioned: bool, context_free: bool):
        self._inner = inner
        self._unversioned = unversioned
        self._context_free = context_free
        self._store_context: StorageDriverStoreContext | None = None

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._inner.activate(act)
        if self._unversioned and completion.HasField("successful"):
            completion.successful.versioning_behavior = VersioningBehavior.UNSPECIFIED.value
        return completion

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        if self._context_free:
            return None
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        if not self._context_free:
            return self._inner.get_external_store_context(command_info)
        # Without external storage the SDK reads nothing of it; the workflow's own, as the
        # SDK builds it for an activation, costs no call into the sandbox.
        if self._store_context is None:
            from temporalio.converter._extstore import (
                StorageDriverStoreContext,
                StorageDriverWorkflowInfo,
            )

            info = self.get_info()
            self._store_context = StorageDriverStoreContext(
                target=StorageDriverWorkflowInfo(
                    namespace=info.namespace,
                    id=info.workflow_id,
                    run_id=info.run_id,
                    type=info.workflow_type,
                )
            )
        return self._store_context

    def get_info(self) -> Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class KeeperRunner(WorkflowRunner):
    """The SDK's sandboxed runner, with the table above applied to every instance."""

    def __init__(self, inner: WorkflowRunner, *, unversioned: bool, context_free: bool):
        self._inner = inner
        self._unversioned = unversioned
        self._context_free = context_free

    def prepare_workflow(self, defn: _Definition) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Instance(
            self._inner.create_instance(det),
            unversioned=self._unversioned,
            context_free=self._context_free,
        )

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._inner.set_worker_level_failure_exception_types(types)


def workflow_runner(versioned: bool, converter: DataConverter) -> WorkflowRunner:
    """The runner of a worker that is `versioned` (has deployment options) and whose client
    converts payloads with `converter`."""
    return KeeperRunner(
        SandboxedWorkflowRunner(),
        unversioned=not versioned,
        context_free=ignores_contexts(converter),
    )
