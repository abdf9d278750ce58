"""What an activity handler sees of its attempt: info, heartbeats, interventions, pause
and cancellation.

Call these functions from inside a handler registered on an :class:`aion.Worker` (they
find the attempt through a context variable, so they also work in helpers the handler
calls, and in a sync handler's thread)::

    @worker.activity("resize")
    async def resize(job: Job) -> Done:
        done = activity.heartbeat_details(default=0)      # resume a retried attempt
        for i in range(done, len(job.images)):
            await activity.wait_while_paused()            # honour pause / resume
            await resize_one(job.images[i])
            activity.heartbeat(i + 1)                     # progress, kept by the server
        return Done(len(job.images))

**Cancellation is Python's own**: when the server cancels the attempt (the activity was
cancelled, or timed out), a cancel intervention arrives, the attempt passes its deadline,
or the worker stops past its stop timeout, an async handler's task is cancelled and the
handler sees :class:`asyncio.CancelledError` at its next ``await``;
:func:`cancel_cause` says why. A handler that lets it propagate (or raises anything else
after it) is reported as canceled when the activity was cancelled, as a retryable
``worker_stopping`` failure when the worker is stopping. A sync handler (a plain function,
run in a thread) cannot be interrupted: it polls :func:`is_cancelled` or calls
:func:`raise_if_cancelled` at its safe points.

**Pause is a state**: after a pause intervention :func:`is_paused` is true until a
resume; a handler honours it by calling :func:`wait_while_paused` where it can safely
stop, which keeps the attempt's heartbeats going while it waits.

**Data interventions** (inject-message, update-budget, respond-to-approval) arrive on
:func:`interventions` as :class:`Intervention` values, in the order the server sent them;
the handler acknowledges each with :meth:`Intervention.accept` or
:meth:`Intervention.decline`. One it leaves unacknowledged when it returns is declined
by the SDK; up to 64 may wait before further ones are declined.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import datetime as dt
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Optional, Tuple

from . import payload as _payload
from .errors import CancelCause
from .interventions import Priority

if TYPE_CHECKING:  # pragma: no cover
    from ._gen.v1 import worker_pb2
    from .worker import Worker, _Outbox

#: How many interventions may wait for a handler before further ones are declined.
INTERVENTION_BUFFER = 64
#: The most often one attempt sends a heartbeat (or half its heartbeat timeout, if shorter).
HEARTBEAT_EVERY = 1.0

#: An attempt's fencing token: namespace, activity id, attempt number.
Key = Tuple[str, str, int]

_current: contextvars.ContextVar[Optional["_Attempt"]] = contextvars.ContextVar("aion_activity", default=None)


@dataclass(frozen=True)
class ActivityInfo:
    """The attempt a handler is running."""

    namespace: str
    activity_id: str
    #: From 1.
    attempt: int
    task_queue: str
    activity_type: str
    #: The activity's node pin; empty when not pinned.
    node: str
    scheduled_time: Optional[dt.datetime]
    #: When this attempt was handed to the worker.
    started_time: Optional[dt.datetime]
    #: When the server gives up on this attempt; None if never.
    deadline: Optional[dt.datetime]
    start_to_close_timeout: Optional[dt.timedelta]
    #: The longest allowed gap between heartbeats; None when heartbeats are not required.
    heartbeat_timeout: Optional[dt.timedelta]
    #: The id the server gave this worker's stream.
    worker_id: int
    #: The workflow step this activity is, when a workflow started it; empty (step 0) otherwise.
    workflow_id: str = ""
    run_id: str = ""
    step: int = 0
    #: The W3C trace context the activity carries (its scheduler's, or the server's schedule
    #: span when the server traces); empty when it has none. See :mod:`aion.tracing`.
    traceparent: str = ""
    tracestate: str = ""


@dataclass(frozen=True)
class InjectedMessage:
    """The payload of an inject-message intervention."""

    text: str
    priority: Priority


@dataclass(frozen=True)
class BudgetUpdate:
    """The payload of an update-budget intervention; a limit left None is unchanged."""

    max_tokens: Optional[int]
    max_turns: Optional[int]


@dataclass(frozen=True)
class ApprovalResponse:
    """The answer to an approval request the running work waits on."""

    #: The call awaiting approval, as the work reported it.
    call_id: str
    approve: bool
    note: str


class _Ack:
    """Sends one InterventionAck on the stream that delivered the intervention, once."""

    def __init__(self, attempt: Optional["_Attempt"], worker: "Worker", out: "_Outbox",
                 frame: "worker_pb2.InterventionAck") -> None:
        self._attempt = attempt
        self._worker = worker
        self._out = out
        self._frame = frame
        self._lock = threading.Lock()
        self._sent = False

    def send(self, accepted: bool, message: str) -> bool:
        with self._lock:
            if self._sent:
                return False
            self._sent = True
        self._frame.accepted = accepted
        self._frame.message = message
        self._worker._on_loop(self._push)
        return True

    def _push(self) -> None:
        from ._gen.v1 import worker_pb2

        self._out.push(worker_pb2.WorkerMessage(intervention_ack=self._frame))
        if self._attempt is not None:
            self._attempt._acknowledged(self._frame.intervention_id)


class Intervention:
    """One data intervention for the running attempt (see :func:`interventions`); ``kind``
    says which of ``message``, ``budget`` and ``approval`` is set.

    Acknowledge it exactly once: :meth:`accept` once applied, :meth:`decline` with a reason
    otherwise. Only the first acknowledgement counts; it is best effort (lost if the
    connection breaks first). Safe to call from any thread.
    """

    def __init__(self, id: str, kind: str, ack: _Ack, *, message: Optional[InjectedMessage] = None,
                 budget: Optional[BudgetUpdate] = None, approval: Optional[ApprovalResponse] = None) -> None:
        #: The server-assigned identifier, echoed in the acknowledgement.
        self.id = id
        #: inject_message, update_budget or respond_to_approval.
        self.kind = kind
        self.message = message
        self.budget = budget
        self.approval = approval
        self._ack = ack

    def accept(self) -> None:
        """Acknowledges the intervention as applied."""
        self._ack.send(True, "")

    def decline(self, reason: str) -> None:
        """Acknowledges the intervention as not applied, saying why."""
        self._ack.send(False, reason)

    def ack(self, accepted: bool, message: str = "") -> None:
        """Acknowledges it: applied or not, with an optional explanation."""
        self._ack.send(accepted, message)

    def __repr__(self) -> str:
        what = self.message or self.budget or self.approval
        return f"Intervention(id={self.id!r}, kind={self.kind!r}, {what!r})"


class Interventions:
    """The attempt's queue of data interventions, in the order the server sent them.

    ``await get()`` (or ``async for iv in interventions()``) waits for the next one;
    :meth:`poll` takes one without waiting (from any thread); :meth:`get_blocking` waits in
    a sync handler's thread.
    """

    def __init__(self, attempt: "_Attempt") -> None:
        self._a = attempt

    def poll(self) -> Optional[Intervention]:
        """The next waiting intervention, or None when none waits."""
        return self._a._iv_take()

    async def get(self) -> Intervention:
        """Waits for the next intervention (call it on the worker's event loop)."""
        a = self._a
        while True:
            iv = a._iv_take()
            if iv is not None:
                return iv
            a._iv_ready.clear()
            await a._iv_ready.wait()

    def get_blocking(self, timeout: Optional[float] = None) -> Optional[Intervention]:
        """Waits in a thread for the next intervention, at most ``timeout`` seconds; None
        when none came."""
        a: _Attempt = self._a
        with a._iv_cond:
            if not a._iv_queue:
                a._iv_cond.wait_for(lambda: bool(a._iv_queue) or a._iv_ended, timeout)
        return a._iv_take()

    def __aiter__(self) -> "Interventions":
        return self

    async def __anext__(self) -> Intervention:
        return await self.get()


class _Attempt:
    """One running attempt: its info, cancellation, heartbeat throttle, interventions and pause
    state. Its state changes on the worker's event loop; the handler's side may run in a
    thread, so what it touches is guarded."""

    def __init__(self, worker: "Worker", key: Key, info: ActivityInfo, last_details: bytes,
                 heartbeat_timeout: Optional[float], is_async: bool, loop: asyncio.AbstractEventLoop) -> None:
        self.worker = worker
        self.key = key
        self.info = info
        self.last_details = last_details
        self.is_async = is_async
        self.task: "Optional[asyncio.Task[None]]" = None
        self.cause: Optional[CancelCause] = None
        self._cancelled = threading.Event()
        self._loop = loop

        interval = worker._hb_every
        if heartbeat_timeout and heartbeat_timeout / 2 < interval:
            interval = max(heartbeat_timeout / 2, 0.01)
        self.hb_interval = interval
        self.hb_required = bool(heartbeat_timeout)
        self._hb_latest: Optional[bytes] = None
        self._hb_last = float("-inf")
        self._hb_pending: Optional[bytes] = None
        self._hb_has_pending = False
        self._hb_timer: Optional[asyncio.TimerHandle] = None
        self._done = False

        self._iv_queue: Deque[Intervention] = collections.deque()
        self._iv_cond: threading.Condition = threading.Condition()
        self._iv_ended: bool = False
        self._iv_pending: Dict[str, _Ack] = {}
        self._iv_ready: asyncio.Event = asyncio.Event()
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._resumed_thread = threading.Event()
        self._resumed_thread.set()

    # Cancellation (on the loop).

    def cancel(self, cause: CancelCause) -> None:
        """Cancels the handler; the first cause stays."""
        if self.cause is None:
            self.cause = cause
        self._cancelled.set()
        if self.is_async and self.task is not None and not self.task.done():
            self.task.cancel(str(cause))

    # Heartbeats (on the loop).

    def heartbeat(self, details: Optional[bytes]) -> None:
        if self._done:
            return
        self._hb_latest = details
        now = self._loop.time()
        if self._hb_timer is None and now - self._hb_last >= self.hb_interval:
            self._hb_last = now
            self.worker._send_heartbeat(self.key, details)
            return
        self._hb_pending, self._hb_has_pending = details, True
        if self._hb_timer is None:
            self._hb_timer = self._loop.call_at(self._hb_last + self.hb_interval, self._flush)

    def _flush(self) -> None:
        self._hb_timer = None
        if self._done or not self._hb_has_pending:
            return
        details = self._hb_pending
        self._hb_pending, self._hb_has_pending = None, False
        self._hb_last = self._loop.time()
        self.worker._send_heartbeat(self.key, details)

    def repeat_heartbeat(self) -> None:
        """Sends the latest details again (while paused)."""
        self.heartbeat(self._hb_latest)

    def finish(self) -> None:
        """Stops heartbeating for good."""
        self._done = True
        if self._hb_timer is not None:
            self._hb_timer.cancel()
            self._hb_timer = None
        self._hb_pending = None

    # Pause (changed on the loop).

    @property
    def paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool) -> bool:
        """Switches the pause state; True when it changed."""
        if paused == self._paused:
            return False
        self._paused = paused
        if paused:
            self._resumed.clear()
            self._resumed_thread.clear()
        else:
            self._resumed.set()
            self._resumed_thread.set()
        return True

    # Interventions.

    def iv_ended(self) -> bool:
        with self._iv_cond:
            return self._iv_ended

    def offer(self, iv: Intervention) -> str:
        """Hands iv to the handler; the reason is set when it cannot."""
        with self._iv_cond:
            if self._iv_ended:
                return "the attempt ended before the intervention arrived"
            if len(self._iv_queue) >= INTERVENTION_BUFFER:
                return f"{INTERVENTION_BUFFER} interventions are already waiting for the handler"
            self._iv_queue.append(iv)
            self._iv_pending[iv.id] = iv._ack
            self._iv_cond.notify_all()
        self._iv_ready.set()
        return ""

    def _iv_take(self) -> Optional[Intervention]:
        with self._iv_cond:
            return self._iv_queue.popleft() if self._iv_queue else None

    def _acknowledged(self, iv_id: str) -> None:
        with self._iv_cond:
            self._iv_pending.pop(iv_id, None)

    def end_interventions(self) -> int:
        """Stops delivery and declines what the handler did not acknowledge; returns how many."""
        with self._iv_cond:
            self._iv_ended = True
            waiting = {id(iv._ack) for iv in self._iv_queue}
            self._iv_queue.clear()
            pending = list(self._iv_pending.values())
            self._iv_pending.clear()
            self._iv_cond.notify_all()
        self.set_paused(False)
        declined = 0
        for ack in pending:
            msg = "the handler took the intervention but returned without acknowledging it"
            if id(ack) in waiting:
                msg = "the attempt ended before the handler took the intervention"
            if ack.send(False, msg):
                declined += 1
        return declined


def _attempt(what: str) -> _Attempt:
    a = _current.get()
    if a is None:
        raise RuntimeError(f"aion.activity.{what} called outside an activity handler")
    return a


def in_activity() -> bool:
    """Whether the caller runs inside an activity handler."""
    return _current.get() is not None


def info() -> ActivityInfo:
    """The attempt the handler is running."""
    return _attempt("info").info


def heartbeat(details: Any = None) -> None:
    """Reports that the attempt is alive, with progress ``details`` (JSON-encodable; None
    sends none) that the server keeps and hands to the next attempt if this one fails (see
    :func:`heartbeat_details`).

    Throttled to one heartbeat a second per attempt (or half the heartbeat timeout, if
    shorter); the latest details are always sent, at the end of the throttle interval.
    Best effort: dropped while the worker is disconnected. When the server refuses a
    heartbeat because the attempt is no longer current, the handler is cancelled with
    :class:`aion.errors.AttemptStale`. Outside a handler it does nothing.
    """
    a = _current.get()
    if a is None:
        return
    data: Optional[bytes] = None
    if details is not None:
        try:
            data = _payload.encode(details)
        except _payload.PayloadError as e:
            a.worker._log.warning("aion worker: heartbeat details not encodable as JSON; sending none "
                                  "(activity %s): %s", _key_str(a.key), e)
    a.worker._on_loop(a.heartbeat, data)


_NO_DEFAULT: Any = object()


def heartbeat_details(into: Any = None, default: Any = _NO_DEFAULT) -> Any:
    """The details of the last heartbeat a previous attempt recorded, decoded (into ``into``
    when given), so that a retry resumes where it left off. When there are none it returns
    ``default``, or raises LookupError when no default is given."""
    a = _attempt("heartbeat_details")
    if not a.last_details:
        if default is _NO_DEFAULT:
            raise LookupError("no heartbeat details from a previous attempt")
        return default
    return _payload.decode(a.last_details, into)


def interventions() -> Interventions:
    """The attempt's data interventions (inject-message, update-budget, respond-to-approval).

    They are buffered from the start of the attempt, so none is lost before the handler
    first calls this. The server sends one only to a worker that advertised its capability.
    """
    return Interventions(_attempt("interventions"))


def is_paused() -> bool:
    """Whether a pause intervention arrived and no resume since; False outside a handler."""
    a = _current.get()
    return a is not None and a.paused


async def wait_while_paused() -> float:
    """Returns at once when the attempt is not paused; otherwise waits for a resume and
    returns how long it waited, in seconds. Call it where the work can safely stop.

    While it waits it repeats the last heartbeat (when the activity has a heartbeat timeout),
    so a paused attempt does not time out on heartbeats; its start-to-close timeout still
    runs. Cancellation ends the wait with :class:`asyncio.CancelledError`, as anywhere.
    """
    a = _current.get()
    if a is None or not a.paused:
        return 0.0
    loop = asyncio.get_running_loop()
    start = loop.time()
    while a.paused:
        try:
            await asyncio.wait_for(a._resumed.wait(), timeout=a.hb_interval if a.hb_required else None)
        except asyncio.TimeoutError:
            a.repeat_heartbeat()
    return loop.time() - start


def wait_while_paused_blocking() -> float:
    """:func:`wait_while_paused` for a sync handler's thread; it also returns early, raising
    the cause, when the attempt is cancelled."""
    a = _attempt("wait_while_paused_blocking")
    import time

    start = time.monotonic()
    while a.paused:
        if a._resumed_thread.wait(timeout=a.hb_interval):
            break
        raise_if_cancelled()
        if a.hb_required:
            a.worker._on_loop(a.repeat_heartbeat)
    return time.monotonic() - start


def is_cancelled() -> bool:
    """Whether the attempt was cancelled (see :func:`cancel_cause`); False outside a handler."""
    a = _current.get()
    return a is not None and a._cancelled.is_set()


def cancel_cause() -> Optional[CancelCause]:
    """Why the attempt was cancelled: :class:`aion.errors.ActivityCanceled`,
    :class:`aion.errors.AttemptStale`, :class:`aion.errors.WorkerStopping` or
    :class:`aion.errors.DeadlineExceeded`; None while it is not."""
    a = _current.get()
    return a.cause if a is not None else None


def raise_if_cancelled() -> None:
    """Raises the cancel cause when the attempt was cancelled (for sync handlers)."""
    a = _current.get()
    if a is not None and a._cancelled.is_set() and a.cause is not None:
        raise a.cause


def _key_str(key: Key) -> str:
    return f"{key[0]}/{key[1]}#{key[2]}"


def _run_in_context(a: _Attempt, fn: Callable[..., Any], *args: Any) -> Any:
    token = _current.set(a)
    try:
        return fn(*args)
    finally:
        _current.reset(token)
