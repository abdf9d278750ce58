from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Failure(_message.Message):
    __slots__ = ["details", "message", "retryable", "type"]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    details: bytes
    message: str
    retryable: bool
    type: str
    def __init__(self, message: _Optional[str] = ..., type: _Optional[str] = ..., retryable: bool = ..., details: _Optional[bytes] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ["backoff_coefficient", "initial_interval", "maximum_attempts", "maximum_interval", "non_retryable_error_types"]
    BACKOFF_COEFFICIENT_FIELD_NUMBER: _ClassVar[int]
    INITIAL_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    MAXIMUM_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    NON_RETRYABLE_ERROR_TYPES_FIELD_NUMBER: _ClassVar[int]
    backoff_coefficient: float
    initial_interval: _duration_pb2.Duration
    maximum_attempts: int
    maximum_interval: _duration_pb2.Duration
    non_retryable_error_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, initial_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., backoff_coefficient: _Optional[float] = ..., maximum_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., maximum_attempts: _Optional[int] = ..., non_retryable_error_types: _Optional[_Iterable[str]] = ...) -> None: ...

class Status(_message.Message):
    __slots__ = ["code", "message"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class TraceContext(_message.Message):
    __slots__ = ["traceparent", "tracestate"]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    traceparent: str
    tracestate: str
    def __init__(self, traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...
