"""Helpers for the end-to-end tests on the Temporal dev server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from emulators.tpu import TpuEmulator
from keeper.domain.tpu.models import BootstrapStatus
from keeper.domain.tpu.phases import Phase
from tests.harness import tool_path

REPO = Path(__file__).resolve().parent.parent


def process_gone(pid: int) -> bool:
    """Exited, reaped or not: a container's init may never reap an orphaned grandchild."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or during the read
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# `python -m MODULE ARGS` that takes Ctrl-C as a terminal's foreground command does. A suite
# started in the background by a non-interactive shell ignores SIGINT, and a child inherits
# that; the child puts Python's own handler back itself. Not with a preexec_fn: that forces a
# fork, which runs gRPC's fork handlers in the child (the test process serves gRPC), and they
# can kill it before exec (tests/runners/test_provider_protocol.py shows the same for providers).
_INTERRUPTIBLE = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "module = sys.argv.pop(1); runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def interruptible_module(module: str, *args: str) -> list[str]:
    """The argv of `python -m module args` whose process takes SIGINT as Ctrl-C."""
    return [sys.executable, "-c", _INTERRUPTIBLE, module, *args]


def dev_address(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


async def own_namespace(
    env: WorkflowEnvironment, prefix: str, ready: Callable[[Client], Awaitable[object]]
) -> Client:
    """A client of a new namespace of the test's own (schedule ids such as tpu-sweeper are
    one per namespace), once `ready(client)` succeeds there: a new namespace takes a moment
    to answer."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await env.client.workflow_service.register_namespace(
        RegisterNamespaceRequest(
            namespace=name, workflow_execution_retention_period=Duration(seconds=86400)
        )
    )
    for _ in range(100):
        try:
            client = await Client.connect(
                dev_address(env), namespace=name, data_converter=pydantic_data_converter
            )
            await ready(client)
            return client
        except RPCError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"namespace {name} never became usable")


async def wait_for_phase(
    handle: WorkflowHandle[Any, Any], phase: Phase, within: float = 30.0
) -> BootstrapStatus:
    seen: BootstrapStatus | None = None
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while loop.time() < end:
        try:
            seen = await handle.query("status", result_type=BootstrapStatus)
        except Exception:  # the workflow may not have run its first task yet
            seen = None
        if seen is not None and seen.phase == phase:
            return seen
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never reached {phase}; last seen {seen}")


async def temporal_cli(env: WorkflowEnvironment, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs the temporal CLI without blocking the loop the in-process worker runs on."""
    process = await asyncio.create_subprocess_exec(
        tool_path("temporal"),
        *args,
        "--address",
        dev_address(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return subprocess.CompletedProcess(
        list(args), process.returncode or 0, out.decode(), err.decode()
    )


def write_config(
    path: Path, env: WorkflowEnvironment, emulator: TpuEmulator, task_queue: str
) -> Path:
    config = {
        "temporal": {"address": dev_address(env), "namespace": "default", "task_queue": task_queue},
        "tpu": {
            "endpoint": "emulator",
            "emulator_address": emulator.grpc_target,
            "project": "keeper-test",
            "zone": "us-central2-b",
            "call_timeout": "5s",
        },
        "health": {"timeout": "1s"},
        "worker": {"log_dir": str(path.parent), "graceful_shutdown": "1s", "versioned": False},
        "sweeper": {"interval": "1h"},
        # Beside the config, not the default .dev/runners.db in the worker's working
        # directory (the repository), which every concurrent test's worker would share.
        "runners": {"store_url": f"sqlite:///{path.parent / 'runners.db'}"},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def start_worker_process(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for var in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "KEEPER_TASK_QUEUE"):
        env.pop(var, None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "keeper.cli.main", "--config", str(config), "worker"],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
