from aion._gen.v1 import common_pb2 as _common_pb2
from aion._gen.v1 import intervention_pb2 as _intervention_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ACTIVITY_STATE_CANCELED: ActivityState
ACTIVITY_STATE_COMPLETED: ActivityState
ACTIVITY_STATE_FAILED: ActivityState
ACTIVITY_STATE_RUNNING: ActivityState
ACTIVITY_STATE_SCHEDULED: ActivityState
ACTIVITY_STATE_TIMED_OUT: ActivityState
ACTIVITY_STATE_UNSPECIFIED: ActivityState
ATTEMPT_OUTCOME_CANCELED: AttemptOutcome
ATTEMPT_OUTCOME_COMPLETED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_RUNNING: AttemptOutcome
ATTEMPT_OUTCOME_TIMED_OUT: AttemptOutcome
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
DESCRIPTOR: _descriptor.FileDescriptor
INTERVENTION_OUTCOME_CAPABILITY_NOT_SUPPORTED: InterventionOutcome
INTERVENTION_OUTCOME_DELIVERED: InterventionOutcome
INTERVENTION_OUTCOME_STALE_TARGET: InterventionOutcome
INTERVENTION_OUTCOME_UNSPECIFIED: InterventionOutcome

class Activity(_message.Message):
    __slots__ = ["activity_type", "attempt", "attempts", "closed_time", "concurrency_key", "failure", "fairness_key", "fairness_weight", "heartbeat_timeout", "id", "last_heartbeat_details", "namespace", "node", "payload", "payload_size", "priority", "ready_time", "result", "retry_policy", "schedule_id", "schedule_time", "schedule_to_close_timeout", "schedule_to_start_timeout", "scheduled_time", "start_to_close_timeout", "started_time", "state", "task_queue", "trace_context"]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CLOSED_TIME_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_DETAILS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    STARTED_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    activity_type: str
    attempt: int
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    closed_time: _timestamp_pb2.Timestamp
    concurrency_key: str
    failure: _common_pb2.Failure
    fairness_key: str
    fairness_weight: int
    heartbeat_timeout: _duration_pb2.Duration
    id: str
    last_heartbeat_details: bytes
    namespace: str
    node: str
    payload: bytes
    payload_size: int
    priority: int
    ready_time: _timestamp_pb2.Timestamp
    result: bytes
    retry_policy: _common_pb2.RetryPolicy
    schedule_id: str
    schedule_time: _timestamp_pb2.Timestamp
    schedule_to_close_timeout: _duration_pb2.Duration
    schedule_to_start_timeout: _duration_pb2.Duration
    scheduled_time: _timestamp_pb2.Timestamp
    start_to_close_timeout: _duration_pb2.Duration
    started_time: _timestamp_pb2.Timestamp
    state: ActivityState
    task_queue: str
    trace_context: _common_pb2.TraceContext
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ..., task_queue: _Optional[str] = ..., activity_type: _Optional[str] = ..., node: _Optional[str] = ..., payload: _Optional[bytes] = ..., state: _Optional[_Union[ActivityState, str]] = ..., attempt: _Optional[int] = ..., result: _Optional[bytes] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., schedule_to_start_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., schedule_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., heartbeat_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., scheduled_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., closed_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., last_heartbeat_details: _Optional[bytes] = ..., payload_size: _Optional[int] = ..., ready_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., fairness_weight: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., schedule_id: _Optional[str] = ..., schedule_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ["ended_time", "failure", "node", "number", "outcome", "started_time", "worker_id"]
    ENDED_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STARTED_TIME_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ended_time: _timestamp_pb2.Timestamp
    failure: _common_pb2.Failure
    node: str
    number: int
    outcome: AttemptOutcome
    started_time: _timestamp_pb2.Timestamp
    worker_id: int
    def __init__(self, number: _Optional[int] = ..., worker_id: _Optional[int] = ..., node: _Optional[str] = ..., started_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ["id", "namespace", "reason"]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    reason: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ["activity"]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    activity: Activity
    def __init__(self, activity: _Optional[_Union[Activity, _Mapping]] = ...) -> None: ...

class GetActivityRequest(_message.Message):
    __slots__ = ["id", "namespace"]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class GetActivityResponse(_message.Message):
    __slots__ = ["activity"]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    activity: Activity
    def __init__(self, activity: _Optional[_Union[Activity, _Mapping]] = ...) -> None: ...

class InterveneRequest(_message.Message):
    __slots__ = ["attempt", "command", "id", "namespace"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    command: _intervention_pb2.InterventionCommand
    id: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ..., attempt: _Optional[int] = ..., command: _Optional[_Union[_intervention_pb2.InterventionCommand, _Mapping]] = ...) -> None: ...

class InterveneResponse(_message.Message):
    __slots__ = ["attempt", "intervention_id", "outcome"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INTERVENTION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    intervention_id: str
    outcome: InterventionOutcome
    def __init__(self, outcome: _Optional[_Union[InterventionOutcome, str]] = ..., intervention_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class ListActivitiesRequest(_message.Message):
    __slots__ = ["activity_type", "include_payloads", "namespace", "page_size", "page_token", "state"]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PAYLOADS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    activity_type: str
    include_payloads: bool
    namespace: str
    page_size: int
    page_token: str
    state: ActivityState
    def __init__(self, namespace: _Optional[str] = ..., state: _Optional[_Union[ActivityState, str]] = ..., activity_type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_payloads: bool = ...) -> None: ...

class ListActivitiesResponse(_message.Message):
    __slots__ = ["activities", "next_page_token"]
    ACTIVITIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    activities: _containers.RepeatedCompositeFieldContainer[Activity]
    next_page_token: str
    def __init__(self, activities: _Optional[_Iterable[_Union[Activity, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ScheduleBatchRequest(_message.Message):
    __slots__ = ["requests"]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[ScheduleRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[ScheduleRequest, _Mapping]]] = ...) -> None: ...

class ScheduleBatchResponse(_message.Message):
    __slots__ = ["results"]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ScheduleBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ScheduleBatchResult, _Mapping]]] = ...) -> None: ...

class ScheduleBatchResult(_message.Message):
    __slots__ = ["activity", "error", "existing"]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    activity: Activity
    error: _common_pb2.Status
    existing: bool
    def __init__(self, activity: _Optional[_Union[Activity, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Status, _Mapping]] = ..., existing: bool = ...) -> None: ...

class ScheduleRequest(_message.Message):
    __slots__ = ["activity_type", "concurrency_key", "fairness_key", "fairness_weight", "heartbeat_timeout", "id", "namespace", "node", "payload", "priority", "retry_policy", "schedule_to_close_timeout", "schedule_to_start_timeout", "start_delay", "start_time", "start_to_close_timeout", "task_queue", "trace_context"]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    activity_type: str
    concurrency_key: str
    fairness_key: str
    fairness_weight: int
    heartbeat_timeout: _duration_pb2.Duration
    id: str
    namespace: str
    node: str
    payload: bytes
    priority: int
    retry_policy: _common_pb2.RetryPolicy
    schedule_to_close_timeout: _duration_pb2.Duration
    schedule_to_start_timeout: _duration_pb2.Duration
    start_delay: _duration_pb2.Duration
    start_time: _timestamp_pb2.Timestamp
    start_to_close_timeout: _duration_pb2.Duration
    task_queue: str
    trace_context: _common_pb2.TraceContext
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ..., task_queue: _Optional[str] = ..., activity_type: _Optional[str] = ..., payload: _Optional[bytes] = ..., node: _Optional[str] = ..., schedule_to_start_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., schedule_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., heartbeat_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., start_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., fairness_weight: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ["activity", "existing"]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    activity: Activity
    existing: bool
    def __init__(self, activity: _Optional[_Union[Activity, _Mapping]] = ..., existing: bool = ...) -> None: ...

class WaitRequest(_message.Message):
    __slots__ = ["id", "namespace"]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class WaitResponse(_message.Message):
    __slots__ = ["activity"]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    activity: Activity
    def __init__(self, activity: _Optional[_Union[Activity, _Mapping]] = ...) -> None: ...

class WhyRequest(_message.Message):
    __slots__ = ["id", "namespace"]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    def __init__(self, namespace: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class WhyResponse(_message.Message):
    __slots__ = ["ahead", "concurrency_key", "eligible", "free_slots", "limit", "message", "nodes", "reason", "running", "state", "until", "worker_id", "workers"]
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ahead: int
    concurrency_key: str
    eligible: int
    free_slots: int
    limit: int
    message: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    running: int
    state: ActivityState
    until: _timestamp_pb2.Timestamp
    worker_id: int
    workers: int
    def __init__(self, state: _Optional[_Union[ActivityState, str]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ahead: _Optional[int] = ..., workers: _Optional[int] = ..., eligible: _Optional[int] = ..., free_slots: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., worker_id: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., running: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ActivityState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class InterventionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
