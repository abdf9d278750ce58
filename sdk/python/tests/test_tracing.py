"""The W3C trace context through the Python SDK: the client sends it, the server keeps it with
the activity or run, the worker hands it to the handler; and, with OpenTelemetry importable,
the worker's span per attempt. OpenTelemetry is not installed here, so the span cases run
against a stand-in of the few API calls aion.tracing makes (installed as the ``opentelemetry``
package for those tests only)."""

from __future__ import annotations

import contextvars
import itertools
import os
import sys
import types
from typing import Any, Dict, Iterator, List, Optional, Tuple

import grpc
import pytest

import aion
from aion import activity
from aion import tracing as aion_tracing
from aion._gen.v1 import common_pb2, worker_pb2
from conftest import Server, run, running
from test_fake_server import NS, FakeServer

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "congo=t61rcWkgMzE"


def recorder(seen: List[Tuple[str, str]]) -> Any:
    def reg(w: aion.Worker) -> None:
        @w.activity("traced")
        async def traced(_: Any) -> str:
            info = activity.info()
            seen.append((info.traceparent, info.tracestate))
            if info.attempt == 1:
                raise RuntimeError("once more")  # the retry must see the same context
            return info.traceparent

    return reg


QUICK = aion.RetryPolicy(initial_interval=0.005, maximum_interval=0.005)


@run
async def test_the_traceparent_the_client_sets_reaches_every_attempt_and_the_activity(server: Server, ns: str) -> None:
    seen: List[Tuple[str, str]] = []
    async with aion.Client(server.addr) as c, running(server.addr, recorder(seen), namespaces=[ns]):
        h = await c.schedule(ns, "traced", None, traceparent=TRACEPARENT, tracestate=TRACESTATE, retry_policy=QUICK)
        assert await h.result(timeout=15) == TRACEPARENT
        a = await h.get()
    assert seen == [(TRACEPARENT, TRACESTATE)] * 2
    assert (a.traceparent, a.tracestate) == (TRACEPARENT, TRACESTATE)
    assert (h.activity.traceparent, h.activity.tracestate) == (TRACEPARENT, TRACESTATE)


@run
async def test_without_a_trace_context_the_handler_sees_none(server: Server, ns: str) -> None:
    seen: List[Tuple[str, str]] = []
    async with aion.Client(server.addr) as c, running(server.addr, recorder(seen), namespaces=[ns]):
        h = await c.schedule(ns, "traced", None, retry_policy=QUICK)
        assert await h.result(timeout=15) == ""
    assert seen == [("", "")] * 2
    assert (h.activity.traceparent, h.activity.tracestate) == ("", "")


@run
async def test_a_batch_item_and_a_run_keep_their_trace_contexts(server: Server, ns: str) -> None:
    async with aion.Client(server.addr) as c:
        [res] = await c.schedule_batch([aion.ScheduleRequest(aion.ScheduleOptions(
            namespace=ns, activity_type="traced", traceparent=TRACEPARENT))])
        assert res.handle is not None and res.handle.activity.traceparent == TRACEPARENT
        wf = await c.start_workflow(ns, "order", {"n": 1}, traceparent=TRACEPARENT, tracestate=TRACESTATE)
        assert wf.run is not None and (wf.run.traceparent, wf.run.tracestate) == (TRACEPARENT, TRACESTATE)


@run
async def test_a_bad_traceparent_is_refused_naming_it(server: Server, ns: str) -> None:
    async with aion.Client(server.addr) as c:
        with pytest.raises(aion.RPCError) as e:
            await c.schedule(ns, "traced", None, traceparent="00-nope")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert 'trace_context.traceparent: "00-nope"' in str(e.value)


# A stand-in for the OpenTelemetry API calls aion.tracing makes.

_ids = itertools.count(0x1000)


class _SpanContext:
    def __init__(self, trace_id: str, span_id: str, state: str = "") -> None:
        self.trace_id, self.span_id, self.state = trace_id, span_id, state

    @property
    def is_valid(self) -> bool:
        return bool(self.trace_id and self.span_id)


class _Span:
    def __init__(self, name: str, sc: _SpanContext, parent: Optional[_SpanContext], kind: Any,
                 attributes: Dict[str, Any]) -> None:
        self.name, self.sc, self.parent, self.kind = name, sc, parent, kind
        self.attributes = dict(attributes)
        self.status: Any = None
        self.ended = False

    def get_span_context(self) -> _SpanContext:
        return self.sc

    def set_attribute(self, k: str, v: Any) -> None:
        self.attributes[k] = v

    def set_status(self, s: Any) -> None:
        self.status = s

    def end(self) -> None:
        self.ended = True


class _Stand:
    """The stand-in modules and what they saw."""

    def __init__(self) -> None:
        self.spans: List[_Span] = []
        self.current: contextvars.ContextVar[Dict[str, Any]] = contextvars.ContextVar("otel", default={})
        stand = self

        ctx = types.ModuleType("opentelemetry.context")

        def attach(c: Dict[str, Any]) -> Any:
            return stand.current.set(c)

        def detach(token: Any) -> None:
            stand.current.reset(token)

        ctx.attach, ctx.detach = attach, detach  # type: ignore[attr-defined]

        tr = types.ModuleType("opentelemetry.trace")

        class SpanKind:
            CONSUMER = "consumer"

        class StatusCode:
            ERROR = "error"

        class Status:
            def __init__(self, code: Any, description: str = "") -> None:
                self.code, self.description = code, description

        class Tracer:
            def start_span(self, name: str, context: Optional[Dict[str, Any]] = None, kind: Any = None,
                           attributes: Optional[Dict[str, Any]] = None) -> _Span:
                parent = (context or {}).get("span")
                psc = parent.get_span_context() if parent is not None else None
                trace_id = psc.trace_id if psc is not None else f"{next(_ids):032x}"
                s = _Span(name, _SpanContext(trace_id, f"{next(_ids):016x}", psc.state if psc else ""), psc, kind,
                          attributes or {})
                stand.spans.append(s)
                return s

        class Provider:
            def get_tracer(self, name: str, version: Optional[str] = None) -> Tracer:
                assert name == "aion.worker" and version == aion.SDK_VERSION
                return Tracer()

        def set_span_in_context(span: Any, context: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
            out = dict(context or {})
            out["span"] = span
            return out

        tr.SpanKind, tr.StatusCode, tr.Status = SpanKind, StatusCode, Status  # type: ignore[attr-defined]
        tr.set_span_in_context = set_span_in_context  # type: ignore[attr-defined]
        tr.get_tracer_provider = lambda: Provider()  # type: ignore[attr-defined]

        class Remote:
            def __init__(self, sc: _SpanContext) -> None:
                self.sc = sc

            def get_span_context(self) -> _SpanContext:
                return self.sc

        class TraceContextTextMapPropagator:
            def extract(self, carrier: Dict[str, str]) -> Dict[str, Any]:
                tp = carrier.get("traceparent", "")
                if not tp:
                    return {}
                _, trace_id, span_id, _ = tp.split("-")
                return {"span": Remote(_SpanContext(trace_id, span_id, carrier.get("tracestate", "")))}

            def inject(self, carrier: Dict[str, str], context: Optional[Dict[str, Any]] = None) -> None:
                span = (context if context is not None else stand.current.get()).get("span")
                if span is None or not span.get_span_context().is_valid:
                    return
                sc = span.get_span_context()
                carrier["traceparent"] = f"00-{sc.trace_id}-{sc.span_id}-01"
                if sc.state:
                    carrier["tracestate"] = sc.state

        prop = types.ModuleType("opentelemetry.trace.propagation.tracecontext")
        prop.TraceContextTextMapPropagator = TraceContextTextMapPropagator  # type: ignore[attr-defined]
        root = types.ModuleType("opentelemetry")
        root.context, root.trace = ctx, tr  # type: ignore[attr-defined]
        self.modules = {"opentelemetry": root, "opentelemetry.context": ctx, "opentelemetry.trace": tr,
                        "opentelemetry.trace.propagation": types.ModuleType("opentelemetry.trace.propagation"),
                        "opentelemetry.trace.propagation.tracecontext": prop}


@pytest.fixture
def otel() -> Iterator[_Stand]:
    if "opentelemetry" in sys.modules or os.environ.get("AION_REAL_OTEL"):
        pytest.skip("a real opentelemetry package is importable; the stand-in would hide it")
    stand = _Stand()
    sys.modules.update(stand.modules)
    aion_tracing._reload()
    try:
        yield stand
    finally:
        for name in stand.modules:
            sys.modules.pop(name, None)
        aion_tracing._reload()


@run
async def test_with_opentelemetry_each_attempt_runs_in_a_span_whose_context_goes_back_with_the_result(otel: _Stand) -> None:
    current: List[Optional[_Span]] = []

    def reg(w: aion.Worker) -> None:
        @w.activity("traced")
        async def traced(_: Any) -> None:
            current.append(otel.current.get().get("span"))

        @w.activity("sync-traced")
        def sync_traced(_: Any) -> None:
            current.append(otel.current.get().get("span"))
            raise aion.ActivityError("boom", "it broke", retryable=False)

    async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS]) as r:
        c = await srv.accepted()
        await r.registered()
        await c.send(activity_task=worker_pb2.ActivityTask(
            namespace=NS, activity_id="a1", attempt=1, task_queue="default", activity_type="traced", payload=b"{}",
            trace_context=common_pb2.TraceContext(traceparent=TRACEPARENT, tracestate=TRACESTATE)))
        res = await c.result()
        await c.result_ack(res)
        await c.send(activity_task=worker_pb2.ActivityTask(
            namespace=NS, activity_id="a2", attempt=3, task_queue="default", activity_type="sync-traced",
            payload=b"{}"))
        res2 = await c.result()
        await c.result_ack(res2)
        r.worker.stop()
        await c.close_cleanly()
        await r.done()

    [s1, s2] = otel.spans
    assert (s1.name, s1.kind, s1.ended) == ("aion.attempt", "consumer", True)
    assert (s1.parent.trace_id, s1.parent.span_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    assert s1.sc.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert s1.attributes["aion.activity.id"] == "a1" and s1.attributes["aion.attempt"] == 1
    assert s1.attributes["aion.outcome"] == "completed" and s1.status is None
    assert current == [s1, s2], "each handler runs with its attempt's span current"
    assert res.trace_context.traceparent == f"00-{s1.sc.trace_id}-{s1.sc.span_id}-01"
    assert res.trace_context.tracestate == TRACESTATE
    # A task without a trace context starts a new trace; a failure marks the span.
    assert s2.parent is None and s2.attributes["aion.outcome"] == "failed"
    assert s2.attributes["aion.failure.type"] == "boom" and s2.status.code == "error"
    assert res2.trace_context.traceparent == f"00-{s2.sc.trace_id}-{s2.sc.span_id}-01"


@run
async def test_with_opentelemetry_the_client_sends_the_current_spans_context(otel: _Stand, server: Server,
                                                                             ns: str) -> None:
    span = _Span("caller", _SpanContext("a" * 32, "b" * 16), None, None, {})
    token = otel.current.set({"span": span})
    try:
        async with aion.Client(server.addr) as c:
            h = await c.schedule(ns, "traced", None)
            explicit = await c.schedule(ns, "traced", None, traceparent=TRACEPARENT)
    finally:
        otel.current.reset(token)
    assert h.activity.traceparent == f"00-{'a' * 32}-{'b' * 16}-01"
    assert explicit.activity.traceparent == TRACEPARENT, "a traceparent given wins over the current span's"
