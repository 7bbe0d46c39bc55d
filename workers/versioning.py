"""Worker Deployment versioning: which version a worker polls as and how a version becomes
current (how an unversioned worker serves the same workflow classes: workers/runner.py).

Each workflow type chooses its behaviour on its `@workflow.defn`; the choices and their
reasons are in docs/operations.md#rollouts.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from keeper.runtime.settings import WorkerSettings


def worker_version(settings: WorkerSettings) -> WorkerDeploymentVersion | None:
    """The version `keeper worker` polls as; None when it runs unversioned."""
    if not settings.versioned:
        return None
    return WorkerDeploymentVersion(settings.deployment_name, settings.build_id)


def deployment_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    # No default behaviour: a workflow type that has not chosen one stops the worker at
    # start instead of running with a behaviour nobody decided on.
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True)


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
