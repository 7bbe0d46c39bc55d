"""Worker Deployment versioning: which version a worker polls as, how a version becomes
current, and how an unversioned worker serves the same workflow classes.

Each workflow type chooses its behaviour on its `@workflow.defn`; the choices and their
reasons are in docs/operations.md#rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    WorkerDeploymentConfig,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import Info

from keeper.runtime.settings import WorkerSettings

if TYPE_CHECKING:
    # The SDK's own parameter types for these two instance methods.
    from temporalio.converter import SerializationContext
    from temporalio.converter._extstore import StorageDriverStoreContext
    from temporalio.worker._command_aware_visitor import CommandInfo
    from temporalio.workflow import _Definition


def worker_version(settings: WorkerSettings) -> WorkerDeploymentVersion | None:
    """The version `keeper worker` polls as; None when it runs unversioned."""
    if not settings.versioned:
        return None
    return WorkerDeploymentVersion(settings.deployment_name, settings.build_id)


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    # No default behaviour: a workflow type that has not chosen one stops the worker at
    # start instead of running with a behaviour nobody decided on.
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True)


class _UnversionedInstance(WorkflowInstance):
    def __init__(self, inner: WorkflowInstance) -> None:
        self._inner = inner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        completion = self._inner.activate(act)
        if completion.HasField("successful"):
            completion.successful.versioning_behavior = VersioningBehavior.UNSPECIFIED.value
        return completion

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Info:
        return self._inner.get_info()

    def get_thread_id(self) -> int | None:
        return self._inner.get_thread_id()


class UnversionedRunner(WorkflowRunner):
    """Runs workflows for a worker without deployment options, leaving out the versioning
    behaviour each keeper workflow type declares.

    The server rejects a workflow task that an unversioned worker completes with a
    behaviour ("versioning behavior cannot be specified without deployment options being
    set with versioned mode"), and the run then never progresses.
    """

    def __init__(self, inner: WorkflowRunner) -> None:
        self._inner = inner

    def prepare_workflow(self, defn: _Definition) -> None:
        self._inner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _UnversionedInstance(self._inner.create_instance(det))

    def set_worker_level_failure_exception_types(
        self, types: Sequence[type[BaseException]]
    ) -> None:
        self._inner.set_worker_level_failure_exception_types(types)


def workflow_runner(version: WorkerDeploymentVersion | None) -> WorkflowRunner:
    if version is None:
        return UnversionedRunner(SandboxedWorkflowRunner())
    return SandboxedWorkflowRunner()


async def current_build_id(
    client: Client, deployment_name: str, rpc_timeout: timedelta | None = None
) -> str | None:
    """The build id of the deployment's current version; None while there is none (tasks
    then go to unversioned workers) or the deployment has never been polled."""
    try:
        response = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=deployment_name
            ),
            timeout=rpc_timeout,
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    routing = response.worker_deployment_info.routing_config
    return routing.current_deployment_version.build_id or None


async def make_current(
    client: Client,
    version: WorkerDeploymentVersion,
    identity: str,
    rpc_timeout: timedelta | None = None,
) -> str | None:
    """Makes `version` current; returns the build id that was current before (None:
    unversioned). Idempotent. Refused until a worker of that version has polled, so callers
    retry for a while after starting one."""
    response = await client.workflow_service.set_worker_deployment_current_version(
        SetWorkerDeploymentCurrentVersionRequest(
            namespace=client.namespace,
            deployment_name=version.deployment_name,
            build_id=version.build_id,
            identity=identity,
        ),
        timeout=rpc_timeout,
    )
    return response.previous_deployment_version.build_id or None
