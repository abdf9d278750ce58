"""W3C trace context in the Python SDK, and OpenTelemetry when it is installed.

aion carries a W3C trace context (``traceparent`` and ``tracestate``) with each activity and
run, from the client that scheduled it, through the server, to the worker that runs each
attempt (docs/protocol.md, Tracing). The SDK passes it on whether or not OpenTelemetry is
installed:

* the client sends the ``traceparent`` (and ``tracestate``) given to
  :meth:`aion.Client.schedule`, :class:`aion.client.ScheduleOptions` or
  :meth:`aion.Client.start_workflow`; given none, it sends the current OpenTelemetry span's
  context when the ``opentelemetry`` package is importable;
* the worker hands the task's trace context to the handler as
  :attr:`aion.activity.ActivityInfo.traceparent` and ``tracestate``.

Spans are made only through the OpenTelemetry API, and only when ``opentelemetry`` is
importable: the worker then runs each attempt in a span ``aion.attempt`` (kind consumer),
child of the task's trace context, current while the handler runs (so the handler's own
spans are its children), and sends the span's context with the result, so the server's
span for recording the result is its child. Without an SDK configured (a tracer provider
set), the API's spans record nothing and cost little. Without the package nothing here
imports it and nothing is traced.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

_lock = threading.Lock()
_loaded = False
_otel: Optional[Any] = None  # a namespace of the OpenTelemetry modules, or None


class _Modules:
    """The OpenTelemetry API modules the SDK uses."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context = context
        self.trace = trace
        self.propagator = TraceContextTextMapPropagator()


def otel() -> Optional[_Modules]:
    """The OpenTelemetry API when the ``opentelemetry`` package is importable, else None. The
    import is tried once, on first use."""
    global _loaded, _otel
    with _lock:
        if not _loaded:
            try:
                _otel = _Modules()
            except ImportError:
                _otel = None
            _loaded = True
        return _otel


def _reload() -> None:
    """Forgets the outcome of the import, for tests that install a stand-in package."""
    global _loaded, _otel
    with _lock:
        _loaded, _otel = False, None


def current() -> Tuple[str, str]:
    """The traceparent and tracestate of the current OpenTelemetry span; empty strings when
    OpenTelemetry is not importable or no valid span is current."""
    o = otel()
    if o is None:
        return "", ""
    carrier: Dict[str, str] = {}
    o.propagator.inject(carrier)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


def wire(traceparent: str, tracestate: str) -> Tuple[str, str]:
    """The trace context to send with a request: the one given, else the current span's."""
    if traceparent or tracestate:
        return traceparent, tracestate
    return current()


class AttemptSpan:
    """The span of one attempt, while its handler runs."""

    def __init__(self, o: _Modules, span: Any) -> None:
        self._o = o
        self.span = span

    def attach(self) -> Any:
        """Makes the span current in this thread or task; returns the token for :meth:`detach`."""
        return self._o.context.attach(self._o.trace.set_span_in_context(self.span))

    def detach(self, token: Any) -> None:
        """Undoes :meth:`attach`."""
        self._o.context.detach(token)

    def trace_context(self) -> Tuple[str, str]:
        """The span's traceparent and tracestate (empty when the span is not valid)."""
        carrier: Dict[str, str] = {}
        self._o.propagator.inject(carrier, context=self._o.trace.set_span_in_context(self.span))
        return carrier.get("traceparent", ""), carrier.get("tracestate", "")

    def end(self, outcome: str, failure_type: str = "", message: str = "") -> None:
        """Ends the span with the attempt's outcome: completed, failed or canceled."""
        self.span.set_attribute("aion.outcome", outcome)
        if outcome == "failed":
            self.span.set_attribute("aion.failure.type", failure_type)
            self.span.set_status(self._o.trace.Status(self._o.trace.StatusCode.ERROR, message))
        self.span.end()


def start_attempt(tracer_provider: Any, version: str, traceparent: str, tracestate: str,
                  attributes: Dict[str, Any]) -> Optional[AttemptSpan]:
    """Starts an attempt's span, child of the task's trace context (a new trace when it has
    none), from ``tracer_provider`` or else the global one, as instrumentation ``aion.worker``
    of ``version``; None when OpenTelemetry is not importable."""
    o = otel()
    if o is None:
        return None
    carrier = {"traceparent": traceparent, "tracestate": tracestate} if traceparent else {}
    parent = o.propagator.extract(carrier)
    provider = tracer_provider if tracer_provider is not None else o.trace.get_tracer_provider()
    tracer = provider.get_tracer("aion.worker", version)
    span = tracer.start_span("aion.attempt", context=parent, kind=o.trace.SpanKind.CONSUMER, attributes=attributes)
    return AttemptSpan(o, span)


__all__ = ["current", "wire", "otel", "start_attempt", "AttemptSpan"]
