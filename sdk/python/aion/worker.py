"""The worker: dials a server, registers the activity types it runs, and runs the attempts the
server pushes to it over one long-lived gRPC stream (docs/protocol.md is the contract).

::

    worker = aion.Worker("127.0.0.1:50051", namespaces=["demo"], slots=8)

    @worker.activity("greet")
    async def greet(name: str) -> str:
        return "hello " + name

    worker.run_sync()   # until SIGTERM or SIGINT; then drains gracefully

Inputs and results are JSON, converted to and from the handler's annotated types (see
:mod:`aion.payload`): a dataclass parameter receives a dataclass, a dataclass return
value is sent as an object. A handler may be a coroutine function (run on the worker's
event loop) or a plain function (run in a thread of the worker's pool). See
:mod:`aion.activity` for what a handler can do while it runs.

**Failures.** An exception from the handler fails the attempt: an
:class:`aion.errors.ActivityError` gives the failure's type, retryability and details;
any other exception is retryable, typed by its class (``ValueError``,
``billing.QuotaError``), with its traceback in the details. A payload that does not fit
the input type fails the attempt for good (``payload_decode_error``), as does a result
that does not encode (``result_encode_error``) and a task of a type the worker does not
run (``activity_type_not_registered``).

**Delivery.** Every result is kept until the server acknowledges it and is sent again,
right after the next RegisterAck, when the stream broke first; so a result survives a
server restart. Delivery is at-least-once: make handlers idempotent.

**Stopping.** :meth:`Worker.stop` (SIGTERM and SIGINT under :meth:`Worker.run_sync`, or
``run(handle_signals=True)``) sends Drain, takes no new work, lets running handlers finish
(cancelling them with :class:`aion.errors.WorkerStopping` after ``stop_timeout``), waits
for the server's acknowledgements and closes the stream. A server's DrainRequest does the
same; after a server shutdown the worker reconnects with backoff (unless
``exit_on_drain``), after an operator's drain it returns: it is retired.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import datetime as dt
import inspect
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import traceback
import typing
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from . import _conn
from . import activity as _act
from . import payload as _payload
from . import tracing as _tracing
from ._gen.v1 import common_pb2, worker_pb2, worker_pb2_grpc, workflow_pb2
from .errors import (ActivityCanceled, ActivityError, AttemptStale, CancelCause, DeadlineExceeded, WorkerGaveUp,
                     WorkerRefused, WorkerStopping, error_type)
from .interventions import Capability, Priority

#: Sent in Register.sdk_version.
SDK_VERSION = "aion-python/0.1.0"

_FATAL = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
          grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED}

# How one stream ended.
_BROKEN = "broken"    # transport loss or a retryable status: reconnect
_FATAL_END = "fatal"  # registration refused or protocol error: run raises
_STOPPED = "stopped"  # clean close after stop()
_DRAINED = "drained"  # clean close after the server's DrainRequest
_RETIRED = "retired"  # clean close after an operator's drain
_GAVE_UP = "gave_up"  # a stopping worker ran out of time for acknowledgements

#: Clipped into a failure's details: the traceback of an unexpected exception.
_TRACEBACK_LIMIT = 64 << 10


def _key(namespace: str, activity_id: str, attempt: int) -> _act.Key:
    return (namespace, activity_id, attempt)


def _key_str(k: _act.Key) -> str:
    return f"{k[0]}/{k[1]}#{k[2]}"


class _Backoff:
    """Exponential reconnect backoff with jitter: the n-th delay is drawn from [d/2, d] where
    d = min(max, min * 2**n), and is never below min nor above max."""

    def __init__(self, lo: float, hi: float) -> None:
        self.lo, self.hi, self.n = lo, hi, 0

    def next(self) -> float:
        d = min(self.hi, self.lo * (2 ** min(self.n, 62)))
        self.n += 1
        return float(min(max(d / 2 + random.random() * d / 2, self.lo), self.hi))

    def reset(self) -> None:
        self.n = 0


class _Outbox:
    """The only writer of one stream: frames are queued (without bound, so a handler never
    waits on a slow stream) and one sender task writes them in order, then half-closes the
    stream when asked to."""

    def __init__(self) -> None:
        self._queue: Deque[worker_pb2.WorkerMessage] = collections.deque()
        self._close_send = False
        self._closed = False
        self._wake = asyncio.Event()

    def push(self, m: worker_pb2.WorkerMessage) -> bool:
        """Queues a frame; False when the outbox is closed or half-closed."""
        if self._closed or self._close_send:
            return False
        self._queue.append(m)
        self._wake.set()
        return True

    def finish(self) -> None:
        """Half-closes the stream after the frames already queued."""
        self._close_send = True
        self._wake.set()

    def close(self) -> None:
        """Drops whatever is queued and refuses new frames."""
        self._closed = True
        self._queue.clear()
        self._wake.set()

    async def run(self, call: Any) -> None:
        """Writes frames until closed or half-closed; raises what a write raised."""
        while True:
            if self._closed:
                return
            if self._queue:
                m = self._queue.popleft()
                try:
                    await call.write(m)
                except BaseException:
                    self.close()
                    raise
                continue
            if self._close_send:
                self.close()
                await call.done_writing()
                return
            self._wake.clear()
            await self._wake.wait()


class _Handler:
    """A registered activity function with its input and output types."""

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise TypeError(f"aion worker: activity {name!r}: {fn!r} is not callable")
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None))
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        if len(params) > 1:
            raise TypeError(f"aion worker: activity {name!r}: the function takes {len(params)} arguments; "
                            "it takes one input (or none)")
        self.takes_input = bool(params) or any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # unresolvable annotations: take and give raw JSON
            hints = {}
        self.input_type: Any = hints.get(params[0].name) if params else None
        self.output_type: Any = hints.get("return")

    def decode(self, data: bytes) -> Any:
        try:
            return _payload.decode(data, self.input_type)
        except _payload.PayloadError as e:
            into = getattr(self.input_type, "__name__", None) or str(self.input_type)
            raise ActivityError("payload_decode_error", f"decode payload into {into}: {e}", retryable=False) from None

    @staticmethod
    def encode(value: Any) -> bytes:
        try:
            return _payload.encode(value)
        except _payload.PayloadError as e:
            raise ActivityError("result_encode_error", f"encode result {type(value).__name__}: {e}",
                                retryable=False) from None


class Worker:
    """A worker of one aion server (or of a cluster's servers listed as
    "host1:port,host2:port": it connects to one of them and, having lost it, to another).

    Register handlers with :meth:`activity` or :meth:`register_activity`, then call
    :meth:`run` (or :meth:`run_sync`) once.

    :param namespaces: the namespaces served; the server authorizes every one or refuses the
        worker.
    :param task_queue: the pool served in each namespace; empty means "default".
    :param node: the locality label advertised; empty means none.
    :param slots: the most attempts run at once (0 means 1).
    :param capabilities: the intervention primitives advertised (see
        :class:`aion.interventions.Capability`); advertise only what the handlers honour.
    :param identity: names the worker process for operators; default host:pid.
    :param token: sent as "authorization: Bearer <token>"; ``credentials`` for TLS.
    :param min_backoff, max_backoff: bounds of the reconnect delay, in seconds, which
        doubles with jitter.
    :param stop_timeout: how long running handlers may go on after a stop before they are
        cancelled with :class:`aion.errors.WorkerStopping`; then the worker waits at most
        10 s more for the server's acknowledgements.
    :param exit_on_drain: return after a server's drain instead of reconnecting.
    :param tracer_provider: the OpenTelemetry tracer provider of the attempts' spans; None
        uses the global one. Spans are made only when the ``opentelemetry`` package is
        importable (see :mod:`aion.tracing`); the handler sees the task's trace context as
        :attr:`aion.activity.ActivityInfo.traceparent` either way.
    """

    def __init__(self, address: str, *, namespaces: Sequence[str], task_queue: str = "", node: str = "",
                 slots: int = 1, capabilities: Sequence[Union[Capability, str]] = (), identity: str = "",
                 token: Optional[str] = None, credentials: Optional[grpc.ChannelCredentials] = None,
                 min_backoff: float = 0.1, max_backoff: float = 30.0, stop_timeout: float = 30.0,
                 exit_on_drain: bool = False, logger: Optional[logging.Logger] = None,
                 channel_options: Sequence[Tuple[str, object]] = (), tracer_provider: Optional[Any] = None) -> None:
        self._addresses = _conn.addresses(address)
        if isinstance(namespaces, str):
            raise TypeError("aion worker: namespaces is a list of names, not one string")
        if not namespaces:
            raise ValueError("aion worker: namespaces: at least one namespace is required")
        for i, ns in enumerate(namespaces):
            if not ns:
                raise ValueError(f"aion worker: namespaces[{i}] is empty")
        if slots < 0:
            raise ValueError(f"aion worker: slots is {slots}, want at least 0")
        if min_backoff <= 0 or max_backoff < min_backoff:
            raise ValueError(f"aion worker: backoff from {min_backoff}s to {max_backoff}s: want 0 < min <= max")
        if stop_timeout <= 0:
            raise ValueError(f"aion worker: stop_timeout is {stop_timeout}, want more than 0")
        caps: List[Capability] = []
        for c in capabilities:
            try:
                cap = Capability(c)
            except ValueError:
                raise ValueError(f"aion worker: capability {c!r}: want one of "
                                 f"{', '.join(x.value for x in Capability)}") from None
            if cap not in caps:
                caps.append(cap)
        self.address = address
        self.namespaces = list(namespaces)
        self.task_queue = task_queue
        self.node = node
        self.slots = slots or 1
        self.capabilities = caps
        self.identity = identity or f"{socket.gethostname()}:{os.getpid()}"
        self.stop_timeout = stop_timeout
        self.exit_on_drain = exit_on_drain
        self._token = token
        self._credentials = credentials
        self._channel_options = channel_options
        self._min_backoff, self._max_backoff = min_backoff, max_backoff
        self._log = logger or logging.getLogger("aion.worker")
        self._tracer_provider = tracer_provider
        self._handlers: Dict[str, _Handler] = {}
        self._started = False

        # Tunables the tests shorten.
        self._ack_grace = 10.0
        self._register_timeout = 30.0
        self._close_wait = 5.0
        self._hb_every = _act.HEARTBEAT_EVERY

        # Run state, all touched on the worker's event loop.
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[int] = None
        self._running: Dict[_act.Key, _act._Attempt] = {}
        self._book: Dict[_act.Key, worker_pb2.ActivityResult] = {}
        self._sess: Optional[_Outbox] = None
        self._events: "Optional[asyncio.Queue[Tuple[Any, ...]]]" = None
        self._worker_id = 0
        self._stop_requested = False
        self._stopping = False
        self._final_at = 0.0
        self._stop_timer: Optional[asyncio.TimerHandle] = None
        self._changed: Optional[asyncio.Event] = None
        self._registered: Optional[asyncio.Event] = None
        self._sem: Optional[asyncio.Semaphore] = None
        self._tasks: "set[asyncio.Task[None]]" = set()
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None

    # Registration of handlers.

    def activity(self, name: Optional[str] = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Registers the decorated function as the handler of activity type ``name`` (default:
        the function's name) and returns it unchanged."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register_activity(name or fn.__name__, fn)
            return fn

        return register

    def register_activity(self, activity_type: str, fn: Callable[..., Any]) -> None:
        """Registers ``fn`` as the handler of ``activity_type``. It takes one input (or none),
        decoded from the JSON payload into its annotated type, and returns the result,
        encoded as JSON (``bytes`` in or out are the raw payload). Raises on an empty or
        duplicate type, or after :meth:`run` started."""
        if not activity_type:
            raise ValueError("aion worker: register_activity with an empty activity type")
        if self._started:
            raise RuntimeError(f"aion worker: register_activity {activity_type!r} after run")
        if activity_type in self._handlers:
            raise ValueError(f"aion worker: activity type {activity_type!r} registered twice")
        self._handlers[activity_type] = _Handler(activity_type, fn)

    @property
    def activity_types(self) -> List[str]:
        """The registered activity types, in registration order."""
        return list(self._handlers)

    @property
    def worker_id(self) -> int:
        """The id the server gave the current stream; 0 while not registered."""
        return self._worker_id

    async def wait_registered(self, timeout: Optional[float] = None) -> int:
        """Waits until the worker is registered on a stream and returns its worker id."""
        while self._registered is None:
            await asyncio.sleep(0.01)
        await asyncio.wait_for(self._registered.wait(), timeout)
        return self._worker_id

    def _register_frame(self) -> worker_pb2.WorkerMessage:
        return worker_pb2.WorkerMessage(register=worker_pb2.Register(
            namespaces=self.namespaces, task_queue=self.task_queue, node=self.node,
            activity_types=list(self._handlers), slots=self.slots,
            capabilities=[typing.cast(Any, c.to_proto()) for c in self.capabilities], identity=self.identity,
            sdk_version=SDK_VERSION))

    # Running.

    def run_sync(self) -> None:
        """Runs the worker on a new event loop until SIGTERM or SIGINT (then it drains
        gracefully), the server retires it, or it is refused (:class:`aion.errors.WorkerRefused`)."""
        asyncio.run(self.run(handle_signals=True))

    def stop(self) -> None:
        """Stops the worker gracefully (see the module documentation); safe from any thread
        and from a signal handler. A second call cuts the stop timeout short: running
        handlers are cancelled at once."""
        loop = self._loop
        if loop is None:
            self._stop_requested = True
            return
        if threading.get_ident() == self._loop_thread:
            self._request_stop()
        else:
            loop.call_soon_threadsafe(self._request_stop)

    def _request_stop(self) -> None:
        if self._stop_requested and self._stopping:
            self._log.info("aion worker: stop requested again; cancelling running handlers")
            self._cancel_running(WorkerStopping("the worker was stopped again"))
            return
        self._stop_requested = True
        self._post("stop")
        if self._changed is not None:
            self._changed.set()

    async def run(self, *, handle_signals: bool = False) -> None:
        """Connects, registers and runs the attempts the server sends until :meth:`stop`, an
        operator's drain, or a refusal. Call it once.

        Connection loss and retryable statuses are retried with exponential backoff; after
        each reconnect the results the server has not acknowledged are sent again. A refused
        registration (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED, NOT_FOUND,
        FAILED_PRECONDITION, UNIMPLEMENTED) raises :class:`aion.errors.WorkerRefused` at once;
        a stop that runs out of time for acknowledgements raises
        :class:`aion.errors.WorkerGaveUp`. With ``handle_signals`` (in the main thread),
        SIGTERM and SIGINT stop the worker. Cancelling ``run`` itself is a hard stop: the
        running handlers are cancelled and nothing is drained.
        """
        if self._started:
            raise RuntimeError("aion worker: run called twice")
        self._started = True
        if not self._handlers:
            raise ValueError("aion worker: no activity registered (use @worker.activity before run)")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._changed = asyncio.Event()
        self._registered = asyncio.Event()
        self._sem = asyncio.Semaphore(self.slots)
        if any(not h.is_async for h in self._handlers.values()):
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=self.slots,
                                                                   thread_name_prefix="aion-activity")
        signals: List[signal.Signals] = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    signals.append(sig)
                except (NotImplementedError, RuntimeError):
                    pass
        channels: Dict[str, grpc.aio.Channel] = {}
        try:
            await self._loop_sessions(channels)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            # Nothing may outlive run: cancel whatever still runs and wait for it.
            self._cancel_running(WorkerStopping("the worker stopped"))
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._stop_timer is not None:
                self._stop_timer.cancel()
            for ch in channels.values():
                await ch.close()
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._log.info("aion worker: got %s", signal.Signals(sig).name)
        self._request_stop()

    async def _loop_sessions(self, channels: Dict[str, grpc.aio.Channel]) -> None:
        bo = _Backoff(self._min_backoff, self._max_backoff)
        index = 0
        while True:
            if self._stop_requested:
                self._begin_stop()
                if self._idle():
                    return
            target = self._addresses[index % len(self._addresses)]
            if target not in channels:
                channels[target] = _conn.channel(target, self._credentials, self._channel_options)
            began = time.monotonic()
            end, registered, err = await self._session(channels[target], target)
            if end == _STOPPED:
                self._log.info("aion worker stopped")
                return
            if end == _FATAL_END:
                self._log.error("aion worker: the server refused the worker: %s", err)
                assert isinstance(err, WorkerRefused)
                raise err
            if end == _GAVE_UP:
                assert err is not None
                raise err
            if end == _RETIRED:
                self._log.info("aion worker drained by an operator; exiting")
                return
            if end == _DRAINED:
                if self.exit_on_drain:
                    self._log.info("aion worker drained by the server; exiting")
                    return
                self._log.info("aion worker drained by the server; reconnecting")
            else:
                self._log.warning("aion worker: stream lost: %s", err)
                index += 1
            if registered and time.monotonic() - began > 5:
                bo.reset()
            delay = bo.next()
            self._log.info("aion worker: reconnecting in %.3fs", delay)
            await self._sleep(delay)

    async def _sleep(self, delay: float) -> None:
        """Waits out a reconnect delay; a stop ends it early when nothing is left to deliver;
        a stopping worker that runs out of time gives up."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        until = loop.time() + delay
        while True:
            if self._stop_requested:
                self._begin_stop()
                if self._idle():
                    return
            now = loop.time()
            wake = until
            if self._stopping:
                if now >= self._final_at:
                    raise self._give_up()
                wake = min(wake, self._final_at)
            if now >= until:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), wake - now)
            except asyncio.TimeoutError:
                pass

    def _give_up(self) -> WorkerGaveUp:
        running, unacked = len(self._running), len(self._book)
        self._log.warning("aion worker: giving up on acknowledgements: %d running, %d unacknowledged",
                          running, unacked)
        return WorkerGaveUp(f"aion worker: stopped with {running} attempt(s) still running and {unacked} "
                            "result(s) not acknowledged by the server")

    def _idle(self) -> bool:
        return not self._running and not self._book

    def _begin_stop(self) -> None:
        if self._stopping:
            return
        assert self._loop is not None
        self._stopping = True
        self._final_at = self._loop.time() + self.stop_timeout + self._ack_grace
        self._stop_timer = self._loop.call_later(
            self.stop_timeout, self._cancel_running, WorkerStopping(f"stop timeout {self.stop_timeout}s passed"))
        self._log.info("aion worker stopping: finishing in-flight attempts (running=%d, unacknowledged=%d, "
                       "stop_timeout=%ss)", len(self._running), len(self._book), self.stop_timeout)

    def _post(self, *event: Any) -> None:
        if self._events is not None:
            self._events.put_nowait(event)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._post("changed")

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Runs fn on the worker's loop: now when called there, else as soon as it can."""
        if self._loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        else:
            try:
                self._loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop is closed: the worker is gone
                pass

    async def _session(self, ch: grpc.aio.Channel, target: str) -> Tuple[str, bool, Optional[BaseException]]:
        """Runs one stream from Connect to its end."""
        loop = asyncio.get_running_loop()
        events: "asyncio.Queue[Tuple[Any, ...]]" = asyncio.Queue()
        self._events = events
        stub = worker_pb2_grpc.WorkerServiceStub(ch)  # type: ignore[no-untyped-call]
        call = stub.Connect(metadata=_conn.metadata(self._token))
        out = _Outbox()
        timers: List[asyncio.TimerHandle] = []
        tasks: "List[asyncio.Task[None]]" = []

        def later(delay: float, *event: Any) -> None:
            timers.append(loop.call_later(max(delay, 0), events.put_nowait, event))

        async def reader() -> None:
            try:
                while True:
                    m = await call.read()
                    if m is grpc.aio.EOF:
                        events.put_nowait(("recv_end", None))
                        return
                    events.put_nowait(("frame", m))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # AioRpcError, or the call failing otherwise
                events.put_nowait(("recv_end", e))

        async def sender() -> None:
            try:
                await out.run(call)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                events.put_nowait(("send_err", e))

        registered = False
        try:
            # Register goes out before the sender starts: nothing else may precede it.
            try:
                await call.write(self._register_frame())
            except Exception as e:
                return self._ended(await self._call_status(call, e), False)
            tasks.append(asyncio.ensure_future(reader()))
            tasks.append(asyncio.ensure_future(sender()))
            later(self._register_timeout, "register_timeout")
            draining = server_drain = retire = closing = False
            drain_deadline_set = False
            stop_seen = False
            nonce = 0
            ping_every = 5.0
            if self._stopping:
                # The stop began before this stream: Drain goes out with the re-sent results
                # right after RegisterAck.
                stop_seen = True
                later(self._final_at - loop.time(), "final")
            elif self._stop_requested:
                events.put_nowait(("stop",))

            while True:
                if registered and draining and not closing and self._idle():
                    out.finish()
                    closing = True
                    later(self._close_wait, "close_timeout")
                ev = await events.get()
                kind = ev[0]
                if kind == "frame":
                    m: worker_pb2.ServerMessage = ev[1]
                    if not registered:
                        if not m.HasField("register_ack"):
                            # A server bug, not a refusal: drop the stream and reconnect.
                            return _BROKEN, False, RuntimeError(
                                "aion worker: protocol error: first server frame is "
                                f"{m.WhichOneof('message')}, want register_ack")
                        registered = True
                        ack = m.register_ack
                        resent = self._attach(out, ack.worker_id)
                        if self._stopping:
                            draining = True
                        ping_every = _ping_interval(ack)
                        later(ping_every, "ping")
                        self._log.info(
                            "aion worker registered worker_id=%d namespaces=%s task_queue=%r node=%r types=%s "
                            "slots=%d capabilities=%s ping_interval=%.3fs resent_results=%d server=%s",
                            ack.worker_id, ",".join(self.namespaces), self.task_queue, self.node,
                            ",".join(self._handlers), self.slots, ",".join(c.value for c in self.capabilities),
                            ping_every, resent, target)
                        continue
                    drain = self._handle(out, m)
                    if drain is not None:
                        if not draining:
                            self._log.info("aion worker: the server asked to drain (reason %s)",
                                           worker_pb2.DrainReason.Name(drain.reason))
                        draining = server_drain = True
                        retire = drain.reason == worker_pb2.DRAIN_REASON_OPERATOR
                        if drain.HasField("deadline") and not drain_deadline_set:
                            drain_deadline_set = True
                            later(drain.deadline.ToDatetime(tzinfo=dt.timezone.utc).timestamp() - time.time(),
                                  "drain_deadline")
                elif kind == "recv_end":
                    err = ev[1]
                    if closing and self._idle():
                        if server_drain and not self._stopping:
                            return (_RETIRED if retire else _DRAINED), True, None
                        return _STOPPED, True, None
                    if err is None:
                        err = RuntimeError("UNAVAILABLE: the server closed the stream")
                    return self._ended(err, registered)
                elif kind == "send_err":
                    return self._ended(await self._call_status(call, ev[1]), registered)
                elif kind == "changed":
                    pass
                elif kind == "ping":
                    nonce += 1
                    out.push(worker_pb2.WorkerMessage(ping=worker_pb2.Ping(nonce=nonce)))
                    later(ping_every, "ping")
                elif kind == "stop":
                    if stop_seen:
                        continue
                    stop_seen = True
                    self._begin_stop()
                    if not registered and self._idle():
                        return _STOPPED, False, None
                    if registered and not draining:
                        out.push(_drain_frame("worker stopping"))
                    if registered:
                        draining = True
                    later(self._final_at - loop.time(), "final")
                elif kind == "drain_deadline":
                    self._cancel_running(WorkerStopping("the server's drain deadline passed"))
                elif kind == "close_timeout":
                    # The server did not end the stream after the half-close; done with it anyway.
                    if server_drain and not self._stopping:
                        return (_RETIRED if retire else _DRAINED), True, None
                    return _STOPPED, True, None
                elif kind == "register_timeout":
                    if not registered:
                        return _BROKEN, False, RuntimeError(
                            f"aion worker: no RegisterAck within {self._register_timeout}s")
                elif kind == "final":
                    return _GAVE_UP, registered, self._give_up()
        finally:
            self._events = None
            self._detach(out)
            for t in timers:
                t.cancel()
            for task in tasks:
                task.cancel()
            call.cancel()
            for task in tasks:
                try:
                    await task
                except BaseException:
                    pass

    async def _call_status(self, call: Any, err: BaseException) -> BaseException:
        """The stream's status after a failed write: the server's, when it comes in time."""
        if isinstance(err, grpc.aio.AioRpcError):
            return typing.cast(BaseException, err)
        try:
            code = await asyncio.wait_for(call.code(), self._close_wait)
            details = await call.details()
            if code is not None and code != grpc.StatusCode.OK:
                return _StatusError(code, details or "")
        except Exception:
            pass
        return err

    @staticmethod
    def _ended(err: BaseException, registered: bool) -> Tuple[str, bool, Optional[BaseException]]:
        """How a stream that ended with err ended: a refusal is fatal (as WorkerRefused),
        anything else is broken."""
        code: Optional[grpc.StatusCode] = None
        details = ""
        if isinstance(err, grpc.aio.AioRpcError):
            code, details = err.code(), err.details() or ""
        elif isinstance(err, _StatusError):
            code, details = err.code, err.details
        if code in _FATAL:
            assert code is not None
            return _FATAL_END, registered, WorkerRefused(code, details)
        return _BROKEN, registered, err

    def _attach(self, out: _Outbox, worker_id: int) -> int:
        """Makes out the current stream after RegisterAck: the unacknowledged results go first,
        then (when stopping) the Drain frame."""
        self._sess = out
        self._worker_id = worker_id
        resent = 0
        for r in self._book.values():
            out.push(worker_pb2.WorkerMessage(activity_result=r))
            resent += 1
        if self._stopping:
            out.push(_drain_frame("worker stopping"))
        assert self._registered is not None
        self._registered.set()
        return resent

    def _detach(self, out: _Outbox) -> None:
        if self._sess is out:
            self._sess = None
            self._worker_id = 0
            if self._registered is not None:
                self._registered.clear()
        out.close()

    def _send_heartbeat(self, key: _act.Key, details: Optional[bytes]) -> None:
        if self._sess is None:
            return
        self._sess.push(worker_pb2.WorkerMessage(activity_heartbeat=worker_pb2.ActivityHeartbeat(
            namespace=key[0], activity_id=key[1], attempt=key[2], details=details or b"")))

    def _cancel_running(self, cause: CancelCause) -> None:
        for a in list(self._running.values()):
            a.cancel(cause)

    # Frames.

    def _handle(self, out: _Outbox, m: worker_pb2.ServerMessage) -> Optional[worker_pb2.DrainRequest]:
        """Applies one server frame after registration; returns a DrainRequest."""
        which = m.WhichOneof("message")
        if which == "activity_task":
            t = m.activity_task
            self._log.debug("aion worker: task %s/%s#%d type %s", t.namespace, t.activity_id, t.attempt,
                            t.activity_type)
            if self._stopping:
                # The server sent it before it saw our Drain: hand it back at once.
                self._decline_task(out, t)
            else:
                self._start_attempt(t)
        elif which == "result_ack":
            ra = m.result_ack
            k = _key(ra.namespace, ra.activity_id, ra.attempt)
            known = self._book.pop(k, None) is not None
            if ra.refused:
                self._log.warning("aion worker: result refused by the server (activity %s): %s", _key_str(k),
                                  ra.refused)
            elif ra.status == worker_pb2.RESULT_STATUS_ALREADY_RECORDED:
                self._log.info("aion worker: result had been recorded before (its first ack was lost): %s",
                               _key_str(k))
            elif not known:
                self._log.debug("aion worker: ack for an unknown result %s", _key_str(k))
            self._notify()
        elif which == "heartbeat_ack":
            ha = m.heartbeat_ack
            if ha.refused:
                a = self._running.get(_key(ha.namespace, ha.activity_id, ha.attempt))
                if a is not None:
                    self._log.info("aion worker: heartbeat refused; stopping the attempt %s: %s",
                                   _key_str(a.key), ha.refused)
                    a.cancel(AttemptStale(f"attempt is no longer current: {ha.refused}"))
        elif which == "cancel_activity":
            ca = m.cancel_activity
            a = self._running.get(_key(ca.namespace, ca.activity_id, ca.attempt))
            if a is not None:
                self._log.info("aion worker: activity canceled %s: %s", _key_str(a.key), ca.reason)
                a.cancel(ActivityCanceled(f"activity canceled: {ca.reason}"))
        elif which == "intervention":
            self._intervene(out, m.intervention)
        elif which == "drain_request":
            return m.drain_request
        elif which == "pong":
            pass
        elif which == "register_ack":
            self._log.warning("aion worker: unexpected second RegisterAck ignored")
        elif which == "workflow_task":
            # This SDK registers no workflow types, so a server never sends one; answer it
            # anyway so that the run is not held until the task times out.
            wt = m.workflow_task
            out.push(worker_pb2.WorkerMessage(workflow_task_result=workflow_pb2.WorkflowTaskResult(
                namespace=wt.namespace, run_id=wt.run_id, task=wt.task, failure=common_pb2.Failure(
                    type="worker_busy", retryable=True,
                    message="this worker (aion-python) does not run workflow tasks"))))
        else:
            self._log.warning("aion worker: unknown server frame ignored: %s", which)
        return None

    def _intervene(self, out: _Outbox, m: worker_pb2.Intervention) -> None:
        """Applies one Intervention frame and acknowledges it, or hands it to the handler,
        which acknowledges it."""
        k = _key(m.namespace, m.activity_id, m.attempt)
        ack = _act._Ack(None, self, out, worker_pb2.InterventionAck(
            namespace=m.namespace, activity_id=m.activity_id, attempt=m.attempt, intervention_id=m.intervention_id))
        kind = m.command.WhichOneof("command") if m.HasField("command") else None

        def reply(accepted: bool, msg: str) -> None:
            ack.send(accepted, msg)
            self._log.info("aion worker: intervention %s for %s command %s accepted=%s %s", m.intervention_id,
                           _key_str(k), kind or "unknown", accepted, msg)

        if kind is None:
            reply(False, "the intervention carries no command this SDK knows")
            return
        need = Capability.PAUSE_RESUME if kind in ("pause", "resume") else Capability(kind)
        if need not in self.capabilities:
            reply(False, f"this worker did not advertise the {need.value} capability")
            return
        a = self._running.get(k)
        if a is None or a.iv_ended():
            reply(False, f"attempt {_key_str(k)} is not running on this worker")
            return
        cmd = m.command
        if kind == "cancel":
            a.cancel(ActivityCanceled(f"activity canceled: {cmd.cancel.reason}"))
            reply(True, "")
        elif kind == "pause":
            reply(True, "" if a.set_paused(True) else "already paused")
        elif kind == "resume":
            reply(True, "" if a.set_paused(False) else "not paused")
        else:
            ack = _act._Ack(a, self, out, ack._frame)
            if kind == "inject_message":
                iv = _act.Intervention(m.intervention_id, kind, ack, message=_act.InjectedMessage(
                    text=cmd.inject_message.text, priority=Priority.from_proto(cmd.inject_message.priority)))
            elif kind == "update_budget":
                b = cmd.update_budget
                iv = _act.Intervention(m.intervention_id, kind, ack, budget=_act.BudgetUpdate(
                    max_tokens=b.max_tokens if b.HasField("max_tokens") else None,
                    max_turns=b.max_turns if b.HasField("max_turns") else None))
            else:
                r = cmd.respond_to_approval
                iv = _act.Intervention(m.intervention_id, kind, ack, approval=_act.ApprovalResponse(
                    call_id=r.call_id, approve=r.approve, note=r.note))
            reason = a.offer(iv)
            if reason:
                reply(False, reason)
                return
            self._log.debug("aion worker: intervention %s handed to the handler of %s", m.intervention_id,
                            _key_str(k))

    def _decline_task(self, out: _Outbox, t: worker_pb2.ActivityTask) -> None:
        """Answers a task that arrived while stopping with a retryable worker_stopping failure,
        kept until acknowledged like any result."""
        res = worker_pb2.ActivityResult(namespace=t.namespace, activity_id=t.activity_id, attempt=t.attempt,
                                        failed=common_pb2.Failure(
                                            type="worker_stopping", retryable=True,
                                            message="the worker was stopping when the task arrived"))
        if out.push(worker_pb2.WorkerMessage(activity_result=res)):
            self._book[_key(t.namespace, t.activity_id, t.attempt)] = res
        self._log.info("aion worker: task declined while stopping: %s/%s#%d", t.namespace, t.activity_id,
                       t.attempt)

    def _start_attempt(self, t: worker_pb2.ActivityTask) -> None:
        k = _key(t.namespace, t.activity_id, t.attempt)
        if k in self._running or k in self._book:
            self._log.warning("aion worker: duplicate task ignored: %s", _key_str(k))
            return
        h = self._handlers.get(t.activity_type)

        def ts(name: str) -> Optional[dt.datetime]:
            return getattr(t, name).ToDatetime(tzinfo=dt.timezone.utc) if t.HasField(name) else None

        hb = t.heartbeat_timeout.ToTimedelta() if t.HasField("heartbeat_timeout") else None
        info = _act.ActivityInfo(
            namespace=t.namespace, activity_id=t.activity_id, attempt=t.attempt, task_queue=t.task_queue,
            activity_type=t.activity_type, node=t.node, scheduled_time=ts("scheduled_time"),
            started_time=ts("started_time"), deadline=ts("deadline"),
            start_to_close_timeout=t.start_to_close_timeout.ToTimedelta() if t.HasField(
                "start_to_close_timeout") else None,
            heartbeat_timeout=hb, worker_id=self._worker_id, workflow_id=t.workflow_id, run_id=t.run_id, step=t.step,
            traceparent=t.trace_context.traceparent, tracestate=t.trace_context.tracestate)
        assert self._loop is not None
        a = _act._Attempt(self, k, info, bytes(t.last_heartbeat_details),
                          hb.total_seconds() if hb else None, h.is_async if h else True, self._loop)
        self._running[k] = a
        task = asyncio.ensure_future(self._run_attempt(a, h, bytes(t.payload)))
        a.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_attempt(self, a: _act._Attempt, h: Optional[_Handler], data: bytes) -> None:
        loop = asyncio.get_running_loop()
        assert self._sem is not None
        deadline_timer = None
        if a.info.deadline is not None:
            delay = a.info.deadline.timestamp() - time.time()
            deadline_timer = loop.call_later(max(delay, 0), a.cancel,
                                             DeadlineExceeded(f"the attempt passed its deadline {a.info.deadline}"))
        start = loop.time()
        out: Optional[bytes] = None
        exc: Optional[BaseException] = None
        span = _tracing.start_attempt(self._tracer_provider, SDK_VERSION, a.info.traceparent, a.info.tracestate,
                                      _span_attributes(a.info))
        try:
            # The slot guard: the server never sends more than slots attempts at once, but a
            # worker must not trust that blindly.
            await self._sem.acquire()
            try:
                if h is None:
                    raise ActivityError("activity_type_not_registered",
                                        f"activity type {a.info.activity_type!r} is not registered on this worker",
                                        retryable=False)
                out = await self._call(a, h, data, span)
            finally:
                self._sem.release()
        except BaseException as e:  # the handler's failure, or its cancellation
            exc = e
        finally:
            if deadline_timer is not None:
                deadline_timer.cancel()
        a.finish()
        n = a.end_interventions()
        if n:
            self._log.warning("aion worker: interventions the handler did not acknowledge were declined "
                              "(activity %s): %d", _key_str(a.key), n)
        res = _build_result(a, out, exc)
        if span is not None:
            outcome = res.WhichOneof("outcome") or "failed"
            span.end(outcome, res.failed.type, res.failed.message)
            traceparent, tracestate = span.trace_context()
            if traceparent:
                res.trace_context.traceparent, res.trace_context.tracestate = traceparent, tracestate
        self._log.debug("aion worker: attempt finished %s type %s outcome %s in %.3fs", _key_str(a.key),
                        a.info.activity_type, res.WhichOneof("outcome"), loop.time() - start)
        self._running.pop(a.key, None)
        self._book[a.key] = res
        if self._sess is not None:
            self._sess.push(worker_pb2.WorkerMessage(activity_result=res))
        self._notify()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise exc

    async def _call(self, a: _act._Attempt, h: _Handler, data: bytes, span: Optional[_tracing.AttemptSpan]) -> bytes:
        arg = h.decode(data)
        args = (arg,) if h.takes_input else ()
        if h.is_async:
            token = _act._current.set(a)
            current = span.attach() if span is not None else None
            try:
                value = await h.fn(*args)
            finally:
                if span is not None:
                    span.detach(current)
                _act._current.reset(token)
        else:
            loop = asyncio.get_running_loop()
            fn = h.fn if span is None else _in_span(span, h.fn)
            fut = loop.run_in_executor(self._executor, _act._run_in_context, a, fn, *args)
            # A thread cannot be interrupted: the attempt waits for it whatever happens, and a
            # cancel only sets the flag the handler polls.
            value = await asyncio.shield(fut) if not fut.done() else fut.result()
        return h.encode(value)


class _StatusError(Exception):
    """A stream's status learnt after a failed write."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def _drain_frame(reason: str) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(drain=worker_pb2.Drain(reason=reason))


def _ping_interval(ack: worker_pb2.RegisterAck) -> float:
    """The ack's ping interval, else a third of the heartbeat window, else 5 s."""
    if ack.HasField("ping_interval") and ack.ping_interval.ToTimedelta().total_seconds() > 0:
        return float(ack.ping_interval.ToTimedelta().total_seconds())
    if ack.HasField("heartbeat_window") and ack.heartbeat_window.ToTimedelta().total_seconds() > 0:
        return max(float(ack.heartbeat_window.ToTimedelta().total_seconds()) / 3, 0.01)
    return 5.0


def _span_attributes(info: _act.ActivityInfo) -> Dict[str, Any]:
    """What an attempt's span says of it (the names the Go SDK and the server use)."""
    attrs: Dict[str, Any] = {"aion.namespace": info.namespace, "aion.activity.id": info.activity_id,
                             "aion.activity.type": info.activity_type, "aion.task_queue": info.task_queue,
                             "aion.attempt": info.attempt}
    if info.workflow_id:
        attrs.update({"aion.workflow.id": info.workflow_id, "aion.run.id": info.run_id, "aion.step": info.step})
    return attrs


def _in_span(span: _tracing.AttemptSpan, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, run with span current in the thread that runs it."""

    def run(*args: Any) -> Any:
        token = span.attach()
        try:
            return fn(*args)
        finally:
            span.detach(token)

    return run


def _build_result(a: _act._Attempt, out: Optional[bytes], exc: Optional[BaseException]) -> worker_pb2.ActivityResult:
    """Turns what the handler returned or raised into the ActivityResult."""
    r = worker_pb2.ActivityResult(namespace=a.key[0], activity_id=a.key[1], attempt=a.key[2])
    cause = a.cause
    cancelled = isinstance(exc, (asyncio.CancelledError, CancelCause))
    if exc is None:
        r.completed.result = out or b""
    elif isinstance(cause, ActivityCanceled):
        msg = str(exc) or str(cause)
        r.canceled.details = json.dumps(msg).encode() if msg else b""
    elif isinstance(cause, WorkerStopping) and cancelled:
        r.failed.CopyFrom(common_pb2.Failure(type="worker_stopping", retryable=True,
                                             message=f"the worker stopped before the attempt finished: {cause}"))
    elif isinstance(cause, DeadlineExceeded) and cancelled:
        r.failed.CopyFrom(common_pb2.Failure(type="deadline_exceeded", retryable=True, message=str(cause)))
    elif isinstance(cause, AttemptStale) and cancelled:
        r.failed.CopyFrom(common_pb2.Failure(type="attempt_stale", retryable=True, message=str(cause)))
    else:
        r.failed.CopyFrom(_to_failure(exc))
    return r


def _to_failure(exc: BaseException) -> common_pb2.Failure:
    """A handler's exception as the wire Failure."""
    if isinstance(exc, ActivityError):
        f = common_pb2.Failure(type=exc.type or "error", message=exc.message, retryable=exc.retryable)
        if exc.details is not None:
            try:
                f.details = _payload.encode(exc.details)
            except _payload.PayloadError as e:
                f.details = json.dumps(f"details not encodable as JSON: {e}").encode()
        return f
    if isinstance(exc, asyncio.CancelledError):
        return common_pb2.Failure(type="cancelled", retryable=True, message=str(exc) or "the handler was cancelled")
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(tb) > _TRACEBACK_LIMIT:
        tb = "…" + tb[-_TRACEBACK_LIMIT:]
    return common_pb2.Failure(type=error_type(exc), message=str(exc) or type(exc).__name__, retryable=True,
                              details=json.dumps(tb).encode())


__all__ = ["Worker", "SDK_VERSION", "Priority"]
