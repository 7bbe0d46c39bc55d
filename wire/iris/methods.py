"""Each iris method keeper calls, with its path and its request and response messages: one
table the client and the emulator both read."""

from __future__ import annotations

from typing import NamedTuple

from keeper.wire.iris import connect
from keeper.wire.iris import messages as m
from keeper.wire.iris.codec import WireMessage


class Method(NamedTuple):
    path: str
    request: type[WireMessage]
    response: type[WireMessage]


METHODS: tuple[Method, ...] = (
    Method(connect.LAUNCH_JOB, m.LaunchJobRequest, m.LaunchJobResponse),
    Method(connect.GET_JOB_STATUS, m.GetJobStatusRequest, m.GetJobStatusResponse),
    Method(connect.GET_JOB_STATE, m.GetJobStateRequest, m.GetJobStateResponse),
    Method(connect.TERMINATE_JOB, m.TerminateJobRequest, m.Empty),
    Method(connect.LIST_JOBS, m.ListJobsRequest, m.ListJobsResponse),
    Method(connect.GET_TASK_STATUS, m.GetTaskStatusRequest, m.GetTaskStatusResponse),
    Method(connect.LIST_TASKS, m.ListTasksRequest, m.ListTasksResponse),
    Method(connect.GET_TASK_LOGS, m.GetTaskLogsRequest, m.GetTaskLogsResponse),
    Method(connect.PROFILE_TASK, m.ProfileTaskRequest, m.ProfileTaskResponse),
    Method(connect.EXEC_IN_CONTAINER, m.ExecInContainerRequest, m.ExecInContainerResponse),
    Method(connect.FETCH_LOGS, m.FetchLogsRequest, m.FetchLogsResponse),
    Method(connect.FINELOG_FETCH_LOGS, m.FetchLogsRequest, m.FetchLogsResponse),
    Method(connect.PROXIED_FETCH_LOGS, m.FetchLogsRequest, m.FetchLogsResponse),
)

BY_PATH: dict[str, Method] = {method.path: method for method in METHODS}
