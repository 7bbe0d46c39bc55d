import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_PENDING: _ClassVar[JobState]
    JOB_RUNNING: _ClassVar[JobState]
    JOB_COMPLETING: _ClassVar[JobState]
    JOB_COMPLETED: _ClassVar[JobState]
    JOB_FAILED: _ClassVar[JobState]
    JOB_CANCELLED: _ClassVar[JobState]
    JOB_TIMEOUT: _ClassVar[JobState]
    JOB_NODE_FAIL: _ClassVar[JobState]
    JOB_PREEMPTED: _ClassVar[JobState]
    JOB_SUSPENDED: _ClassVar[JobState]
    JOB_DEADLINE: _ClassVar[JobState]
    JOB_OUT_OF_MEMORY: _ClassVar[JobState]
    JOB_REQUEUED: _ClassVar[JobState]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_IDLE: _ClassVar[NodeState]
    NODE_ALLOCATED: _ClassVar[NodeState]
    NODE_MIXED: _ClassVar[NodeState]
    NODE_DOWN: _ClassVar[NodeState]
    NODE_DRAIN: _ClassVar[NodeState]
    NODE_DRAINING: _ClassVar[NodeState]
    NODE_ERROR: _ClassVar[NodeState]
    NODE_UNKNOWN: _ClassVar[NodeState]
    NODE_SUSPENDED: _ClassVar[NodeState]

class GpuLinkType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GPU_LINK_PCIE: _ClassVar[GpuLinkType]
    GPU_LINK_XGMI: _ClassVar[GpuLinkType]
    GPU_LINK_NVLINK: _ClassVar[GpuLinkType]
JOB_PENDING: JobState
JOB_RUNNING: JobState
JOB_COMPLETING: JobState
JOB_COMPLETED: JobState
JOB_FAILED: JobState
JOB_CANCELLED: JobState
JOB_TIMEOUT: JobState
JOB_NODE_FAIL: JobState
JOB_PREEMPTED: JobState
JOB_SUSPENDED: JobState
JOB_DEADLINE: JobState
JOB_OUT_OF_MEMORY: JobState
JOB_REQUEUED: JobState
NODE_IDLE: NodeState
NODE_ALLOCATED: NodeState
NODE_MIXED: NodeState
NODE_DOWN: NodeState
NODE_DRAIN: NodeState
NODE_DRAINING: NodeState
NODE_ERROR: NodeState
NODE_UNKNOWN: NodeState
NODE_SUSPENDED: NodeState
GPU_LINK_PCIE: GpuLinkType
GPU_LINK_XGMI: GpuLinkType
GPU_LINK_NVLINK: GpuLinkType

class GpuResource(_message.Message):
    __slots__ = ("device_id", "gpu_type", "memory_mb", "peer_gpus", "link_type")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    PEER_GPUS_FIELD_NUMBER: _ClassVar[int]
    LINK_TYPE_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    gpu_type: str
    memory_mb: int
    peer_gpus: _containers.RepeatedScalarFieldContainer[int]
    link_type: GpuLinkType
    def __init__(self, device_id: _Optional[int] = ..., gpu_type: _Optional[str] = ..., memory_mb: _Optional[int] = ..., peer_gpus: _Optional[_Iterable[int]] = ..., link_type: _Optional[_Union[GpuLinkType, str]] = ...) -> None: ...

class ResourceSet(_message.Message):
    __slots__ = ("cpus", "memory_mb", "gpus", "generic")
    class GenericEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GENERIC_FIELD_NUMBER: _ClassVar[int]
    cpus: int
    memory_mb: int
    gpus: _containers.RepeatedCompositeFieldContainer[GpuResource]
    generic: _containers.ScalarMap[str, int]
    def __init__(self, cpus: _Optional[int] = ..., memory_mb: _Optional[int] = ..., gpus: _Optional[_Iterable[_Union[GpuResource, _Mapping]]] = ..., generic: _Optional[_Mapping[str, int]] = ...) -> None: ...

class AllocatedDevice(_message.Message):
    __slots__ = ("device_id", "count")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    device_id: int
    count: int
    def __init__(self, device_id: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class DeviceAllocations(_message.Message):
    __slots__ = ("devices",)
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[AllocatedDevice]
    def __init__(self, devices: _Optional[_Iterable[_Union[AllocatedDevice, _Mapping]]] = ...) -> None: ...

class ResourceAllocations(_message.Message):
    __slots__ = ("cpus", "memory_mb", "devices")
    class DevicesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: DeviceAllocations
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[DeviceAllocations, _Mapping]] = ...) -> None: ...
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    cpus: int
    memory_mb: int
    devices: _containers.MessageMap[str, DeviceAllocations]
    def __init__(self, cpus: _Optional[int] = ..., memory_mb: _Optional[int] = ..., devices: _Optional[_Mapping[str, DeviceAllocations]] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "name", "user", "uid", "partition", "account", "state", "state_reason", "submit_time", "start_time", "end_time", "time_limit", "run_time", "num_nodes", "nodelist", "exit_code", "resources", "array_job_id", "array_task_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    NODELIST_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ARRAY_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ARRAY_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    name: str
    user: str
    uid: int
    partition: str
    account: str
    state: JobState
    state_reason: str
    submit_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    time_limit: _duration_pb2.Duration
    run_time: _duration_pb2.Duration
    num_nodes: int
    nodelist: str
    exit_code: int
    resources: ResourceAllocations
    array_job_id: int
    array_task_id: int
    def __init__(self, job_id: _Optional[int] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., uid: _Optional[int] = ..., partition: _Optional[str] = ..., account: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., state_reason: _Optional[str] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., time_limit: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., run_time: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., num_nodes: _Optional[int] = ..., nodelist: _Optional[str] = ..., exit_code: _Optional[int] = ..., resources: _Optional[_Union[ResourceAllocations, _Mapping]] = ..., array_job_id: _Optional[int] = ..., array_task_id: _Optional[int] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("name", "state", "state_reason", "partitions", "total_resources", "alloc_resources", "boot_time", "slurmd_start_time", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ALLOC_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    BOOT_TIME_FIELD_NUMBER: _ClassVar[int]
    SLURMD_START_TIME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: NodeState
    state_reason: str
    partitions: _containers.RepeatedScalarFieldContainer[str]
    total_resources: ResourceSet
    alloc_resources: ResourceAllocations
    boot_time: _timestamp_pb2.Timestamp
    slurmd_start_time: _timestamp_pb2.Timestamp
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., state_reason: _Optional[str] = ..., partitions: _Optional[_Iterable[str]] = ..., total_resources: _Optional[_Union[ResourceSet, _Mapping]] = ..., alloc_resources: _Optional[_Union[ResourceAllocations, _Mapping]] = ..., boot_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., slurmd_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetJobsRequest(_message.Message):
    __slots__ = ("states", "user", "partition", "account", "job_ids", "name", "nodes")
    STATES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    user: str
    partition: str
    account: str
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    name: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., user: _Optional[str] = ..., partition: _Optional[str] = ..., account: _Optional[str] = ..., job_ids: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class GetJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    def __init__(self, job_id: _Optional[int] = ...) -> None: ...

class GetNodesRequest(_message.Message):
    __slots__ = ("states", "partition", "nodelist")
    STATES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NODELIST_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[NodeState]
    partition: str
    nodelist: str
    def __init__(self, states: _Optional[_Iterable[_Union[NodeState, str]]] = ..., partition: _Optional[str] = ..., nodelist: _Optional[str] = ...) -> None: ...

class GetNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class UpdateNodeRequest(_message.Message):
    __slots__ = ("name", "state", "reason", "labels", "remove_labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: NodeState
    reason: str
    labels: _containers.ScalarMap[str, str]
    remove_labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., reason: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., remove_labels: _Optional[_Iterable[str]] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ("actual_state", "running_jobs")
    ACTUAL_STATE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    actual_state: str
    running_jobs: int
    def __init__(self, actual_state: _Optional[str] = ..., running_jobs: _Optional[int] = ...) -> None: ...

class PingResponse(_message.Message):
    __slots__ = ("hostname", "server_time", "version", "federation_peers")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_PEERS_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    server_time: _timestamp_pb2.Timestamp
    version: str
    federation_peers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, hostname: _Optional[str] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[str] = ..., federation_peers: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterAgentRequest(_message.Message):
    __slots__ = ("hostname", "resources", "version", "address", "port", "wg_pubkey", "labels", "join_token")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    WG_PUBKEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    resources: ResourceSet
    version: str
    address: str
    port: int
    wg_pubkey: str
    labels: _containers.ScalarMap[str, str]
    join_token: str
    def __init__(self, hostname: _Optional[str] = ..., resources: _Optional[_Union[ResourceSet, _Mapping]] = ..., version: _Optional[str] = ..., address: _Optional[str] = ..., port: _Optional[int] = ..., wg_pubkey: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., join_token: _Optional[str] = ...) -> None: ...

class RegisterAgentResponse(_message.Message):
    __slots__ = ("accepted", "message", "node_token")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    node_token: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ..., node_token: _Optional[str] = ...) -> None: ...

class K0sNodeStatus(_message.Message):
    __slots__ = ("unit_active", "restart_count", "install_duration_seconds")
    UNIT_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    INSTALL_DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    unit_active: bool
    restart_count: int
    install_duration_seconds: float
    def __init__(self, unit_active: _Optional[bool] = ..., restart_count: _Optional[int] = ..., install_duration_seconds: _Optional[float] = ...) -> None: ...

class RunningJobStatus(_message.Message):
    __slots__ = ("job_id", "state", "exit_code")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    state: JobState
    exit_code: int
    def __init__(self, job_id: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ..., exit_code: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("hostname", "cpu_load", "free_memory_mb", "running_jobs", "node_token", "wg_pubkey", "k0s_status")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    CPU_LOAD_FIELD_NUMBER: _ClassVar[int]
    FREE_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    NODE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WG_PUBKEY_FIELD_NUMBER: _ClassVar[int]
    K0S_STATUS_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    cpu_load: int
    free_memory_mb: int
    running_jobs: _containers.RepeatedCompositeFieldContainer[RunningJobStatus]
    node_token: str
    wg_pubkey: str
    k0s_status: K0sNodeStatus
    def __init__(self, hostname: _Optional[str] = ..., cpu_load: _Optional[int] = ..., free_memory_mb: _Optional[int] = ..., running_jobs: _Optional[_Iterable[_Union[RunningJobStatus, _Mapping]]] = ..., node_token: _Optional[str] = ..., wg_pubkey: _Optional[str] = ..., k0s_status: _Optional[_Union[K0sNodeStatus, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportJobStatusRequest(_message.Message):
    __slots__ = ("job_id", "state", "exit_code", "message", "drain_node", "drain_reason", "reporting_node", "signal", "run_attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_NODE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_REASON_FIELD_NUMBER: _ClassVar[int]
    REPORTING_NODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    RUN_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    state: JobState
    exit_code: int
    message: str
    drain_node: bool
    drain_reason: str
    reporting_node: str
    signal: int
    run_attempt: int
    def __init__(self, job_id: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., drain_node: _Optional[bool] = ..., drain_reason: _Optional[str] = ..., reporting_node: _Optional[str] = ..., signal: _Optional[int] = ..., run_attempt: _Optional[int] = ...) -> None: ...

class AgentCancelJobRequest(_message.Message):
    __slots__ = ("job_id", "signal")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    signal: int
    def __init__(self, job_id: _Optional[int] = ..., signal: _Optional[int] = ...) -> None: ...
