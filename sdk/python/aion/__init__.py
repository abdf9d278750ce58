"""aion: the Python SDK of the aion activity server.

* :class:`Client` (asyncio) and :class:`SyncClient` (blocking) schedule activities and
  follow them (schedule, batch, get, wait, list, cancel, intervene) and start, signal,
  query, wait for and cancel workflows; they also create namespaces, read them and set their
  placement and retention.
* :class:`Worker` runs activity functions: slots, pings, heartbeats with progress,
  reconnects with backoff, re-sends unacknowledged results, cancellation and pause as
  Python-native signals, interventions delivered to the running function, graceful drain
  on SIGTERM. :mod:`aion.activity` is what a running function sees of its attempt.

Built on grpcio and protobuf only; the wire contract is docs/protocol.md.
"""

from . import activity, interventions, payload
from .client import (ActivityHandle, BatchResult, Client, ScheduleOptions, ScheduleRequest, WorkflowHandle,
                     result_of)
from .errors import (ActivityCanceled, ActivityError, ActivityFailed, AionError, AttemptStale, CancelCause,
                     DeadlineExceeded, NotTerminal, RPCError, WorkerGaveUp, WorkerRefused, WorkerStopping,
                     WorkflowFailed, non_retryable)
from .interventions import Capability, Priority
from .sync import SyncClient
from .types import (Activity, ActivityPage, ActivityState, Attempt, AttemptOutcome, FailureInfo, IDReuse,
                    Namespace, RetryPolicy, Run, RunStatus, WorkerInfo)
from .worker import SDK_VERSION, Worker

__version__ = "0.1.0"

__all__ = [
    "Activity", "ActivityCanceled", "ActivityError", "ActivityFailed", "ActivityHandle", "ActivityPage",
    "ActivityState", "AionError", "Attempt", "AttemptOutcome", "AttemptStale", "BatchResult", "CancelCause",
    "Capability", "Client", "DeadlineExceeded", "FailureInfo", "IDReuse", "Namespace", "NotTerminal", "Priority",
    "RPCError", "RetryPolicy", "Run", "RunStatus", "SDK_VERSION", "ScheduleOptions", "ScheduleRequest", "SyncClient",
    "Worker", "WorkerGaveUp", "WorkerInfo", "WorkerRefused", "WorkerStopping", "WorkflowFailed", "WorkflowHandle",
    "activity", "interventions", "non_retryable", "payload", "result_of",
]
