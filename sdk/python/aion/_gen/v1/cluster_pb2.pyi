from aion._gen.v1 import intervention_pb2 as _intervention_pb2
from aion._gen.v1 import namespace_pb2 as _namespace_pb2
from aion._gen.v1 import schedule_pb2 as _schedule_pb2
from aion._gen.v1 import workflow_pb2 as _workflow_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DISCONNECT_REASON_DEREGISTERED: DisconnectReason
DISCONNECT_REASON_DISCONNECT: DisconnectReason
DISCONNECT_REASON_DRAINED: DisconnectReason
DISCONNECT_REASON_SERVER_LOST: DisconnectReason
DISCONNECT_REASON_TIMEOUT: DisconnectReason
DISCONNECT_REASON_UNSPECIFIED: DisconnectReason
WORKER_STATE_CONNECTED: WorkerState
WORKER_STATE_DRAINING: WorkerState
WORKER_STATE_UNSPECIFIED: WorkerState

class ClusterEvent(_message.Message):
    __slots__ = ["epoch", "namespace_created", "placement_changed", "pool_stats", "resumed", "run_closed", "run_started", "schedule_fired", "sequence", "snapshot", "time", "worker_connected", "worker_disconnected", "worker_draining"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_CREATED_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_CHANGED_FIELD_NUMBER: _ClassVar[int]
    POOL_STATS_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    RUN_CLOSED_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIRED_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WORKER_CONNECTED_FIELD_NUMBER: _ClassVar[int]
    WORKER_DISCONNECTED_FIELD_NUMBER: _ClassVar[int]
    WORKER_DRAINING_FIELD_NUMBER: _ClassVar[int]
    epoch: str
    namespace_created: NamespaceCreated
    placement_changed: PlacementChanged
    pool_stats: PoolStatsUpdate
    resumed: Resumed
    run_closed: RunClosed
    run_started: RunStarted
    schedule_fired: ScheduleFired
    sequence: int
    snapshot: ClusterSnapshot
    time: _timestamp_pb2.Timestamp
    worker_connected: WorkerConnected
    worker_disconnected: WorkerDisconnected
    worker_draining: WorkerDraining
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., epoch: _Optional[str] = ..., snapshot: _Optional[_Union[ClusterSnapshot, _Mapping]] = ..., worker_connected: _Optional[_Union[WorkerConnected, _Mapping]] = ..., worker_draining: _Optional[_Union[WorkerDraining, _Mapping]] = ..., worker_disconnected: _Optional[_Union[WorkerDisconnected, _Mapping]] = ..., namespace_created: _Optional[_Union[NamespaceCreated, _Mapping]] = ..., placement_changed: _Optional[_Union[PlacementChanged, _Mapping]] = ..., pool_stats: _Optional[_Union[PoolStatsUpdate, _Mapping]] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., run_closed: _Optional[_Union[RunClosed, _Mapping]] = ..., schedule_fired: _Optional[_Union[ScheduleFired, _Mapping]] = ..., resumed: _Optional[_Union[Resumed, _Mapping]] = ...) -> None: ...

class ClusterSnapshot(_message.Message):
    __slots__ = ["namespaces", "pools", "workers"]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[_namespace_pb2.Namespace]
    pools: _containers.RepeatedCompositeFieldContainer[PoolStats]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ..., namespaces: _Optional[_Iterable[_Union[_namespace_pb2.Namespace, _Mapping]]] = ..., pools: _Optional[_Iterable[_Union[PoolStats, _Mapping]]] = ...) -> None: ...

class DrainWorkerRequest(_message.Message):
    __slots__ = ["worker_id"]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    def __init__(self, worker_id: _Optional[int] = ...) -> None: ...

class DrainWorkerResponse(_message.Message):
    __slots__ = ["worker"]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class ListWaitingRequest(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class ListWaitingResponse(_message.Message):
    __slots__ = ["groups", "truncated"]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[WaitingGroup]
    truncated: int
    def __init__(self, groups: _Optional[_Iterable[_Union[WaitingGroup, _Mapping]]] = ..., truncated: _Optional[int] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ["workers"]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ...) -> None: ...

class NamespaceCreated(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: _namespace_pb2.Namespace
    def __init__(self, namespace: _Optional[_Union[_namespace_pb2.Namespace, _Mapping]] = ...) -> None: ...

class PlacementChanged(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: _namespace_pb2.Namespace
    def __init__(self, namespace: _Optional[_Union[_namespace_pb2.Namespace, _Mapping]] = ...) -> None: ...

class PoolStats(_message.Message):
    __slots__ = ["backlog", "namespace", "oldest_age", "slots_free", "task_queue", "workers"]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OLDEST_AGE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FREE_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    backlog: int
    namespace: str
    oldest_age: _duration_pb2.Duration
    slots_free: int
    task_queue: str
    workers: int
    def __init__(self, namespace: _Optional[str] = ..., task_queue: _Optional[str] = ..., backlog: _Optional[int] = ..., oldest_age: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., workers: _Optional[int] = ..., slots_free: _Optional[int] = ...) -> None: ...

class PoolStatsUpdate(_message.Message):
    __slots__ = ["pools"]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[PoolStats]
    def __init__(self, pools: _Optional[_Iterable[_Union[PoolStats, _Mapping]]] = ...) -> None: ...

class Resumed(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RunClosed(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _workflow_pb2.Run
    def __init__(self, run: _Optional[_Union[_workflow_pb2.Run, _Mapping]] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _workflow_pb2.Run
    def __init__(self, run: _Optional[_Union[_workflow_pb2.Run, _Mapping]] = ...) -> None: ...

class ScheduleFired(_message.Message):
    __slots__ = ["action_id", "count", "detail", "namespace", "nominal_time", "origin", "outcome", "run_id", "schedule_id"]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    count: int
    detail: str
    namespace: str
    nominal_time: _timestamp_pb2.Timestamp
    origin: str
    outcome: _schedule_pb2.ScheduleActionOutcome
    run_id: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., outcome: _Optional[_Union[_schedule_pb2.ScheduleActionOutcome, str]] = ..., origin: _Optional[str] = ..., nominal_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ..., action_id: _Optional[str] = ..., run_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class WaitingGroup(_message.Message):
    __slots__ = ["concurrency_key", "count", "fairness_key", "held_by", "kind", "oldest_ready_time", "priority", "task_queue", "type"]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OLDEST_READY_TIME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    concurrency_key: str
    count: int
    fairness_key: str
    held_by: str
    kind: str
    oldest_ready_time: _timestamp_pb2.Timestamp
    priority: int
    task_queue: str
    type: str
    def __init__(self, task_queue: _Optional[str] = ..., kind: _Optional[str] = ..., type: _Optional[str] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., held_by: _Optional[str] = ..., concurrency_key: _Optional[str] = ..., count: _Optional[int] = ..., oldest_ready_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ["after_sequence", "epoch"]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    epoch: str
    def __init__(self, after_sequence: _Optional[int] = ..., epoch: _Optional[str] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ["activity_types", "build_id", "capabilities", "compatible_build_ids", "connected_time", "id", "identity", "last_heartbeat_time", "namespaces", "node", "peer", "sdk_version", "server", "slots", "slots_in_use", "state", "task_queue", "transport", "workflow_slots", "workflow_slots_in_use", "workflow_types"]
    ACTIVITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    COMPATIBLE_BUILD_IDS_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_TIME_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    SDK_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_IN_USE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_SLOTS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_SLOTS_IN_USE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPES_FIELD_NUMBER: _ClassVar[int]
    activity_types: _containers.RepeatedScalarFieldContainer[str]
    build_id: str
    capabilities: _containers.RepeatedScalarFieldContainer[_intervention_pb2.InterventionPrimitive]
    compatible_build_ids: _containers.RepeatedScalarFieldContainer[str]
    connected_time: _timestamp_pb2.Timestamp
    id: int
    identity: str
    last_heartbeat_time: _timestamp_pb2.Timestamp
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    node: str
    peer: str
    sdk_version: str
    server: str
    slots: int
    slots_in_use: int
    state: WorkerState
    task_queue: str
    transport: str
    workflow_slots: int
    workflow_slots_in_use: int
    workflow_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[int] = ..., namespaces: _Optional[_Iterable[str]] = ..., task_queue: _Optional[str] = ..., node: _Optional[str] = ..., activity_types: _Optional[_Iterable[str]] = ..., slots: _Optional[int] = ..., slots_in_use: _Optional[int] = ..., state: _Optional[_Union[WorkerState, str]] = ..., transport: _Optional[str] = ..., connected_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., capabilities: _Optional[_Iterable[_Union[_intervention_pb2.InterventionPrimitive, str]]] = ..., identity: _Optional[str] = ..., sdk_version: _Optional[str] = ..., peer: _Optional[str] = ..., server: _Optional[str] = ..., workflow_types: _Optional[_Iterable[str]] = ..., build_id: _Optional[str] = ..., compatible_build_ids: _Optional[_Iterable[str]] = ..., workflow_slots: _Optional[int] = ..., workflow_slots_in_use: _Optional[int] = ...) -> None: ...

class WorkerConnected(_message.Message):
    __slots__ = ["worker"]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class WorkerDisconnected(_message.Message):
    __slots__ = ["namespaces", "reason", "worker_id"]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    reason: DisconnectReason
    worker_id: int
    def __init__(self, worker_id: _Optional[int] = ..., namespaces: _Optional[_Iterable[str]] = ..., reason: _Optional[_Union[DisconnectReason, str]] = ...) -> None: ...

class WorkerDraining(_message.Message):
    __slots__ = ["worker_id"]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: int
    def __init__(self, worker_id: _Optional[int] = ...) -> None: ...

class WorkerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DisconnectReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
