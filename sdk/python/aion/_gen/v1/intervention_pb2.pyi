from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
INTERVENTION_PRIMITIVE_CANCEL: InterventionPrimitive
INTERVENTION_PRIMITIVE_INJECT_MESSAGE: InterventionPrimitive
INTERVENTION_PRIMITIVE_PAUSE_RESUME: InterventionPrimitive
INTERVENTION_PRIMITIVE_RESPOND_TO_APPROVAL: InterventionPrimitive
INTERVENTION_PRIMITIVE_UNSPECIFIED: InterventionPrimitive
INTERVENTION_PRIMITIVE_UPDATE_BUDGET: InterventionPrimitive
MESSAGE_PRIORITY_INTERRUPT: MessagePriority
MESSAGE_PRIORITY_NORMAL: MessagePriority
MESSAGE_PRIORITY_UNSPECIFIED: MessagePriority

class CancelCommand(_message.Message):
    __slots__ = ["reason"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class InjectMessageCommand(_message.Message):
    __slots__ = ["priority", "text"]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    priority: MessagePriority
    text: str
    def __init__(self, text: _Optional[str] = ..., priority: _Optional[_Union[MessagePriority, str]] = ...) -> None: ...

class InterventionCommand(_message.Message):
    __slots__ = ["cancel", "inject_message", "pause", "respond_to_approval", "resume", "update_budget"]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    INJECT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    RESPOND_TO_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    cancel: CancelCommand
    inject_message: InjectMessageCommand
    pause: PauseCommand
    respond_to_approval: RespondToApprovalCommand
    resume: ResumeCommand
    update_budget: UpdateBudgetCommand
    def __init__(self, inject_message: _Optional[_Union[InjectMessageCommand, _Mapping]] = ..., cancel: _Optional[_Union[CancelCommand, _Mapping]] = ..., pause: _Optional[_Union[PauseCommand, _Mapping]] = ..., resume: _Optional[_Union[ResumeCommand, _Mapping]] = ..., update_budget: _Optional[_Union[UpdateBudgetCommand, _Mapping]] = ..., respond_to_approval: _Optional[_Union[RespondToApprovalCommand, _Mapping]] = ...) -> None: ...

class PauseCommand(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RespondToApprovalCommand(_message.Message):
    __slots__ = ["approve", "call_id", "note"]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    approve: bool
    call_id: str
    note: str
    def __init__(self, call_id: _Optional[str] = ..., approve: bool = ..., note: _Optional[str] = ...) -> None: ...

class ResumeCommand(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class UpdateBudgetCommand(_message.Message):
    __slots__ = ["max_tokens", "max_turns"]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    max_turns: int
    def __init__(self, max_tokens: _Optional[int] = ..., max_turns: _Optional[int] = ...) -> None: ...

class InterventionPrimitive(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class MessagePriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
