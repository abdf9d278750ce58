"""Errors of the aion Python SDK.

Two families:

* raised by a **handler** to say how its attempt failed: :class:`ActivityError`
  (type, message, retryability, JSON details), or any other exception, which is a
  retryable failure named after its class;
* raised **to the caller** of the client: :class:`RPCError` (the server's gRPC
  status with what the call was about) and :class:`ActivityFailed` /
  :class:`WorkflowFailed` (the activity or run ended otherwise than completed).

The causes a handler is cancelled with (:class:`ActivityCanceled`,
:class:`AttemptStale`, :class:`WorkerStopping`, :class:`DeadlineExceeded`) are
what :func:`aion.activity.cancel_cause` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import grpc

if TYPE_CHECKING:  # pragma: no cover
    from .types import Activity, FailureInfo, Run


class AionError(Exception):
    """Base class of every error this SDK raises."""


class ActivityError(AionError):
    """A failure with an explicit type, retryability and details.

    Raise one from an activity handler to control how its failure is reported; any
    other exception is reported as retryable, with its class name as the type::

        raise ActivityError("quota", "over quota", retryable=False, details={"limit": 3})

    ``details`` must be JSON-encodable; it is stored as the failure's details.
    """

    def __init__(self, type: str, message: str, *, retryable: bool = True, details: Any = None) -> None:
        super().__init__(f"{type}: {message}" if type else message)
        self.type = type
        self.message = message
        self.retryable = retryable
        self.details = details


def non_retryable(exc: BaseException) -> ActivityError:
    """Returns ``exc`` as a failure that is not retried, keeping its type and message.

    ``raise non_retryable(ValueError("bad order id"))`` fails the activity for good with
    type ``ValueError``.
    """
    if isinstance(exc, ActivityError):
        err = ActivityError(exc.type, exc.message, retryable=False, details=exc.details)
    else:
        err = ActivityError(error_type(exc), str(exc), retryable=False)
    err.__cause__ = exc
    return err


def error_type(exc: BaseException) -> str:
    """The failure type reported for an exception that is not an :class:`ActivityError`.

    A built-in exception is named by its class (``ValueError``), any other by module and
    class (``billing.QuotaError``); timeouts are ``deadline_exceeded`` as in the Go SDK.
    """
    if isinstance(exc, (TimeoutError, DeadlineExceeded)):
        return "deadline_exceeded"
    cls = type(exc)
    if cls.__module__ in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


class CancelCause(AionError):
    """Why a running handler was cancelled; :func:`aion.activity.cancel_cause` returns one."""


class ActivityCanceled(CancelCause):
    """The server gave the attempt up (the activity was cancelled, or the attempt timed out
    and the server sent CancelActivity) or a cancel intervention arrived. A handler that
    then raises is reported as canceled."""


class AttemptStale(CancelCause):
    """The server refused a heartbeat: the attempt is no longer current (it timed out or was
    retried elsewhere). Its result will be answered stale too."""


class WorkerStopping(CancelCause):
    """The worker is stopping and the attempt ran past the stop timeout (or the server's
    drain deadline); reported as a retryable ``worker_stopping`` failure."""


class DeadlineExceeded(CancelCause):
    """The attempt passed its deadline (start-to-close or schedule-to-close)."""


class RPCError(AionError):
    """A call to the server failed; ``code`` is the gRPC status code and ``details`` the
    server's message (which names the offending field and value for bad input)."""

    def __init__(self, op: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"aion client: {op}: {code.name}: {details}")
        self.op = op
        self.code = code
        self.details = details

    @classmethod
    def wrap(cls, op: str, err: grpc.RpcError) -> "RPCError":
        """Builds an RPCError from a grpc error raised by a call about ``op``."""
        code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
        details = err.details() if hasattr(err, "details") else str(err)
        return cls(op, code or grpc.StatusCode.UNKNOWN, details or "")


class ActivityFailed(AionError):
    """The activity ended failed, canceled or timed out (``activity.state`` says which);
    ``failure`` is why."""

    def __init__(self, activity: "Activity") -> None:
        f = activity.failure
        why = f"{f.type}: {f.message}" if f is not None else activity.state.value
        super().__init__(
            f"activity {activity.id!r} in {activity.namespace!r} {activity.state.value} after "
            f"{activity.attempt} attempt(s): {why}")
        self.activity = activity
        self.failure: Optional["FailureInfo"] = f


class WorkflowFailed(AionError):
    """The run closed otherwise than completed; ``run.status`` says how."""

    def __init__(self, run: "Run") -> None:
        f = run.failure
        why = f"{f.type}: {f.message}" if f is not None else run.status.value
        super().__init__(f"workflow {run.workflow_id!r} in {run.namespace!r} {run.status.value}: {why}")
        self.run = run
        self.failure: Optional["FailureInfo"] = f


class NotTerminal(AionError):
    """The activity or run has not finished yet."""


class WorkerRefused(AionError):
    """The server refused the worker (bad registration, permission, unknown namespace,
    placement): retrying would not help, so :meth:`aion.Worker.run` raises it."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"aion worker: the server refused the worker: {code.name}: {details}")
        self.code = code
        self.details = details


class WorkerGaveUp(AionError):
    """A stopping worker ran out of time: attempts still running or results not yet
    acknowledged by the server."""
