from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
FLOW_KIND_ACTIVITY: FlowKind
FLOW_KIND_UNSPECIFIED: FlowKind
FLOW_KIND_WORKFLOW: FlowKind
NAMESPACE_ORIGIN_EXPLICIT: NamespaceOrigin
NAMESPACE_ORIGIN_SCHEDULE: NamespaceOrigin
NAMESPACE_ORIGIN_UNSPECIFIED: NamespaceOrigin
NAMESPACE_ORIGIN_WORKER: NamespaceOrigin
PLACEMENT_MODE_PINNED: PlacementMode
PLACEMENT_MODE_PREFER: PlacementMode
PLACEMENT_MODE_UNPLACED: PlacementMode
PLACEMENT_MODE_UNSPECIFIED: PlacementMode

class ClearFlowLimitRequest(_message.Message):
    __slots__ = ["kind", "namespace", "type"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    kind: FlowKind
    namespace: str
    type: str
    def __init__(self, namespace: _Optional[str] = ..., kind: _Optional[_Union[FlowKind, str]] = ..., type: _Optional[str] = ...) -> None: ...

class ClearFlowLimitResponse(_message.Message):
    __slots__ = ["cleared"]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    cleared: bool
    def __init__(self, cleared: bool = ...) -> None: ...

class CreateNamespaceRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateNamespaceResponse(_message.Message):
    __slots__ = ["created", "namespace"]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    created: bool
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ..., created: bool = ...) -> None: ...

class FlowLimit(_message.Message):
    __slots__ = ["burst", "concurrency", "kind", "namespace", "per_key", "rate", "type", "updated_time"]
    BURST_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PER_KEY_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_TIME_FIELD_NUMBER: _ClassVar[int]
    burst: int
    concurrency: int
    kind: FlowKind
    namespace: str
    per_key: bool
    rate: float
    type: str
    updated_time: _timestamp_pb2.Timestamp
    def __init__(self, namespace: _Optional[str] = ..., kind: _Optional[_Union[FlowKind, str]] = ..., type: _Optional[str] = ..., concurrency: _Optional[int] = ..., rate: _Optional[float] = ..., burst: _Optional[int] = ..., per_key: bool = ..., updated_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetFlowLimitRequest(_message.Message):
    __slots__ = ["kind", "namespace", "type"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    kind: FlowKind
    namespace: str
    type: str
    def __init__(self, namespace: _Optional[str] = ..., kind: _Optional[_Union[FlowKind, str]] = ..., type: _Optional[str] = ...) -> None: ...

class GetFlowLimitResponse(_message.Message):
    __slots__ = ["limit"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: FlowLimit
    def __init__(self, limit: _Optional[_Union[FlowLimit, _Mapping]] = ...) -> None: ...

class GetNamespaceRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetNamespaceResponse(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class ListFlowLimitsRequest(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class ListFlowLimitsResponse(_message.Message):
    __slots__ = ["limits"]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    limits: _containers.RepeatedCompositeFieldContainer[FlowLimit]
    def __init__(self, limits: _Optional[_Iterable[_Union[FlowLimit, _Mapping]]] = ...) -> None: ...

class ListNamespacesRequest(_message.Message):
    __slots__ = ["page_size", "page_token"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListNamespacesResponse(_message.Message):
    __slots__ = ["namespaces", "next_page_token"]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedCompositeFieldContainer[Namespace]
    next_page_token: str
    def __init__(self, namespaces: _Optional[_Iterable[_Union[Namespace, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Namespace(_message.Message):
    __slots__ = ["created_time", "last_seen_time", "name", "origin", "placement", "retention"]
    CREATED_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_TIME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    created_time: _timestamp_pb2.Timestamp
    last_seen_time: _timestamp_pb2.Timestamp
    name: str
    origin: NamespaceOrigin
    placement: Placement
    retention: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., origin: _Optional[_Union[NamespaceOrigin, str]] = ..., placement: _Optional[_Union[Placement, _Mapping]] = ..., created_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., retention: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ["mode", "nodes"]
    MODE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    mode: PlacementMode
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[_Union[PlacementMode, str]] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class SetFlowLimitRequest(_message.Message):
    __slots__ = ["limit"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: FlowLimit
    def __init__(self, limit: _Optional[_Union[FlowLimit, _Mapping]] = ...) -> None: ...

class SetFlowLimitResponse(_message.Message):
    __slots__ = ["limit"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: FlowLimit
    def __init__(self, limit: _Optional[_Union[FlowLimit, _Mapping]] = ...) -> None: ...

class SetPlacementRequest(_message.Message):
    __slots__ = ["name", "placement"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    placement: Placement
    def __init__(self, name: _Optional[str] = ..., placement: _Optional[_Union[Placement, _Mapping]] = ...) -> None: ...

class SetPlacementResponse(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class SetRetentionRequest(_message.Message):
    __slots__ = ["name", "retention"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    retention: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., retention: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SetRetentionResponse(_message.Message):
    __slots__ = ["namespace"]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: Namespace
    def __init__(self, namespace: _Optional[_Union[Namespace, _Mapping]] = ...) -> None: ...

class NamespaceOrigin(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class PlacementMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FlowKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
