"""spur's SlurmController over gRPC, served from a Cluster.

The same servicer runs as the leader and, with `leader` set, as a follower that serves
reads from the same state but refuses writes the way a spur replica does when it cannot
forward them.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import grpc
import hostlist
from google.protobuf import empty_pb2, timestamp_pb2

from emulators.spur.state import Cluster, Job, Node, NotFound, Registration
from keeper.wire.spur import slurm_pb2, slurm_pb2_grpc

log = logging.getLogger("emulators.spur")
VERSION = "spur-emulator"


def timestamp(seconds: float | None) -> timestamp_pb2.Timestamp | None:
    if seconds is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def job_info(job: Job) -> slurm_pb2.JobInfo:
    return slurm_pb2.JobInfo(
        job_id=job.job_id,
        name=job.name,
        user=job.user,
        state=job.state,  # type: ignore[arg-type]
        state_reason=job.state_reason,
        submit_time=timestamp(job.submit_time),
        start_time=timestamp(job.start_time),
        end_time=timestamp(job.end_time),
        num_nodes=len(job.allocated_nodes) or len(job.dispatched_to) or 1,
        nodelist=hostlist.collect_hostlist(job.allocated_nodes) if job.allocated_nodes else "",
        exit_code=job.exit_code,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
    )


def node_info(node: Node) -> slurm_pb2.NodeInfo:
    gpus = [slurm_pb2.GpuResource(device_id=i, gpu_type="mi300x") for i in range(node.gpus)]
    return slurm_pb2.NodeInfo(
        name=node.name,
        state=node.state,  # type: ignore[arg-type]
        state_reason=node.state_reason,
        partitions=["default"],
        total_resources=slurm_pb2.ResourceSet(cpus=node.cpus, memory_mb=node.memory_mb, gpus=gpus),
        boot_time=timestamp(node.boot_time),
        slurmd_start_time=timestamp(node.slurmd_start_time),
        labels=node.labels,
    )


def peer_ip(peer: str) -> str:
    """'ipv4:127.0.0.1:5000' or 'ipv6:[::1]:5000' -> the address part."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return ""


class ControllerService(slurm_pb2_grpc.SlurmControllerServicer):
    def __init__(
        self,
        cluster: Cluster,
        *,
        resolve: Callable[[str], str],
        boot_time_of: Callable[[str], float | None],
        token: str | None = None,
        leader: str | None = None,
    ) -> None:
        self.cluster = cluster
        # hostname an agent reports -> the controller's name for its node.
        self.resolve = resolve
        self.boot_time_of = boot_time_of
        self.token = token
        # Set on a follower: the leader's host:port, sent back on refused writes.
        self.leader = leader

    async def _guard(self, context: grpc.aio.ServicerContext, write: bool) -> None:
        if self.token is not None:
            metadata = dict(context.invocation_metadata() or ())
            if metadata.get("authorization") != f"Bearer {self.token}":
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid token")
        if write and self.leader is not None:
            context.set_trailing_metadata((("x-spur-leader", self.leader),))
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not the Raft leader")

    # ------------------------------------------------------------- reads

    async def GetJobs(self, request: Any, context: Any) -> slurm_pb2.GetJobsResponse:
        await self._guard(context, write=False)
        names = {n for n in request.name.split(",") if n} if request.name else None
        jobs = self.cluster.query(
            states=set(request.states),
            job_ids=set(request.job_ids),
            nodes=set(request.nodes),
            user=request.user,
            names=names,
        )
        return slurm_pb2.GetJobsResponse(jobs=[job_info(job) for job in jobs])

    async def GetJob(self, request: Any, context: Any) -> slurm_pb2.JobInfo:
        await self._guard(context, write=False)
        job = self.cluster.jobs.get(request.job_id)
        if job is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} not found")
        return job_info(job)

    async def GetNodes(self, request: Any, context: Any) -> slurm_pb2.GetNodesResponse:
        await self._guard(context, write=False)
        wanted = set(request.states)
        pattern = set(hostlist.expand_hostlist(request.nodelist)) if request.nodelist else None
        nodes = [
            node_info(node)
            for node in sorted(self.cluster.nodes.values(), key=lambda n: n.name)
            if (not wanted or node.state in wanted) and (pattern is None or node.name in pattern)
        ]
        return slurm_pb2.GetNodesResponse(nodes=nodes)

    async def Ping(self, request: Any, context: Any) -> slurm_pb2.PingResponse:
        await self._guard(context, write=False)
        return slurm_pb2.PingResponse(
            hostname=socket.gethostname(),
            server_time=timestamp(self.cluster.clock.now()),
            version=VERSION,
        )

    # ------------------------------------------------------------- writes

    async def DrainNode(self, request: Any, context: Any) -> slurm_pb2.DrainNodeResponse:
        await self._guard(context, write=True)
        try:
            actual, running = self.cluster.drain(request.name, request.reason)
        except NotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        return slurm_pb2.DrainNodeResponse(actual_state=actual, running_jobs=running)

    async def UpdateNode(self, request: Any, context: Any) -> empty_pb2.Empty:
        await self._guard(context, write=True)
        state = request.state if request.HasField("state") else None
        reason = request.reason if request.HasField("reason") else None
        try:
            self.cluster.update(
                request.name, state, reason, dict(request.labels), list(request.remove_labels)
            )
        except NotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return empty_pb2.Empty()

    async def RegisterAgent(self, request: Any, context: Any) -> slurm_pb2.RegisterAgentResponse:
        await self._guard(context, write=True)
        name = self.resolve(request.hostname)
        reg = Registration(
            hostname=request.hostname,
            address=request.address or peer_ip(context.peer()),
            port=request.port,
            cpus=request.resources.cpus,
            memory_mb=request.resources.memory_mb,
            gpus=len(request.resources.gpus),
            labels=dict(request.labels),
        )
        booted = self.boot_time_of(request.hostname)
        self.cluster.register(name, reg, booted if booted is not None else self.cluster.clock.now())
        return slurm_pb2.RegisterAgentResponse(accepted=True, message="registered")

    async def ReportJobStatus(self, request: Any, context: Any) -> empty_pb2.Empty:
        """An agent's completion report, answered as spurctld does: NOT_FOUND for a job it
        does not track, INVALID_ARGUMENT for a node outside the job's allocation, and OK for
        a job already ended or a superseded run's report (both only logged)."""
        await self._guard(context, write=True)
        if request.reporting_node:
            if request.exit_code == 0 and request.state != slurm_pb2.JOB_COMPLETED:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "state must be COMPLETED")
            try:
                self.cluster.node_complete(
                    request.job_id,
                    self.resolve(request.reporting_node),
                    request.exit_code,
                    request.signal,
                    request.run_attempt,
                )
            except NotFound as exc:
                await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
            except ValueError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return empty_pb2.Empty()

    async def Heartbeat(self, request: Any, context: Any) -> slurm_pb2.HeartbeatResponse:
        await self._guard(context, write=True)
        name = self.resolve(request.hostname)
        try:
            self.cluster.heartbeat(name, [job.job_id for job in request.running_jobs])
        except NotFound:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"node {request.hostname} not found — is the node registered?",
            )
        return slurm_pb2.HeartbeatResponse()
