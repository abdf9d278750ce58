from aion._gen.v1 import common_pb2 as _common_pb2
from aion._gen.v1 import intervention_pb2 as _intervention_pb2
from aion._gen.v1 import workflow_pb2 as _workflow_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DRAIN_REASON_OPERATOR: DrainReason
DRAIN_REASON_SERVER_SHUTDOWN: DrainReason
DRAIN_REASON_UNSPECIFIED: DrainReason
RESULT_STATUS_ALREADY_RECORDED: ResultStatus
RESULT_STATUS_RECORDED: ResultStatus
RESULT_STATUS_STALE: ResultStatus
RESULT_STATUS_UNSPECIFIED: ResultStatus

class ActivityCanceled(_message.Message):
    __slots__ = ["details"]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    details: bytes
    def __init__(self, details: _Optional[bytes] = ...) -> None: ...

class ActivityCompleted(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: bytes
    def __init__(self, result: _Optional[bytes] = ...) -> None: ...

class ActivityHeartbeat(_message.Message):
    __slots__ = ["activity_id", "attempt", "details", "namespace"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    details: bytes
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., details: _Optional[bytes] = ...) -> None: ...

class ActivityResult(_message.Message):
    __slots__ = ["activity_id", "attempt", "canceled", "completed", "failed", "namespace", "trace_context"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    canceled: ActivityCanceled
    completed: ActivityCompleted
    failed: _common_pb2.Failure
    namespace: str
    trace_context: _common_pb2.TraceContext
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., completed: _Optional[_Union[ActivityCompleted, _Mapping]] = ..., failed: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., canceled: _Optional[_Union[ActivityCanceled, _Mapping]] = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class ActivityTask(_message.Message):
    __slots__ = ["activity_id", "activity_type", "attempt", "deadline", "heartbeat_timeout", "last_heartbeat_details", "namespace", "node", "payload", "run_id", "scheduled_time", "start_to_close_timeout", "started_time", "step", "task_queue", "trace_context", "workflow_id"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_DETAILS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    STARTED_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    activity_type: str
    attempt: int
    deadline: _timestamp_pb2.Timestamp
    heartbeat_timeout: _duration_pb2.Duration
    last_heartbeat_details: bytes
    namespace: str
    node: str
    payload: bytes
    run_id: str
    scheduled_time: _timestamp_pb2.Timestamp
    start_to_close_timeout: _duration_pb2.Duration
    started_time: _timestamp_pb2.Timestamp
    step: int
    task_queue: str
    trace_context: _common_pb2.TraceContext
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., task_queue: _Optional[str] = ..., activity_type: _Optional[str] = ..., payload: _Optional[bytes] = ..., node: _Optional[str] = ..., scheduled_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., start_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., heartbeat_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat_details: _Optional[bytes] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., step: _Optional[int] = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class CancelActivity(_message.Message):
    __slots__ = ["activity_id", "attempt", "namespace", "reason"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    namespace: str
    reason: str
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ["reason"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ["deadline", "reason"]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    deadline: _timestamp_pb2.Timestamp
    reason: DrainReason
    def __init__(self, deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[_Union[DrainReason, str]] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ["activity_id", "attempt", "cancel_requested", "namespace", "refused"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    cancel_requested: bool
    namespace: str
    refused: str
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., cancel_requested: bool = ..., refused: _Optional[str] = ...) -> None: ...

class Intervention(_message.Message):
    __slots__ = ["activity_id", "attempt", "command", "intervention_id", "namespace"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    INTERVENTION_ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    command: _intervention_pb2.InterventionCommand
    intervention_id: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., intervention_id: _Optional[str] = ..., command: _Optional[_Union[_intervention_pb2.InterventionCommand, _Mapping]] = ...) -> None: ...

class InterventionAck(_message.Message):
    __slots__ = ["accepted", "activity_id", "attempt", "intervention_id", "message", "namespace"]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INTERVENTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    activity_id: str
    attempt: int
    intervention_id: str
    message: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., intervention_id: _Optional[str] = ..., accepted: bool = ..., message: _Optional[str] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ["nonce"]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class Pong(_message.Message):
    __slots__ = ["nonce"]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ["activity_types", "build_id", "capabilities", "compatible_build_ids", "identity", "namespaces", "node", "sdk_version", "slots", "task_queue", "workflow_slots", "workflow_types"]
    ACTIVITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    COMPATIBLE_BUILD_IDS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    SDK_VERSION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_SLOTS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPES_FIELD_NUMBER: _ClassVar[int]
    activity_types: _containers.RepeatedScalarFieldContainer[str]
    build_id: str
    capabilities: _containers.RepeatedScalarFieldContainer[_intervention_pb2.InterventionPrimitive]
    compatible_build_ids: _containers.RepeatedScalarFieldContainer[str]
    identity: str
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    node: str
    sdk_version: str
    slots: int
    task_queue: str
    workflow_slots: int
    workflow_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, namespaces: _Optional[_Iterable[str]] = ..., task_queue: _Optional[str] = ..., node: _Optional[str] = ..., activity_types: _Optional[_Iterable[str]] = ..., slots: _Optional[int] = ..., capabilities: _Optional[_Iterable[_Union[_intervention_pb2.InterventionPrimitive, str]]] = ..., identity: _Optional[str] = ..., sdk_version: _Optional[str] = ..., workflow_types: _Optional[_Iterable[str]] = ..., build_id: _Optional[str] = ..., workflow_slots: _Optional[int] = ..., compatible_build_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterAck(_message.Message):
    __slots__ = ["heartbeat_window", "ping_interval", "worker_id"]
    HEARTBEAT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    PING_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    heartbeat_window: _duration_pb2.Duration
    ping_interval: _duration_pb2.Duration
    worker_id: int
    def __init__(self, worker_id: _Optional[int] = ..., heartbeat_window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., ping_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ["activity_id", "attempt", "namespace", "refused", "status"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    namespace: str
    refused: str
    status: ResultStatus
    def __init__(self, namespace: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., refused: _Optional[str] = ..., status: _Optional[_Union[ResultStatus, str]] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ["activity_task", "cancel_activity", "drain_request", "heartbeat_ack", "intervention", "pong", "register_ack", "result_ack", "workflow_task", "workflow_task_ack"]
    ACTIVITY_TASK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    DRAIN_REQUEST_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    INTERVENTION_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    REGISTER_ACK_FIELD_NUMBER: _ClassVar[int]
    RESULT_ACK_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TASK_ACK_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TASK_FIELD_NUMBER: _ClassVar[int]
    activity_task: ActivityTask
    cancel_activity: CancelActivity
    drain_request: DrainRequest
    heartbeat_ack: HeartbeatAck
    intervention: Intervention
    pong: Pong
    register_ack: RegisterAck
    result_ack: ResultAck
    workflow_task: _workflow_pb2.WorkflowTask
    workflow_task_ack: _workflow_pb2.WorkflowTaskAck
    def __init__(self, register_ack: _Optional[_Union[RegisterAck, _Mapping]] = ..., activity_task: _Optional[_Union[ActivityTask, _Mapping]] = ..., result_ack: _Optional[_Union[ResultAck, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., drain_request: _Optional[_Union[DrainRequest, _Mapping]] = ..., intervention: _Optional[_Union[Intervention, _Mapping]] = ..., cancel_activity: _Optional[_Union[CancelActivity, _Mapping]] = ..., workflow_task: _Optional[_Union[_workflow_pb2.WorkflowTask, _Mapping]] = ..., workflow_task_ack: _Optional[_Union[_workflow_pb2.WorkflowTaskAck, _Mapping]] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ["activity_heartbeat", "activity_result", "drain", "intervention_ack", "ping", "register", "workflow_task_result"]
    ACTIVITY_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_RESULT_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    INTERVENTION_ACK_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TASK_RESULT_FIELD_NUMBER: _ClassVar[int]
    activity_heartbeat: ActivityHeartbeat
    activity_result: ActivityResult
    drain: Drain
    intervention_ack: InterventionAck
    ping: Ping
    register: Register
    workflow_task_result: _workflow_pb2.WorkflowTaskResult
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., activity_result: _Optional[_Union[ActivityResult, _Mapping]] = ..., activity_heartbeat: _Optional[_Union[ActivityHeartbeat, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ..., intervention_ack: _Optional[_Union[InterventionAck, _Mapping]] = ..., workflow_task_result: _Optional[_Union[_workflow_pb2.WorkflowTaskResult, _Mapping]] = ...) -> None: ...

class ResultStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DrainReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
