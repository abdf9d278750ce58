"""The values the client returns: activities, attempts, runs, workers, namespaces, and their enums.

Times are timezone-aware :class:`datetime.datetime` (UTC), or ``None`` when unset;
durations are :class:`datetime.timedelta`, or ``None`` when unset. Payload fields
(``payload``, ``result``, ``input``, details) are the bytes the server stores; their
``*_value()`` methods decode them as JSON (see :mod:`aion.payload`).
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional, Union

from google.protobuf import duration_pb2, timestamp_pb2

from . import payload as _payload
from ._gen.v1 import activity_pb2, cluster_pb2, common_pb2, namespace_pb2, workflow_pb2

#: A duration as a number of seconds or a timedelta.
Duration = Union[float, int, dt.timedelta]


class ActivityState(str, enum.Enum):
    """Where an activity is in its lifecycle."""

    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TIMED_OUT = "timed_out"
    UNSPECIFIED = "unspecified"

    @property
    def terminal(self) -> bool:
        """Whether the state is final."""
        return self in (ActivityState.COMPLETED, ActivityState.FAILED, ActivityState.CANCELED,
                        ActivityState.TIMED_OUT)


class AttemptOutcome(str, enum.Enum):
    """How one attempt ended."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TIMED_OUT = "timed_out"
    UNSPECIFIED = "unspecified"


class RunStatus(str, enum.Enum):
    """Where a workflow run is in its life; every status but RUNNING is closed."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TERMINATED = "terminated"
    CONTINUED_AS_NEW = "continued_as_new"
    UNSPECIFIED = "unspecified"

    @property
    def closed(self) -> bool:
        """Whether the run is closed."""
        return self not in (RunStatus.RUNNING, RunStatus.UNSPECIFIED)


class IDReuse(enum.IntEnum):
    """Whether a workflow id whose last run closed may start again."""

    ALLOW_DUPLICATE = workflow_pb2.ID_REUSE_POLICY_ALLOW_DUPLICATE
    ALLOW_DUPLICATE_FAILED_ONLY = workflow_pb2.ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
    REJECT_DUPLICATE = workflow_pb2.ID_REUSE_POLICY_REJECT_DUPLICATE


def _enum_from_proto(cls: Any, prefix: str, value: int, enum_desc: Any) -> Any:
    name = enum_desc.Name(value) if value in enum_desc.values() else ""
    word = name[len(prefix):].lower() if name.startswith(prefix) else "unspecified"
    try:
        return cls(word)
    except ValueError:
        return cls("unspecified")


def _word(prefix: str, value: int, enum_desc: Any) -> str:
    """An enum value's name as a lowercase word without its prefix; "unspecified" for an unknown one."""
    return _enum_from_proto(str, prefix, value, enum_desc)  # type: ignore[no-any-return]


def _state(v: int) -> ActivityState:
    return _enum_from_proto(ActivityState, "ACTIVITY_STATE_", v, activity_pb2.ActivityState)  # type: ignore[no-any-return]


def state_to_proto(s: Union[ActivityState, str, None]) -> int:
    """The wire value of a state given as an :class:`ActivityState` or its word; None is any."""
    if s is None or s == "":
        return activity_pb2.ACTIVITY_STATE_UNSPECIFIED
    word = ActivityState(s).value
    return activity_pb2.ActivityState.Value("ACTIVITY_STATE_" + word.upper())  # type: ignore[no-any-return]


def _outcome(v: int) -> AttemptOutcome:
    return _enum_from_proto(AttemptOutcome, "ATTEMPT_OUTCOME_", v, activity_pb2.AttemptOutcome)  # type: ignore[no-any-return]


def _run_status(v: int) -> RunStatus:
    return _enum_from_proto(RunStatus, "RUN_STATUS_", v, workflow_pb2.RunStatus)  # type: ignore[no-any-return]


def run_status_to_proto(s: Union[RunStatus, str, None]) -> int:
    """The wire value of a run status given as a :class:`RunStatus` or its word; None is any."""
    if s is None or s == "":
        return workflow_pb2.RUN_STATUS_UNSPECIFIED
    return workflow_pb2.RunStatus.Value("RUN_STATUS_" + RunStatus(s).value.upper())  # type: ignore[no-any-return]


def to_timedelta(d: Optional[Duration]) -> Optional[dt.timedelta]:
    """Seconds or a timedelta as a timedelta; None stays None."""
    if d is None:
        return None
    if isinstance(d, dt.timedelta):
        return d
    return dt.timedelta(seconds=float(d))


def duration_to_proto(d: Optional[Duration]) -> Optional[duration_pb2.Duration]:
    """A duration for a request; None (and zero) leave the field unset: the server's default."""
    td = to_timedelta(d)
    if td is None or td == dt.timedelta(0):
        return None
    p = duration_pb2.Duration()
    p.FromTimedelta(td)
    return p


def time_to_proto(t: Optional[dt.datetime]) -> Optional[timestamp_pb2.Timestamp]:
    """An instant for a request; a naive datetime is taken as UTC."""
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    p = timestamp_pb2.Timestamp()
    p.FromDatetime(t.astimezone(dt.timezone.utc))
    return p


def _time(msg: Any, name: str) -> Optional[dt.datetime]:
    if not msg.HasField(name):
        return None
    return getattr(msg, name).ToDatetime(tzinfo=dt.timezone.utc)  # type: ignore[no-any-return]


def _dur(msg: Any, name: str) -> Optional[dt.timedelta]:
    if not msg.HasField(name):
        return None
    return getattr(msg, name).ToTimedelta()  # type: ignore[no-any-return]


@dataclass
class FailureInfo:
    """Why an attempt, an activity or a run did not complete."""

    type: str
    message: str
    retryable: bool = False
    details: bytes = b""

    def details_value(self, into: Any = None) -> Any:
        """The details decoded as JSON (into ``into`` when given)."""
        return _payload.decode(self.details, into)

    @classmethod
    def from_proto(cls, f: common_pb2.Failure) -> "FailureInfo":
        """Builds one from the wire Failure."""
        return cls(type=f.type, message=f.message, retryable=f.retryable, details=bytes(f.details))


def _failure(msg: Any, name: str = "failure") -> Optional[FailureInfo]:
    return FailureInfo.from_proto(getattr(msg, name)) if msg.HasField(name) else None


@dataclass
class RetryPolicy:
    """Whether and when a failed attempt is followed by another; unset fields (None, 0,
    empty) take the server's defaults."""

    initial_interval: Optional[Duration] = None
    backoff_coefficient: float = 0.0
    maximum_interval: Optional[Duration] = None
    maximum_attempts: int = 0
    non_retryable_error_types: List[str] = field(default_factory=list)

    def to_proto(self) -> common_pb2.RetryPolicy:
        """The wire form."""
        return common_pb2.RetryPolicy(
            initial_interval=duration_to_proto(self.initial_interval),
            backoff_coefficient=self.backoff_coefficient,
            maximum_interval=duration_to_proto(self.maximum_interval),
            maximum_attempts=self.maximum_attempts,
            non_retryable_error_types=list(self.non_retryable_error_types),
        )

    @classmethod
    def from_proto(cls, p: common_pb2.RetryPolicy) -> "RetryPolicy":
        """Builds one from the wire form."""
        return cls(initial_interval=_dur(p, "initial_interval"), backoff_coefficient=p.backoff_coefficient,
                   maximum_interval=_dur(p, "maximum_interval"), maximum_attempts=p.maximum_attempts,
                   non_retryable_error_types=list(p.non_retryable_error_types))


@dataclass
class Attempt:
    """One delivery of an activity to one worker."""

    number: int
    worker_id: int
    node: str
    started_time: Optional[dt.datetime]
    ended_time: Optional[dt.datetime]
    outcome: AttemptOutcome
    failure: Optional[FailureInfo]


@dataclass
class Activity:
    """One scheduled unit of work and its history, as the server reports it."""

    id: str
    namespace: str
    task_queue: str
    activity_type: str
    node: str
    state: ActivityState
    attempt: int
    payload: bytes
    result: bytes
    failure: Optional[FailureInfo]
    schedule_to_start_timeout: Optional[dt.timedelta]
    start_to_close_timeout: Optional[dt.timedelta]
    schedule_to_close_timeout: Optional[dt.timedelta]
    heartbeat_timeout: Optional[dt.timedelta]
    retry_policy: RetryPolicy
    scheduled_time: Optional[dt.datetime]
    started_time: Optional[dt.datetime]
    closed_time: Optional[dt.datetime]
    ready_time: Optional[dt.datetime]
    attempts: List[Attempt]
    last_heartbeat_details: bytes
    payload_size: int
    priority: int
    fairness_key: str
    fairness_weight: int
    concurrency_key: str
    schedule_id: str
    schedule_time: Optional[dt.datetime]
    #: The W3C trace context the activity's spans join; empty when it has none.
    traceparent: str = ""
    tracestate: str = ""

    def result_value(self, into: Any = None) -> Any:
        """The result decoded as JSON (into ``into`` when given); see :mod:`aion.payload`."""
        return _payload.decode(self.result, into)

    def payload_value(self, into: Any = None) -> Any:
        """The input decoded as JSON (into ``into`` when given)."""
        return _payload.decode(self.payload, into)

    def heartbeat_value(self, into: Any = None) -> Any:
        """The last heartbeat's details decoded as JSON (into ``into`` when given)."""
        return _payload.decode(self.last_heartbeat_details, into)

    @classmethod
    def from_proto(cls, p: activity_pb2.Activity) -> "Activity":
        """Builds one from the wire form."""
        return cls(
            id=p.id, namespace=p.namespace, task_queue=p.task_queue, activity_type=p.activity_type, node=p.node,
            state=_state(p.state), attempt=p.attempt, payload=bytes(p.payload), result=bytes(p.result),
            failure=_failure(p),
            schedule_to_start_timeout=_dur(p, "schedule_to_start_timeout"),
            start_to_close_timeout=_dur(p, "start_to_close_timeout"),
            schedule_to_close_timeout=_dur(p, "schedule_to_close_timeout"),
            heartbeat_timeout=_dur(p, "heartbeat_timeout"),
            retry_policy=RetryPolicy.from_proto(p.retry_policy),
            scheduled_time=_time(p, "scheduled_time"), started_time=_time(p, "started_time"),
            closed_time=_time(p, "closed_time"), ready_time=_time(p, "ready_time"),
            attempts=[Attempt(number=a.number, worker_id=a.worker_id, node=a.node,
                              started_time=_time(a, "started_time"), ended_time=_time(a, "ended_time"),
                              outcome=_outcome(a.outcome), failure=_failure(a)) for a in p.attempts],
            last_heartbeat_details=bytes(p.last_heartbeat_details), payload_size=p.payload_size,
            priority=p.priority, fairness_key=p.fairness_key, fairness_weight=p.fairness_weight,
            concurrency_key=p.concurrency_key, schedule_id=p.schedule_id, schedule_time=_time(p, "schedule_time"),
            traceparent=p.trace_context.traceparent, tracestate=p.trace_context.tracestate,
        )


@dataclass
class ActivityPage:
    """One page of :meth:`aion.Client.list`."""

    activities: List[Activity]
    #: Continues the listing; empty on the last page.
    next_page_token: str


@dataclass
class PendingStep:
    """A step a run waits on."""

    step: int
    #: activity, timer, side_effect or child.
    kind: str
    name: str
    activity_id: str
    attempt: int
    worker_id: int
    fire_time: Optional[dt.datetime]
    child_workflow_id: str


@dataclass
class Run:
    """One execution of a workflow id, as the server reports it."""

    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    build_id: str
    status: RunStatus
    input: bytes
    result: bytes
    failure: Optional[FailureInfo]
    start_time: Optional[dt.datetime]
    close_time: Optional[dt.datetime]
    history_length: int
    task_failure: str
    parent_workflow_id: str
    parent_run_id: str
    next_run_id: str
    priority: int
    pending_steps: List[PendingStep]
    #: The W3C trace context the run's spans and its steps' activities join; empty when none.
    traceparent: str = ""
    tracestate: str = ""

    def result_value(self, into: Any = None) -> Any:
        """The result decoded as JSON (into ``into`` when given)."""
        return _payload.decode(self.result, into)

    @classmethod
    def from_proto(cls, p: workflow_pb2.Run) -> "Run":
        """Builds one from the wire form."""
        return cls(
            namespace=p.namespace, workflow_id=p.workflow_id, run_id=p.run_id, workflow_type=p.workflow_type,
            task_queue=p.task_queue, build_id=p.build_id, status=_run_status(p.status), input=bytes(p.input),
            result=bytes(p.result), failure=_failure(p), start_time=_time(p, "start_time"),
            close_time=_time(p, "close_time"), history_length=p.history_length, task_failure=p.task_failure,
            parent_workflow_id=p.parent_workflow_id, parent_run_id=p.parent_run_id, next_run_id=p.next_run_id,
            priority=p.priority,
            pending_steps=[PendingStep(step=s.step, kind=workflow_pb2.StepKind.Name(s.kind)[len("STEP_KIND_"):].lower(),
                                       name=s.name, activity_id=s.activity_id, attempt=s.attempt,
                                       worker_id=s.worker_id, fire_time=_time(s, "fire_time"),
                                       child_workflow_id=s.child_workflow_id) for s in p.pending_steps],
            traceparent=p.trace_context.traceparent, tracestate=p.trace_context.tracestate,
        )


@dataclass
class WorkerInfo:
    """One connected worker stream, as :meth:`aion.Client.list_workers` reports it."""

    id: int
    namespaces: List[str]
    task_queue: str
    node: str
    activity_types: List[str]
    slots: int
    slots_in_use: int
    draining: bool
    identity: str
    sdk_version: str

    @classmethod
    def from_proto(cls, w: cluster_pb2.Worker) -> "WorkerInfo":
        """Builds one from the wire form."""
        return cls(id=w.id, namespaces=list(w.namespaces), task_queue=w.task_queue, node=w.node,
                   activity_types=list(w.activity_types), slots=w.slots, slots_in_use=w.slots_in_use,
                   draining=w.state == cluster_pb2.WORKER_STATE_DRAINING, identity=w.identity,
                   sdk_version=w.sdk_version)


@dataclass
class Namespace:
    """A namespace, the isolation and authorization boundary, as
    :meth:`aion.Client.get_namespace` and :meth:`aion.Client.set_retention` report it."""

    name: str
    #: How it was first minted: "worker", "schedule" or "explicit".
    origin: str
    #: Its placement's mode: "unplaced", "prefer" or "pinned"; ``nodes`` are the nodes it names.
    placement: str
    nodes: List[str]
    created_time: Optional[dt.datetime]
    #: When a registration or a schedule last used it.
    last_seen_time: Optional[dt.datetime]
    #: How long its closed activities and runs are kept after they close: the one set with
    #: :meth:`aion.Client.set_retention`, else the server's default of 7 days.
    retention: Optional[dt.timedelta]

    @classmethod
    def from_proto(cls, n: namespace_pb2.Namespace) -> "Namespace":
        """Builds one from the wire form."""
        return cls(name=n.name, origin=_word("NAMESPACE_ORIGIN_", n.origin, namespace_pb2.NamespaceOrigin),
                   placement=_word("PLACEMENT_MODE_", n.placement.mode, namespace_pb2.PlacementMode),
                   nodes=list(n.placement.nodes),
                   created_time=_time(n, "created_time"), last_seen_time=_time(n, "last_seen_time"),
                   retention=_dur(n, "retention"))

