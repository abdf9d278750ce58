from aion._gen.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
SCHEDULE_ACTION_OUTCOME_BUFFERED: ScheduleActionOutcome
SCHEDULE_ACTION_OUTCOME_FAILED: ScheduleActionOutcome
SCHEDULE_ACTION_OUTCOME_MISSED: ScheduleActionOutcome
SCHEDULE_ACTION_OUTCOME_SKIPPED: ScheduleActionOutcome
SCHEDULE_ACTION_OUTCOME_STARTED: ScheduleActionOutcome
SCHEDULE_ACTION_OUTCOME_UNSPECIFIED: ScheduleActionOutcome
SCHEDULE_CATCH_UP_ALL: ScheduleCatchUp
SCHEDULE_CATCH_UP_ONE: ScheduleCatchUp
SCHEDULE_CATCH_UP_SKIP: ScheduleCatchUp
SCHEDULE_CATCH_UP_UNSPECIFIED: ScheduleCatchUp
SCHEDULE_OVERLAP_ALLOW_ALL: ScheduleOverlap
SCHEDULE_OVERLAP_BUFFER_ONE: ScheduleOverlap
SCHEDULE_OVERLAP_CANCEL_PREVIOUS: ScheduleOverlap
SCHEDULE_OVERLAP_SKIP: ScheduleOverlap
SCHEDULE_OVERLAP_UNSPECIFIED: ScheduleOverlap

class BackfillScheduleRequest(_message.Message):
    __slots__ = ["end_time", "namespace", "overlap", "schedule_id", "start_time"]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    end_time: _timestamp_pb2.Timestamp
    namespace: str
    overlap: ScheduleOverlap
    schedule_id: str
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., overlap: _Optional[_Union[ScheduleOverlap, str]] = ...) -> None: ...

class BackfillScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ["action", "namespace", "note", "paused", "policy", "schedule_id", "spec"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    action: ScheduleAction
    namespace: str
    note: str
    paused: bool
    policy: SchedulePolicy
    schedule_id: str
    spec: ScheduleSpec
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., action: _Optional[_Union[ScheduleAction, _Mapping]] = ..., policy: _Optional[_Union[SchedulePolicy, _Mapping]] = ..., paused: bool = ..., note: _Optional[str] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ["existing", "schedule"]
    EXISTING_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    existing: bool
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ..., existing: bool = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ["namespace", "schedule_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ["namespace", "schedule_id", "upcoming"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    schedule_id: str
    upcoming: int
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., upcoming: _Optional[int] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ["namespace", "page_size", "page_token"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ["next_page_token", "schedules"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ["namespace", "note", "schedule_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    note: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ["namespace", "note", "schedule_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    note: str
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ["action", "backfills_waiting", "buffered_tick_time", "create_time", "fired", "last_tick_time", "missed", "namespace", "note", "paused", "pending_fires", "policy", "recent_actions", "running_action_ids", "schedule_id", "skipped", "spec", "upcoming", "update_time"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    BACKFILLS_WAITING_FIELD_NUMBER: _ClassVar[int]
    BUFFERED_TICK_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRED_FIELD_NUMBER: _ClassVar[int]
    LAST_TICK_TIME_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIRES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    RECENT_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ACTION_IDS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    UPCOMING_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    action: ScheduleAction
    backfills_waiting: int
    buffered_tick_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    fired: int
    last_tick_time: _timestamp_pb2.Timestamp
    missed: int
    namespace: str
    note: str
    paused: bool
    pending_fires: int
    policy: SchedulePolicy
    recent_actions: _containers.RepeatedCompositeFieldContainer[ScheduleActionRecord]
    running_action_ids: _containers.RepeatedScalarFieldContainer[str]
    schedule_id: str
    skipped: int
    spec: ScheduleSpec
    upcoming: _containers.RepeatedCompositeFieldContainer[ScheduleTick]
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., action: _Optional[_Union[ScheduleAction, _Mapping]] = ..., policy: _Optional[_Union[SchedulePolicy, _Mapping]] = ..., paused: bool = ..., note: _Optional[str] = ..., upcoming: _Optional[_Iterable[_Union[ScheduleTick, _Mapping]]] = ..., recent_actions: _Optional[_Iterable[_Union[ScheduleActionRecord, _Mapping]]] = ..., last_tick_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., buffered_tick_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., running_action_ids: _Optional[_Iterable[str]] = ..., pending_fires: _Optional[int] = ..., backfills_waiting: _Optional[int] = ..., fired: _Optional[int] = ..., skipped: _Optional[int] = ..., missed: _Optional[int] = ..., create_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScheduleAction(_message.Message):
    __slots__ = ["activity_type", "concurrency_key", "fairness_key", "fairness_weight", "heartbeat_timeout", "input", "node", "priority", "retry_policy", "schedule_to_close_timeout", "schedule_to_start_timeout", "start_to_close_timeout", "task_queue", "workflow_type"]
    ACTIVITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_KEY_FIELD_NUMBER: _ClassVar[int]
    FAIRNESS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_TO_START_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    START_TO_CLOSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TASK_QUEUE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    activity_type: str
    concurrency_key: str
    fairness_key: str
    fairness_weight: int
    heartbeat_timeout: _duration_pb2.Duration
    input: bytes
    node: str
    priority: int
    retry_policy: _common_pb2.RetryPolicy
    schedule_to_close_timeout: _duration_pb2.Duration
    schedule_to_start_timeout: _duration_pb2.Duration
    start_to_close_timeout: _duration_pb2.Duration
    task_queue: str
    workflow_type: str
    def __init__(self, workflow_type: _Optional[str] = ..., activity_type: _Optional[str] = ..., task_queue: _Optional[str] = ..., node: _Optional[str] = ..., input: _Optional[bytes] = ..., schedule_to_start_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., schedule_to_close_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., heartbeat_timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., priority: _Optional[int] = ..., fairness_key: _Optional[str] = ..., fairness_weight: _Optional[int] = ..., concurrency_key: _Optional[str] = ...) -> None: ...

class ScheduleActionRecord(_message.Message):
    __slots__ = ["action_id", "count", "detail", "first_nominal_time", "nominal_time", "origin", "outcome", "run_id", "time"]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FIRST_NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    count: int
    detail: str
    first_nominal_time: _timestamp_pb2.Timestamp
    nominal_time: _timestamp_pb2.Timestamp
    origin: str
    outcome: ScheduleActionOutcome
    run_id: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, nominal_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., first_nominal_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[ScheduleActionOutcome, str]] = ..., origin: _Optional[str] = ..., action_id: _Optional[str] = ..., run_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class SchedulePolicy(_message.Message):
    __slots__ = ["catch_up", "catch_up_window", "overlap"]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_WINDOW_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    catch_up: ScheduleCatchUp
    catch_up_window: _duration_pb2.Duration
    overlap: ScheduleOverlap
    def __init__(self, overlap: _Optional[_Union[ScheduleOverlap, str]] = ..., catch_up: _Optional[_Union[ScheduleCatchUp, str]] = ..., catch_up_window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ["cron", "end_time", "every", "jitter", "offset", "start_time", "time_zone"]
    CRON_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    cron: str
    end_time: _timestamp_pb2.Timestamp
    every: _duration_pb2.Duration
    jitter: _duration_pb2.Duration
    offset: _duration_pb2.Duration
    start_time: _timestamp_pb2.Timestamp
    time_zone: str
    def __init__(self, cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., every: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., offset: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ScheduleTick(_message.Message):
    __slots__ = ["fire_time", "nominal_time"]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_TIME_FIELD_NUMBER: _ClassVar[int]
    fire_time: _timestamp_pb2.Timestamp
    nominal_time: _timestamp_pb2.Timestamp
    def __init__(self, nominal_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., fire_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ["namespace", "overlap", "schedule_id"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    overlap: ScheduleOverlap
    schedule_id: str
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., overlap: _Optional[_Union[ScheduleOverlap, str]] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ["action", "namespace", "policy", "schedule_id", "spec"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    action: ScheduleAction
    namespace: str
    policy: SchedulePolicy
    schedule_id: str
    spec: ScheduleSpec
    def __init__(self, namespace: _Optional[str] = ..., schedule_id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., action: _Optional[_Union[ScheduleAction, _Mapping]] = ..., policy: _Optional[_Union[SchedulePolicy, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ["schedule"]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ScheduleOverlap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ScheduleCatchUp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ScheduleActionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
