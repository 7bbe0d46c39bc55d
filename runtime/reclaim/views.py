"""spur's wire messages as keeper's domain views: canonical node ids, aware datetimes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from keeper.domain.reclaim.identity import NodeNameError, canonical_node, expand_nodelist
from keeper.domain.reclaim.jobs import JobState
from keeper.domain.reclaim.models import DRAIN_REASON_PREFIX, ControllerView, JobView
from keeper.wire.spur import slurm_pb2


def _time(ts: Timestamp, present: bool) -> datetime | None:
    if not present or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return ts.ToDatetime(tzinfo=UTC)


def _nodes_of(nodelist: str, aliases: Mapping[str, str]) -> frozenset[str]:
    try:
        return frozenset(canonical_node(name, aliases) for name in expand_nodelist(nodelist))
    except NodeNameError:
        # A nodelist keeper cannot read names no node it could compare: as good as empty,
        # which spares the job (domain/reclaim/decide.py row 5).
        return frozenset()


def job_view(
    info: slurm_pb2.JobInfo,
    aliases: Mapping[str, str],
    seen: dict[str, frozenset[str]] | None = None,
) -> JobView:
    """`seen` caches nodelists already resolved in this read: a big view repeats them."""
    if seen is None:
        nodes = _nodes_of(info.nodelist, aliases)
    else:
        nodes = seen.get(info.nodelist)  # type: ignore[assignment]
        if nodes is None:
            nodes = seen[info.nodelist] = _nodes_of(info.nodelist, aliases)
    try:
        state = JobState(info.state)
    except ValueError:
        state = JobState.PENDING  # an unknown state is treated as possibly mid-dispatch
    return JobView(
        job_id=info.job_id,
        state=state,
        submit_time=_time(info.submit_time, info.HasField("submit_time")),
        end_time=_time(info.end_time, info.HasField("end_time")),
        nodes=nodes,
        nodelist=info.nodelist,
    )


def controller_view(
    jobs: Iterable[slurm_pb2.JobInfo], read_at: datetime, aliases: Mapping[str, str]
) -> ControllerView:
    seen: dict[str, frozenset[str]] = {}
    return ControllerView(
        read_at=read_at, jobs={j.job_id: job_view(j, aliases, seen) for j in jobs}
    )


def node_state_name(state: int) -> str:
    try:
        return slurm_pb2.NodeState.Name(state).removeprefix("NODE_").lower()
    except ValueError:
        return str(state)


def drained_by_keeper(node: slurm_pb2.NodeInfo) -> bool:
    return node.state in (slurm_pb2.NODE_DRAIN, slurm_pb2.NODE_DRAINING) and (
        node.state_reason.startswith(DRAIN_REASON_PREFIX)
    )
