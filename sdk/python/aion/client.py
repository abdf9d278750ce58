"""The asyncio client: schedule activities and follow them, start and steer workflows.

::

    async with aion.Client("127.0.0.1:50051") as client:
        h = await client.schedule("demo", "echo", {"hello": "world"})
        print(await h.result())   # {'hello': 'world'}

Every method is a coroutine; :class:`aion.SyncClient` is the same API for code that is not
asyncio. A failed call raises :class:`aion.errors.RPCError`, whose ``code`` is the server's
gRPC status (``NOT_FOUND``, ``INVALID_ARGUMENT`` naming the field and value, ...).
Inputs are encoded as JSON (``bytes`` are sent as they are); see :mod:`aion.payload`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import typing
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc
import grpc.aio

from . import _conn
from . import interventions as _iv
from . import payload as _payload
from . import tracing as _tracing
from ._gen.v1 import (activity_pb2, activity_pb2_grpc, cluster_pb2, cluster_pb2_grpc, namespace_pb2,
                      namespace_pb2_grpc, workflow_pb2, workflow_pb2_grpc)
from .errors import ActivityFailed, NotTerminal, RPCError, WorkflowFailed
from .types import (Activity, ActivityPage, ActivityState, Duration, IDReuse, Namespace, RetryPolicy, Run, RunStatus,
                    WorkerInfo, duration_to_proto, run_status_to_proto, state_to_proto, time_to_proto)

T = TypeVar("T")

#: One server-side wait lasts at most this long; a longer wait is a series of them, so that
#: no proxy or load balancer cuts one long call.
WAIT_POLL = 60.0


@dataclass
class ScheduleOptions:
    """How to schedule one activity; zero values take the server's defaults.

    ``id`` makes scheduling idempotent: the same id with the same request returns the
    existing activity (``existing`` is then true); with a different request the server
    answers ALREADY_EXISTS. Durations are seconds or timedeltas.

    ``traceparent`` and ``tracestate`` are the W3C trace context the activity's spans join
    (the trace context is no part of the request's identity); left empty, the client sends
    the current OpenTelemetry span's, when ``opentelemetry`` is importable (see
    :mod:`aion.tracing`).
    """

    namespace: str
    activity_type: str
    id: str = ""
    task_queue: str = ""
    node: str = ""
    schedule_to_start_timeout: Optional[Duration] = None
    start_to_close_timeout: Optional[Duration] = None
    schedule_to_close_timeout: Optional[Duration] = None
    heartbeat_timeout: Optional[Duration] = None
    retry_policy: Optional[RetryPolicy] = None
    start_delay: Optional[Duration] = None
    start_at: Optional[dt.datetime] = None
    priority: int = 0
    fairness_key: str = ""
    fairness_weight: int = 0
    concurrency_key: str = ""
    traceparent: str = ""
    tracestate: str = ""

    def to_proto(self, payload: bytes) -> activity_pb2.ScheduleRequest:
        """The wire request with an encoded payload; its trace context is the one given, else
        the current OpenTelemetry span's."""
        req = activity_pb2.ScheduleRequest(
            namespace=self.namespace, id=self.id, task_queue=self.task_queue, activity_type=self.activity_type,
            payload=payload, node=self.node,
            schedule_to_start_timeout=duration_to_proto(self.schedule_to_start_timeout),
            start_to_close_timeout=duration_to_proto(self.start_to_close_timeout),
            schedule_to_close_timeout=duration_to_proto(self.schedule_to_close_timeout),
            heartbeat_timeout=duration_to_proto(self.heartbeat_timeout),
            retry_policy=self.retry_policy.to_proto() if self.retry_policy is not None else None,
            start_delay=duration_to_proto(self.start_delay), start_time=time_to_proto(self.start_at),
            priority=self.priority, fairness_key=self.fairness_key, fairness_weight=self.fairness_weight,
            concurrency_key=self.concurrency_key)
        traceparent, tracestate = _tracing.wire(self.traceparent, self.tracestate)
        if traceparent or tracestate:
            req.trace_context.traceparent, req.trace_context.tracestate = traceparent, tracestate
        return req


@dataclass
class ScheduleRequest:
    """One item of :meth:`Client.schedule_batch`: options and the input (JSON-encoded unless
    bytes)."""

    options: ScheduleOptions
    input: Any = None


@dataclass
class BatchResult:
    """The outcome of one batch item: ``handle`` on success, else ``error`` (the status
    Schedule would have returned)."""

    handle: Optional["ActivityHandle"] = None
    error: Optional[RPCError] = None


@dataclass
class ActivityHandle:
    """A scheduled activity: its id and namespace, and the activity as recorded."""

    id: str
    namespace: str
    #: True when the client-supplied id already named an identical activity.
    existing: bool
    activity: Activity
    _client: "Client" = field(repr=False)

    async def get(self) -> Activity:
        """The activity's current state."""
        return await self._client.get(self.namespace, self.id)

    async def wait(self, timeout: Optional[float] = None) -> Activity:
        """Waits until the activity is terminal; see :meth:`Client.wait`."""
        return await self._client.wait(self.namespace, self.id, timeout=timeout)

    async def result(self, into: Any = None, timeout: Optional[float] = None) -> Any:
        """Waits and returns the decoded result; see :meth:`Client.result`."""
        return await self._client.result(self.namespace, self.id, into=into, timeout=timeout)

    async def cancel(self, reason: str = "") -> Activity:
        """Cancels the activity; see :meth:`Client.cancel`."""
        return await self._client.cancel(self.namespace, self.id, reason)

    async def intervene(self, command: _iv.Command, attempt: int = 0) -> _iv.Result:
        """Sends an intervention; see :meth:`Client.intervene`."""
        return await self._client.intervene(self.namespace, self.id, command, attempt=attempt)


@dataclass
class WorkflowHandle:
    """A workflow id's runs: ``run_id`` empty means the open (or else the latest) run."""

    namespace: str
    workflow_id: str
    run_id: str
    #: True when an identical request had started the run.
    existing: bool
    #: The run as recorded at the start; None for a handle from :meth:`Client.workflow`.
    run: Optional[Run]
    _client: "Client" = field(repr=False)

    def _req(self, cls: Any, **kw: Any) -> Any:
        return cls(namespace=self.namespace, workflow_id=self.workflow_id, run_id=self.run_id, **kw)

    def _op(self, what: str) -> str:
        return f"{what} {self._what()}"

    def _what(self) -> str:
        return f"workflow {self.workflow_id!r} in {self.namespace!r}"

    async def get(self) -> Run:
        """The run, with the steps it waits on."""
        resp = await self._client._call(self._op("get"), self._client._workflows.Get,
                                        self._req(workflow_pb2.GetWorkflowRequest))
        return Run.from_proto(resp.run)

    async def wait(self, timeout: Optional[float] = None) -> Run:
        """Waits until the run closes and returns it; without a run id it follows
        continue-as-new to the last run. Like :meth:`Client.wait`, a series of long polls
        that rides out a server restart."""
        resp = await self._client._long_poll(self._op("wait for"), self._client._workflows.Wait,
                                             self._req(workflow_pb2.WaitWorkflowRequest), timeout)
        return Run.from_proto(resp.run)

    async def result(self, into: Any = None, timeout: Optional[float] = None) -> Any:
        """Waits for the run and returns its decoded result; raises
        :class:`aion.errors.WorkflowFailed` when it closed otherwise than completed."""
        run = await self.wait(timeout)
        if run.status is RunStatus.COMPLETED:
            return run.result_value(into)
        raise WorkflowFailed(run)

    async def signal(self, name: str, input: Any = None) -> int:
        """Sends a named signal; returns once it is in the run's history (its event
        number)."""
        resp = await self._client._call(f"signal {name} to {self._what()}", self._client._workflows.Signal,
                                        self._req(workflow_pb2.SignalWorkflowRequest, signal_name=name,
                                                  input=_payload.encode(input)))
        return int(resp.event_seq)

    async def query(self, name: str, input: Any = None, into: Any = None) -> Any:
        """Asks the run's code for a query handler's answer, decoded (into ``into`` when
        given); nothing is written to history."""
        resp = await self._client._call(f"query {name} of {self._what()}", self._client._workflows.Query,
                                        self._req(workflow_pb2.QueryWorkflowRequest, query_name=name,
                                                  input=_payload.encode(input)))
        return _payload.decode(resp.result, into)

    async def cancel(self, reason: str = "") -> Run:
        """Asks the open run to stop: its code cleans up and closes as canceled."""
        resp = await self._client._call(self._op("cancel"), self._client._workflows.Cancel,
                                        self._req(workflow_pb2.CancelWorkflowRequest, reason=reason))
        return Run.from_proto(resp.run)

    async def terminate(self, reason: str = "") -> Run:
        """Closes the open run at once without running any more of its code."""
        resp = await self._client._call(self._op("terminate"), self._client._workflows.Terminate,
                                        self._req(workflow_pb2.TerminateWorkflowRequest, reason=reason))
        return Run.from_proto(resp.run)


class Client:
    """An asyncio client of one aion server. Create one per process and share it; close it
    with :meth:`close` (or use it as an async context manager).

    ``address`` is host:port or any gRPC target. ``token`` is sent as
    "authorization: Bearer <token>"; without ``credentials`` (TLS, see
    :func:`grpc.ssl_channel_credentials`) it travels in clear text.
    """

    def __init__(self, address: str, *, token: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 channel_options: Sequence[Tuple[str, object]] = ()) -> None:
        if not address:
            raise ValueError("aion client: address is empty")
        self.address = address
        self._channel = _conn.channel(address, credentials, channel_options)
        self._md = _conn.metadata(token)
        self._activities = activity_pb2_grpc.ActivityServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._workflows = workflow_pb2_grpc.WorkflowServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._namespaces = namespace_pb2_grpc.NamespaceServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._cluster = cluster_pb2_grpc.ClusterServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """Closes the connection; calls in flight fail."""
        await self._channel.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def activity_service(self) -> activity_pb2_grpc.ActivityServiceStub:
        """The generated stub, for fields or calls the SDK does not wrap."""
        return self._activities

    @property
    def workflow_service(self) -> workflow_pb2_grpc.WorkflowServiceStub:
        """The generated stub."""
        return self._workflows

    async def _call(self, op: str, method: Callable[..., Any], req: Any, timeout: Optional[float] = None) -> Any:
        try:
            return await method(req, metadata=self._md, timeout=timeout)
        except grpc.aio.AioRpcError as e:
            raise RPCError.wrap(op, e) from None

    async def _long_poll(self, op: str, method: Callable[..., Any], req: Any, timeout: Optional[float]) -> Any:
        """Makes a waiting call as a series of server-side waits of at most WAIT_POLL: one that
        ends DEADLINE_EXCEEDED while time is left is made again, one that finds the server
        UNAVAILABLE (restarting) is retried with a short backoff."""
        deadline = None if timeout is None else time.monotonic() + timeout
        retry = 0.05
        while True:
            left = WAIT_POLL if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise RPCError(op, grpc.StatusCode.DEADLINE_EXCEEDED, "timed out waiting")
            try:
                return await method(req, metadata=self._md, timeout=min(left, WAIT_POLL))
            except grpc.aio.AioRpcError as e:
                code = e.code()
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    retry = 0.05
                    continue
                if code == grpc.StatusCode.UNAVAILABLE:
                    if deadline is not None and time.monotonic() + retry > deadline:
                        raise RPCError.wrap(op, e) from None
                    await asyncio.sleep(retry)
                    retry = min(2 * retry, 2.0)
                    continue
                raise RPCError.wrap(op, e) from None

    # Activities.

    async def schedule(self, namespace: str, activity_type: str, input: Any = None, *,
                       timeout: Optional[float] = None, **options: Any) -> ActivityHandle:
        """Durably schedules an activity with ``input`` (JSON-encoded unless bytes) and returns
        once the server has recorded it. ``options`` are the fields of
        :class:`ScheduleOptions` (``id``, ``task_queue``, ``node``, timeouts,
        ``retry_policy``, ``start_delay``, ``priority``, ...)."""
        opts = ScheduleOptions(namespace=namespace, activity_type=activity_type, **options)
        return await self.schedule_with(opts, input, timeout=timeout)

    async def schedule_with(self, opts: ScheduleOptions, input: Any = None, *,
                            timeout: Optional[float] = None) -> ActivityHandle:
        """Like :meth:`schedule`, with the options as one value."""
        op = f"schedule {opts.activity_type} in {opts.namespace!r}"
        try:
            data = _payload.encode(input)
        except _payload.PayloadError as e:
            raise ValueError(f"aion client: {op}: {e}") from None
        resp = await self._call(op, self._activities.Schedule, opts.to_proto(data), timeout)
        return self._handle(resp.activity, resp.existing)

    def _handle(self, p: activity_pb2.Activity, existing: bool) -> ActivityHandle:
        return ActivityHandle(id=p.id, namespace=p.namespace, existing=existing, activity=Activity.from_proto(p),
                              _client=self)

    async def schedule_batch(self, requests: Sequence[ScheduleRequest], *,
                             timeout: Optional[float] = None) -> List[BatchResult]:
        """Schedules many activities in one call and one durable write (at most 1,000). Each
        item succeeds or fails on its own; results come back in request order. The call
        itself raises only for what concerns it as a whole (transport, authentication)."""
        req = activity_pb2.ScheduleBatchRequest()
        for i, r in enumerate(requests):
            try:
                data = _payload.encode(r.input)
            except _payload.PayloadError as e:
                raise ValueError(f"aion client: schedule batch item {i}: {e}") from None
            req.requests.append(r.options.to_proto(data))
        resp = await self._call(f"schedule batch of {len(requests)}", self._activities.ScheduleBatch, req, timeout)
        if len(resp.results) != len(requests):
            raise RPCError(f"schedule batch of {len(requests)}", grpc.StatusCode.INTERNAL,
                           f"the server returned {len(resp.results)} results")
        out: List[BatchResult] = []
        for i, item in enumerate(resp.results):
            if item.HasField("activity"):
                out.append(BatchResult(handle=self._handle(item.activity, item.existing)))
            else:
                o = requests[i].options
                out.append(BatchResult(error=RPCError(
                    f"schedule batch item {i} ({o.activity_type} in {o.namespace!r})",
                    _status_code(item.error.code), item.error.message)))
        return out

    async def get(self, namespace: str, id: str, *, timeout: Optional[float] = None) -> Activity:
        """The activity; RPCError with code NOT_FOUND when it does not exist."""
        resp = await self._call(f"get activity {id!r} in {namespace!r}", self._activities.Get,
                                activity_pb2.GetActivityRequest(namespace=namespace, id=id), timeout)
        return Activity.from_proto(resp.activity)

    async def wait(self, namespace: str, id: str, *, timeout: Optional[float] = None) -> Activity:
        """Waits until the activity is terminal and returns it. ``timeout`` (seconds; None:
        no limit) bounds the whole wait, which raises RPCError with DEADLINE_EXCEEDED when it
        runs out. A series of server-side waits that rides out a server restart."""
        resp = await self._long_poll(f"wait for activity {id!r} in {namespace!r}", self._activities.Wait,
                                     activity_pb2.WaitRequest(namespace=namespace, id=id), timeout)
        return Activity.from_proto(resp.activity)

    async def result(self, namespace: str, id: str, *, into: Any = None, timeout: Optional[float] = None) -> Any:
        """Waits for the activity and returns its decoded result (into ``into`` when given);
        raises :class:`aion.errors.ActivityFailed` when it ended otherwise than completed."""
        return result_of(await self.wait(namespace, id, timeout=timeout), into)

    async def cancel(self, namespace: str, id: str, reason: str = "", *,
                     timeout: Optional[float] = None) -> Activity:
        """Cancels an activity that has not finished; a running attempt is told to stop.
        Returns the activity after the cancellation was recorded."""
        resp = await self._call(f"cancel activity {id!r} in {namespace!r}", self._activities.Cancel,
                                activity_pb2.CancelRequest(namespace=namespace, id=id, reason=reason), timeout)
        return Activity.from_proto(resp.activity)

    async def list(self, namespace: str, *, state: Union[ActivityState, str, None] = None, activity_type: str = "",
                   page_size: int = 0, page_token: str = "", include_payloads: bool = False,
                   timeout: Optional[float] = None) -> ActivityPage:
        """One page of a namespace's activities, newest first, without their attempts (and,
        unless ``include_payloads``, without payloads)."""
        try:
            st = state_to_proto(state)
        except ValueError as e:
            raise ValueError(f"aion client: list activities in {namespace!r}: state {state!r}: {e}") from None
        resp = await self._call(f"list activities in {namespace!r}", self._activities.List,
                                activity_pb2.ListActivitiesRequest(
                                    namespace=namespace, state=typing.cast(Any, st), activity_type=activity_type,
                                    page_size=page_size, page_token=page_token,
                                    include_payloads=include_payloads), timeout)
        return ActivityPage(activities=[Activity.from_proto(a) for a in resp.activities],
                            next_page_token=resp.next_page_token)

    async def list_all(self, namespace: str, **filters: Any) -> AsyncIterator[Activity]:
        """Every matching activity, fetching pages as needed (``filters`` as for
        :meth:`list`)."""
        token = filters.pop("page_token", "")
        while True:
            page = await self.list(namespace, page_token=token, **filters)
            for a in page.activities:
                yield a
            if not page.next_page_token or page.next_page_token == token:
                return
            token = page.next_page_token

    async def intervene(self, namespace: str, id: str, command: _iv.Command, *, attempt: int = 0,
                        timeout: Optional[float] = None) -> _iv.Result:
        """Sends ``command`` (see :mod:`aion.interventions`) to the worker running the
        activity's current attempt (or only ``attempt``, when given) and returns what became
        of it. An outcome other than delivered is not an error; errors are for the call:
        NOT_FOUND, INVALID_ARGUMENT for a malformed command, and so on."""
        op = f"intervene ({command.kind or 'no command'}) in activity {id!r} in {namespace!r}"
        resp = await self._call(op, self._activities.Intervene, activity_pb2.InterveneRequest(
            namespace=namespace, id=id, attempt=attempt, command=command.proto), timeout)
        try:
            outcome = _iv.Outcome.from_proto(resp.outcome)
        except ValueError:
            raise RPCError(op, grpc.StatusCode.UNKNOWN, f"the server answered with outcome {resp.outcome}") from None
        return _iv.Result(outcome=outcome, intervention_id=resp.intervention_id, attempt=resp.attempt)

    # Workflows.

    async def start_workflow(self, namespace: str, workflow_type: str, input: Any = None, *, id: str = "",
                             task_queue: str = "", id_reuse: Optional[IDReuse] = None,
                             start_delay: Optional[Duration] = None, start_at: Optional[dt.datetime] = None,
                             priority: int = 0, fairness_key: str = "", fairness_weight: int = 0,
                             concurrency_key: str = "", traceparent: str = "", tracestate: str = "",
                             timeout: Optional[float] = None) -> WorkflowHandle:
        """Durably starts a run of ``workflow_type`` with ``input`` and returns once the
        server has recorded it. With ``id`` it is idempotent while the run is open.
        ``traceparent`` and ``tracestate`` are the W3C trace context the run and its steps'
        activities join, as in :class:`ScheduleOptions`."""
        op = f"start workflow {workflow_type} in {namespace!r}"
        try:
            data = _payload.encode(input)
        except _payload.PayloadError as e:
            raise ValueError(f"aion client: {op}: {e}") from None
        req = workflow_pb2.StartWorkflowRequest(
            namespace=namespace, workflow_id=id, workflow_type=workflow_type, task_queue=task_queue, input=data,
            id_reuse=typing.cast(Any, int(id_reuse) if id_reuse is not None else 0), start_delay=duration_to_proto(start_delay),
            start_time=time_to_proto(start_at), priority=priority, fairness_key=fairness_key,
            fairness_weight=fairness_weight, concurrency_key=concurrency_key)
        traceparent, tracestate = _tracing.wire(traceparent, tracestate)
        if traceparent or tracestate:
            req.trace_context.traceparent, req.trace_context.tracestate = traceparent, tracestate
        resp = await self._call(op, self._workflows.Start, req, timeout)
        run = Run.from_proto(resp.run)
        return WorkflowHandle(namespace=run.namespace, workflow_id=run.workflow_id, run_id=run.run_id,
                              existing=resp.existing, run=run, _client=self)

    def workflow(self, namespace: str, workflow_id: str, run_id: str = "") -> WorkflowHandle:
        """A handle on a workflow id's runs (``run_id`` empty: the open, or else the latest)."""
        return WorkflowHandle(namespace=namespace, workflow_id=workflow_id, run_id=run_id, existing=False, run=None,
                              _client=self)

    async def signal_workflow(self, namespace: str, workflow_id: str, name: str, input: Any = None,
                              run_id: str = "") -> int:
        """Sends a signal to a run; see :meth:`WorkflowHandle.signal`."""
        return await self.workflow(namespace, workflow_id, run_id).signal(name, input)

    async def query_workflow(self, namespace: str, workflow_id: str, name: str, input: Any = None,
                             run_id: str = "", into: Any = None) -> Any:
        """Queries a run; see :meth:`WorkflowHandle.query`."""
        return await self.workflow(namespace, workflow_id, run_id).query(name, input, into)

    async def wait_workflow(self, namespace: str, workflow_id: str, run_id: str = "",
                            timeout: Optional[float] = None) -> Run:
        """Waits for a run to close; see :meth:`WorkflowHandle.wait`."""
        return await self.workflow(namespace, workflow_id, run_id).wait(timeout)

    async def cancel_workflow(self, namespace: str, workflow_id: str, reason: str = "", run_id: str = "") -> Run:
        """Asks a run to stop; see :meth:`WorkflowHandle.cancel`."""
        return await self.workflow(namespace, workflow_id, run_id).cancel(reason)

    async def list_workflows(self, namespace: str, *, status: Union[RunStatus, str, None] = None,
                             workflow_type: str = "", page_size: int = 0,
                             page_token: str = "") -> Tuple[List[Run], str]:
        """One page of a namespace's runs, newest first, and the next page's token."""
        resp = await self._call(f"list workflows in {namespace!r}", self._workflows.List,
                                workflow_pb2.ListWorkflowsRequest(
                                    namespace=namespace, status=typing.cast(Any, run_status_to_proto(status)),
                                    workflow_type=workflow_type, page_size=page_size, page_token=page_token))
        return [Run.from_proto(r) for r in resp.runs], resp.next_page_token

    # Namespaces and workers (operator calls).

    async def create_namespace(self, name: str) -> bool:
        """Creates a namespace explicitly; True when this call minted it."""
        resp = await self._call(f"create namespace {name!r}", self._namespaces.Create,
                                namespace_pb2.CreateNamespaceRequest(name=name))
        return bool(resp.created)

    async def set_placement(self, name: str, mode: str, nodes: Sequence[str] = ()) -> None:
        """Sets a namespace's placement: ``mode`` is "unplaced", "prefer" or "pinned"."""
        m = namespace_pb2.PlacementMode.Value("PLACEMENT_MODE_" + mode.upper())
        await self._call(f"set placement of namespace {name!r}", self._namespaces.SetPlacement,
                         namespace_pb2.SetPlacementRequest(name=name, placement=namespace_pb2.Placement(
                             mode=m, nodes=list(nodes))))

    async def get_namespace(self, name: str, *, timeout: Optional[float] = None) -> Namespace:
        """A namespace, with its placement and the retention in force; :class:`aion.RPCError`
        with code NOT_FOUND when it was never minted."""
        resp = await self._call(f"get namespace {name!r}", self._namespaces.Get,
                                namespace_pb2.GetNamespaceRequest(name=name), timeout)
        return Namespace.from_proto(resp.namespace)

    async def set_retention(self, name: str, retention: Optional[Duration], *,
                            timeout: Optional[float] = None) -> Namespace:
        """Sets how long a namespace keeps its closed activities and runs after they close
        (seconds or a timedelta, from 1 minute to 10 years; None or 0 restores the server's
        default of 7 days) and returns the namespace with the retention in force. Raises
        :class:`aion.RPCError` with code NOT_FOUND when the namespace was never minted and
        INVALID_ARGUMENT, naming the value, for a retention out of range (nothing changes)."""
        resp = await self._call(f"set retention of namespace {name!r} to {retention!s}",
                                self._namespaces.SetRetention,
                                namespace_pb2.SetRetentionRequest(name=name, retention=duration_to_proto(retention)),
                                timeout)
        return Namespace.from_proto(resp.namespace)

    async def list_workers(self, namespace: str = "") -> List[WorkerInfo]:
        """The connected workers, optionally only those serving ``namespace``."""
        resp = await self._call("list workers", self._cluster.ListWorkers,
                                cluster_pb2.ListWorkersRequest(namespace=namespace))
        return [WorkerInfo.from_proto(w) for w in resp.workers]

    async def drain_worker(self, worker_id: int) -> WorkerInfo:
        """Asks one worker to drain (an operator's drain: it finishes its work and leaves)."""
        resp = await self._call(f"drain worker {worker_id}", self._cluster.DrainWorker,
                                cluster_pb2.DrainWorkerRequest(worker_id=worker_id))
        return WorkerInfo.from_proto(resp.worker)


def result_of(activity: Activity, into: Any = None) -> Any:
    """A finished activity's decoded result; raises :class:`aion.errors.ActivityFailed` when it
    ended otherwise, :class:`aion.errors.NotTerminal` while it runs."""
    if activity.state is ActivityState.COMPLETED:
        return activity.result_value(into)
    if activity.state.terminal:
        raise ActivityFailed(activity)
    raise NotTerminal(f"activity {activity.id!r} in {activity.namespace!r} is {activity.state.value}")


def _status_code(code: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN

