from aion._gen.v1 import activity_pb2 as _activity_pb2
from aion._gen.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
ID_REUSE_POLICY_ALLOW_DUPLICATE: IDReusePolicy
ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY: IDReusePolicy
ID_REUSE_POLICY_REJECT_DUPLICATE: IDReusePolicy
ID_REUSE_POLICY_UNSPECIFIED: IDReusePolicy
RUN_STATUS_CANCELED: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_CONTINUED_AS_NEW: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_TERMINATED: RunStatus
RUN_STATUS_UNSPECIFIED: RunStatus
STEP_KIND_ACTIVITY: StepKind
STEP_KIND_CHILD: StepKind
STEP_KIND_SIDE_EFFECT: StepKind
STEP_KIND_TIMER: StepKind
STEP_KIND_UNSPECIFIED: StepKind

class ActivityCancelRequested(_message.Message):
    __slots__ = ["step"]
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class ActivityClosed(_message.Message):
    __slots__ = ["attempts", "failure", "result", "step"]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    attempts: int
    failure: _common_pb2.Failure
    result: bytes
    step: int
    def __init__(self, step: _Optional[int] = ..., result: _Optional[bytes] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., attempts: _Optional[int] = ...) -> None: ...

class ActivityOptions(_message.Message):
    __slots__ = ["heartbeat_timeout", "node", "priority", "retry_policy", "schedule_to_close_timeout", "schedule_to_start_timeout", "start_to_close_timeout", "task_queue"]
    HEARTBEAT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    heartbeat_timeout: _duration_pb2.Duration
    node: str
    priority: int
    retry_policy: _common_pb2.RetryPolicy
    schedule_to_close_timeout: _duration_pb2.Duration
    schedule_to_start_timeout: _duration_pb2.Duration
    start_to_close_timeout: _duration_pb2.Duration
    task_queue: str
    def __init__(self, task_queue: _Optional[str] = ..., node: _Optional[str] = ..., schedule_to_start_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., schedule_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., heartbeat_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., priority: _Optional[int] = ...) -> None: ...

class ActivityScheduled(_message.Message):
    __slots__ = ["activity_id", "activity_type", "input", "options", "step"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    activity_type: str
    input: bytes
    options: ActivityOptions
    step: int
    def __init__(self, step: _Optional[int] = ..., activity_type: _Optional[str] = ..., input: _Optional[bytes] = ..., options: _Optional[_Union[ActivityOptions, _Mapping]] = ..., activity_id: _Optional[str] = ...) -> None: ...

class CancelActivityCommand(_message.Message):
    __slots__ = ["step"]
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class CancelRequested(_message.Message):
    __slots__ = ["reason"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class CancelTimerCommand(_message.Message):
    __slots__ = ["step"]
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class CancelWorkflowRequest(_message.Message):
    __slots__ = ["namespace", "reason", "run_id", "workflow_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    reason: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelWorkflowResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class ChildClosed(_message.Message):
    __slots__ = ["failure", "result", "status", "step"]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    failure: _common_pb2.Failure
    result: bytes
    status: RunStatus
    step: int
    def __init__(self, step: _Optional[int] = ..., status: _Optional[_Union[RunStatus, str]] = ..., result: _Optional[bytes] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ...) -> None: ...

class ChildStarted(_message.Message):
    __slots__ = ["input", "run_id", "step", "task_queue", "workflow_id", "workflow_type"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    run_id: str
    step: int
    task_queue: str
    workflow_id: str
    workflow_type: str
    def __init__(self, step: _Optional[int] = ..., workflow_id: _Optional[str] = ..., workflow_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., input: _Optional[bytes] = ..., run_id: _Optional[str] = ...) -> None: ...

class CloseWorkflowCommand(_message.Message):
    __slots__ = ["continue_input", "failure", "result", "status"]
    CONTINUE_INPUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    continue_input: bytes
    failure: _common_pb2.Failure
    result: bytes
    status: RunStatus
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., result: _Optional[bytes] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., continue_input: _Optional[bytes] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ["namespace", "page_size", "page_token", "run_id", "workflow_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ["events", "next_page_token"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[HistoryEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[HistoryEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetWorkflowRequest(_message.Message):
    __slots__ = ["namespace", "run_id", "workflow_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class GetWorkflowResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class HistoryEvent(_message.Message):
    __slots__ = ["activity_cancel_requested", "activity_closed", "activity_scheduled", "cancel_requested", "child_closed", "child_started", "seq", "side_effect_recorded", "signal_received", "time", "timer_canceled", "timer_fired", "timer_started", "workflow_closed", "workflow_started", "workflow_task_completed"]
    ACTIVITY_CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_CLOSED_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CHILD_CLOSED_FIELD_NUMBER: _ClassVar[int]
    CHILD_STARTED_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_RECORDED_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    TIMER_CANCELED_FIELD_NUMBER: _ClassVar[int]
    TIMER_FIRED_FIELD_NUMBER: _ClassVar[int]
    TIMER_STARTED_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_CLOSED_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_STARTED_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TASK_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    activity_cancel_requested: ActivityCancelRequested
    activity_closed: ActivityClosed
    activity_scheduled: ActivityScheduled
    cancel_requested: CancelRequested
    child_closed: ChildClosed
    child_started: ChildStarted
    seq: int
    side_effect_recorded: SideEffectRecorded
    signal_received: SignalReceived
    time: _timestamp_pb2.Timestamp
    timer_canceled: TimerCanceled
    timer_fired: TimerFired
    timer_started: TimerStarted
    workflow_closed: WorkflowClosed
    workflow_started: WorkflowStarted
    workflow_task_completed: WorkflowTaskCompleted
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., workflow_started: _Optional[_Union[WorkflowStarted, _Mapping]] = ..., workflow_task_completed: _Optional[_Union[WorkflowTaskCompleted, _Mapping]] = ..., activity_scheduled: _Optional[_Union[ActivityScheduled, _Mapping]] = ..., activity_closed: _Optional[_Union[ActivityClosed, _Mapping]] = ..., timer_started: _Optional[_Union[TimerStarted, _Mapping]] = ..., timer_fired: _Optional[_Union[TimerFired, _Mapping]] = ..., timer_canceled: _Optional[_Union[TimerCanceled, _Mapping]] = ..., signal_received: _Optional[_Union[SignalReceived, _Mapping]] = ..., side_effect_recorded: _Optional[_Union[SideEffectRecorded, _Mapping]] = ..., child_started: _Optional[_Union[ChildStarted, _Mapping]] = ..., child_closed: _Optional[_Union[ChildClosed, _Mapping]] = ..., cancel_requested: _Optional[_Union[CancelRequested, _Mapping]] = ..., activity_cancel_requested: _Optional[_Union[ActivityCancelRequested, _Mapping]] = ..., workflow_closed: _Optional[_Union[WorkflowClosed, _Mapping]] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ["namespace", "page_size", "page_token", "status", "workflow_type"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    status: RunStatus
    workflow_type: str
    def __init__(self, namespace: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., workflow_type: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ["next_page_token", "runs"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PendingStep(_message.Message):
    __slots__ = ["activity_id", "attempt", "child_workflow_id", "fire_time", "kind", "name", "step", "worker_id"]
    ACTIVITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CHILD_WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    activity_id: str
    attempt: int
    child_workflow_id: str
    fire_time: _timestamp_pb2.Timestamp
    kind: StepKind
    name: str
    step: int
    worker_id: int
    def __init__(self, step: _Optional[int] = ..., kind: _Optional[_Union[StepKind, str]] = ..., name: _Optional[str] = ..., activity_id: _Optional[str] = ..., attempt: _Optional[int] = ..., worker_id: _Optional[int] = ..., fire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., child_workflow_id: _Optional[str] = ...) -> None: ...

class QueryAnswer(_message.Message):
    __slots__ = ["error", "query_id", "result"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    error: str
    query_id: str
    result: bytes
    def __init__(self, query_id: _Optional[str] = ..., result: _Optional[bytes] = ..., error: _Optional[str] = ...) -> None: ...

class QueryWorkflowRequest(_message.Message):
    __slots__ = ["input", "namespace", "query_name", "run_id", "workflow_id"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUERY_NAME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    namespace: str
    query_name: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., query_name: _Optional[str] = ..., input: _Optional[bytes] = ...) -> None: ...

class QueryWorkflowResponse(_message.Message):
    __slots__ = ["result"]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: bytes
    def __init__(self, result: _Optional[bytes] = ...) -> None: ...

class RecordSideEffectCommand(_message.Message):
    __slots__ = ["name", "step", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    step: int
    value: bytes
    def __init__(self, step: _Optional[int] = ..., name: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ["build_id", "close_time", "concurrency_key", "failure", "fairness_key", "fairness_weight", "history_length", "input", "namespace", "next_run_id", "parent_run_id", "parent_workflow_id", "pending_steps", "priority", "result", "run_id", "schedule_id", "schedule_time", "start_time", "status", "task_failure", "task_queue", "trace_context", "workflow_id", "workflow_type"]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSE_TIME_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_LENGTH_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    PENDING_STEPS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TASK_FAILURE_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    close_time: _timestamp_pb2.Timestamp
    concurrency_key: str
    failure: _common_pb2.Failure
    fairness_key: str
    fairness_weight: int
    history_length: int
    input: bytes
    namespace: str
    next_run_id: str
    parent_run_id: str
    parent_workflow_id: str
    pending_steps: _containers.RepeatedCompositeFieldContainer[PendingStep]
    priority: int
    result: bytes
    run_id: str
    schedule_id: str
    schedule_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    status: RunStatus
    task_failure: str
    task_queue: str
    trace_context: _common_pb2.TraceContext
    workflow_id: str
    workflow_type: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., workflow_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., build_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., input: _Optional[bytes] = ..., result: _Optional[bytes] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., close_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., history_length: _Optional[int] = ..., task_failure: _Optional[str] = ..., parent_workflow_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., next_run_id: _Optional[str] = ..., pending_steps: _Optional[_Iterable[_Union[PendingStep, _Mapping]]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., fairness_weight: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., schedule_id: _Optional[str] = ..., schedule_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class ScheduleActivityCommand(_message.Message):
    __slots__ = ["activity_type", "input", "options", "step"]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    activity_type: str
    input: bytes
    options: ActivityOptions
    step: int
    def __init__(self, step: _Optional[int] = ..., activity_type: _Optional[str] = ..., input: _Optional[bytes] = ..., options: _Optional[_Union[ActivityOptions, _Mapping]] = ...) -> None: ...

class SideEffectRecorded(_message.Message):
    __slots__ = ["name", "step", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    step: int
    value: bytes
    def __init__(self, step: _Optional[int] = ..., name: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class SignalReceived(_message.Message):
    __slots__ = ["input", "name"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    name: str
    def __init__(self, name: _Optional[str] = ..., input: _Optional[bytes] = ...) -> None: ...

class SignalWorkflowRequest(_message.Message):
    __slots__ = ["input", "namespace", "run_id", "signal_name", "workflow_id"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_NAME_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    namespace: str
    run_id: str
    signal_name: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., signal_name: _Optional[str] = ..., input: _Optional[bytes] = ...) -> None: ...

class SignalWorkflowResponse(_message.Message):
    __slots__ = ["event_seq"]
    EVENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    event_seq: int
    def __init__(self, event_seq: _Optional[int] = ...) -> None: ...

class StartChildCommand(_message.Message):
    __slots__ = ["input", "step", "task_queue", "workflow_id", "workflow_type"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    step: int
    task_queue: str
    workflow_id: str
    workflow_type: str
    def __init__(self, step: _Optional[int] = ..., workflow_id: _Optional[str] = ..., workflow_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., input: _Optional[bytes] = ...) -> None: ...

class StartTimerCommand(_message.Message):
    __slots__ = ["duration", "name", "step"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    name: str
    step: int
    def __init__(self, step: _Optional[int] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class StartWorkflowRequest(_message.Message):
    __slots__ = ["concurrency_key", "fairness_key", "fairness_weight", "id_reuse", "input", "namespace", "priority", "start_delay", "start_time", "task_queue", "trace_context", "workflow_id", "workflow_type"]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ID_REUSE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    concurrency_key: str
    fairness_key: str
    fairness_weight: int
    id_reuse: IDReusePolicy
    input: bytes
    namespace: str
    priority: int
    start_delay: _duration_pb2.Duration
    start_time: _timestamp_pb2.Timestamp
    task_queue: str
    trace_context: _common_pb2.TraceContext
    workflow_id: str
    workflow_type: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., workflow_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., input: _Optional[bytes] = ..., id_reuse: _Optional[_Union[IDReusePolicy, str]] = ..., start_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., fairness_weight: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class StartWorkflowResponse(_message.Message):
    __slots__ = ["existing", "run"]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    existing: bool
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., existing: bool = ...) -> None: ...

class TerminateWorkflowRequest(_message.Message):
    __slots__ = ["namespace", "reason", "run_id", "workflow_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    reason: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TerminateWorkflowResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class TimerCanceled(_message.Message):
    __slots__ = ["step"]
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class TimerFired(_message.Message):
    __slots__ = ["step"]
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class TimerStarted(_message.Message):
    __slots__ = ["fire_time", "name", "step"]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    fire_time: _timestamp_pb2.Timestamp
    name: str
    step: int
    def __init__(self, step: _Optional[int] = ..., fire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class WaitWorkflowRequest(_message.Message):
    __slots__ = ["namespace", "run_id", "workflow_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class WaitWorkflowResponse(_message.Message):
    __slots__ = ["run"]
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class WhyWorkflowRequest(_message.Message):
    __slots__ = ["namespace", "run_id", "workflow_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    run_id: str
    workflow_id: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class WorkflowClosed(_message.Message):
    __slots__ = ["continue_input", "failure", "next_run_id", "result", "status"]
    CONTINUE_INPUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    continue_input: bytes
    failure: _common_pb2.Failure
    next_run_id: str
    result: bytes
    status: RunStatus
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., result: _Optional[bytes] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., continue_input: _Optional[bytes] = ..., next_run_id: _Optional[str] = ...) -> None: ...

class WorkflowCommand(_message.Message):
    __slots__ = ["cancel_activity", "cancel_timer", "close", "record_side_effect", "schedule_activity", "start_child", "start_timer"]
    CANCEL_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    CANCEL_TIMER_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    RECORD_SIDE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    START_CHILD_FIELD_NUMBER: _ClassVar[int]
    START_TIMER_FIELD_NUMBER: _ClassVar[int]
    cancel_activity: CancelActivityCommand
    cancel_timer: CancelTimerCommand
    close: CloseWorkflowCommand
    record_side_effect: RecordSideEffectCommand
    schedule_activity: ScheduleActivityCommand
    start_child: StartChildCommand
    start_timer: StartTimerCommand
    def __init__(self, schedule_activity: _Optional[_Union[ScheduleActivityCommand, _Mapping]] = ..., start_timer: _Optional[_Union[StartTimerCommand, _Mapping]] = ..., cancel_timer: _Optional[_Union[CancelTimerCommand, _Mapping]] = ..., record_side_effect: _Optional[_Union[RecordSideEffectCommand, _Mapping]] = ..., start_child: _Optional[_Union[StartChildCommand, _Mapping]] = ..., cancel_activity: _Optional[_Union[CancelActivityCommand, _Mapping]] = ..., close: _Optional[_Union[CloseWorkflowCommand, _Mapping]] = ...) -> None: ...

class WorkflowQuery(_message.Message):
    __slots__ = ["input", "name", "query_id"]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    input: bytes
    name: str
    query_id: str
    def __init__(self, query_id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[bytes] = ...) -> None: ...

class WorkflowStarted(_message.Message):
    __slots__ = ["continued_from_run_id", "input", "parent_run_id", "parent_workflow_id", "ready_time", "task_queue", "workflow_type"]
    CONTINUED_FROM_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    READY_TIME_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    continued_from_run_id: str
    input: bytes
    parent_run_id: str
    parent_workflow_id: str
    ready_time: _timestamp_pb2.Timestamp
    task_queue: str
    workflow_type: str
    def __init__(self, workflow_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., input: _Optional[bytes] = ..., parent_workflow_id: _Optional[str] = ..., parent_run_id: _Optional[str] = ..., continued_from_run_id: _Optional[str] = ..., ready_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkflowTask(_message.Message):
    __slots__ = ["events", "first_seq", "namespace", "queries", "query_only", "run_id", "task", "task_queue", "trace_context", "workflow_id", "workflow_type"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    QUERY_ONLY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[HistoryEvent]
    first_seq: int
    namespace: str
    queries: _containers.RepeatedCompositeFieldContainer[WorkflowQuery]
    query_only: bool
    run_id: str
    task: int
    task_queue: str
    trace_context: _common_pb2.TraceContext
    workflow_id: str
    workflow_type: str
    def __init__(self, namespace: _Optional[str] = ..., workflow_id: _Optional[str] = ..., run_id: _Optional[str] = ..., workflow_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., task: _Optional[int] = ..., events: _Optional[_Iterable[_Union[HistoryEvent, _Mapping]]] = ..., first_seq: _Optional[int] = ..., queries: _Optional[_Iterable[_Union[WorkflowQuery, _Mapping]]] = ..., query_only: bool = ..., trace_context: _Optional[_Union[_common_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class WorkflowTaskAck(_message.Message):
    __slots__ = ["namespace", "refused", "run_id", "task"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    refused: str
    run_id: str
    task: int
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., task: _Optional[int] = ..., refused: _Optional[str] = ...) -> None: ...

class WorkflowTaskCompleted(_message.Message):
    __slots__ = ["build_id", "seen_seq", "worker_id"]
    BUILD_ID_FIELD_NUMBER: _ClassVar[int]
    SEEN_SEQ_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    build_id: str
    seen_seq: int
    worker_id: int
    def __init__(self, seen_seq: _Optional[int] = ..., build_id: _Optional[str] = ..., worker_id: _Optional[int] = ...) -> None: ...

class WorkflowTaskResult(_message.Message):
    __slots__ = ["commands", "failure", "namespace", "query_answers", "run_id", "sticky", "task"]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUERY_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STICKY_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[WorkflowCommand]
    failure: _common_pb2.Failure
    namespace: str
    query_answers: _containers.RepeatedCompositeFieldContainer[QueryAnswer]
    run_id: str
    sticky: bool
    task: int
    def __init__(self, namespace: _Optional[str] = ..., run_id: _Optional[str] = ..., task: _Optional[int] = ..., commands: _Optional[_Iterable[_Union[WorkflowCommand, _Mapping]]] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., sticky: bool = ..., query_answers: _Optional[_Iterable[_Union[QueryAnswer, _Mapping]]] = ...) -> None: ...

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class IDReusePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class StepKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
