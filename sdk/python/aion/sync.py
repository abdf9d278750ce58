"""A blocking client for code that is not asyncio: the :class:`aion.Client` API, each call
run to completion on an event loop the client keeps in a thread of its own.

::

    with aion.SyncClient("127.0.0.1:50051") as client:
        h = client.schedule("demo", "echo", {"hello": "world"})
        print(client.result("demo", h.id))

It is safe to use from several threads at once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import Any, Coroutine, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from . import interventions as _iv
from .client import ActivityHandle, BatchResult, Client, ScheduleOptions, ScheduleRequest, WorkflowHandle
from .types import Activity, ActivityPage, ActivityState, Duration, IDReuse, Namespace, Run, RunStatus, WorkerInfo

T = TypeVar("T")


class SyncClient:
    """A blocking aion client; the arguments are those of :class:`aion.Client`. Handles it
    returns are the async ones: pass their ids back to its methods."""

    def __init__(self, address: str, *, token: Optional[str] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 channel_options: Sequence[Tuple[str, object]] = ()) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aion-client", daemon=True)
        self._thread.start()
        self._closed = False

        async def make() -> Client:
            return Client(address, token=token, credentials=credentials, channel_options=channel_options)

        self._client = self._run(make())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("aion client: the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Closes the connection and stops the client's thread."""
        if self._closed:
            return
        self._run(self._client.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def async_client(self) -> Client:
        """The asyncio client underneath (its coroutines run on this client's loop only)."""
        return self._client

    def schedule(self, namespace: str, activity_type: str, input: Any = None, *, timeout: Optional[float] = None,
                 **options: Any) -> ActivityHandle:
        """See :meth:`aion.Client.schedule`."""
        return self._run(self._client.schedule(namespace, activity_type, input, timeout=timeout, **options))

    def schedule_with(self, opts: ScheduleOptions, input: Any = None, *,
                      timeout: Optional[float] = None) -> ActivityHandle:
        """See :meth:`aion.Client.schedule_with`."""
        return self._run(self._client.schedule_with(opts, input, timeout=timeout))

    def schedule_batch(self, requests: Sequence[ScheduleRequest], *,
                       timeout: Optional[float] = None) -> List[BatchResult]:
        """See :meth:`aion.Client.schedule_batch`."""
        return self._run(self._client.schedule_batch(requests, timeout=timeout))

    def get(self, namespace: str, id: str, *, timeout: Optional[float] = None) -> Activity:
        """See :meth:`aion.Client.get`."""
        return self._run(self._client.get(namespace, id, timeout=timeout))

    def wait(self, namespace: str, id: str, *, timeout: Optional[float] = None) -> Activity:
        """See :meth:`aion.Client.wait`."""
        return self._run(self._client.wait(namespace, id, timeout=timeout))

    def result(self, namespace: str, id: str, *, into: Any = None, timeout: Optional[float] = None) -> Any:
        """See :meth:`aion.Client.result`."""
        return self._run(self._client.result(namespace, id, into=into, timeout=timeout))

    def cancel(self, namespace: str, id: str, reason: str = "", *, timeout: Optional[float] = None) -> Activity:
        """See :meth:`aion.Client.cancel`."""
        return self._run(self._client.cancel(namespace, id, reason, timeout=timeout))

    def list(self, namespace: str, *, state: Union[ActivityState, str, None] = None, activity_type: str = "",
             page_size: int = 0, page_token: str = "", include_payloads: bool = False) -> ActivityPage:
        """See :meth:`aion.Client.list`."""
        return self._run(self._client.list(namespace, state=state, activity_type=activity_type, page_size=page_size,
                                           page_token=page_token, include_payloads=include_payloads))

    def list_all(self, namespace: str, **filters: Any) -> Iterator[Activity]:
        """See :meth:`aion.Client.list_all`."""
        token = filters.pop("page_token", "")
        while True:
            page = self.list(namespace, page_token=token, **filters)
            yield from page.activities
            if not page.next_page_token or page.next_page_token == token:
                return
            token = page.next_page_token

    def intervene(self, namespace: str, id: str, command: _iv.Command, *, attempt: int = 0,
                  timeout: Optional[float] = None) -> _iv.Result:
        """See :meth:`aion.Client.intervene`."""
        return self._run(self._client.intervene(namespace, id, command, attempt=attempt, timeout=timeout))

    def start_workflow(self, namespace: str, workflow_type: str, input: Any = None, *, id: str = "",
                       task_queue: str = "", id_reuse: Optional[IDReuse] = None,
                       start_delay: Optional[Duration] = None, start_at: Optional[dt.datetime] = None,
                       priority: int = 0) -> WorkflowHandle:
        """See :meth:`aion.Client.start_workflow`."""
        return self._run(self._client.start_workflow(namespace, workflow_type, input, id=id, task_queue=task_queue,
                                                     id_reuse=id_reuse, start_delay=start_delay, start_at=start_at,
                                                     priority=priority))

    def signal_workflow(self, namespace: str, workflow_id: str, name: str, input: Any = None,
                        run_id: str = "") -> int:
        """See :meth:`aion.WorkflowHandle.signal`."""
        return self._run(self._client.signal_workflow(namespace, workflow_id, name, input, run_id))

    def query_workflow(self, namespace: str, workflow_id: str, name: str, input: Any = None, run_id: str = "",
                       into: Any = None) -> Any:
        """See :meth:`aion.WorkflowHandle.query`."""
        return self._run(self._client.query_workflow(namespace, workflow_id, name, input, run_id, into))

    def wait_workflow(self, namespace: str, workflow_id: str, run_id: str = "",
                      timeout: Optional[float] = None) -> Run:
        """See :meth:`aion.WorkflowHandle.wait`."""
        return self._run(self._client.wait_workflow(namespace, workflow_id, run_id, timeout))

    def workflow_result(self, namespace: str, workflow_id: str, run_id: str = "", into: Any = None,
                        timeout: Optional[float] = None) -> Any:
        """See :meth:`aion.WorkflowHandle.result`."""
        return self._run(self._client.workflow(namespace, workflow_id, run_id).result(into, timeout))

    def cancel_workflow(self, namespace: str, workflow_id: str, reason: str = "", run_id: str = "") -> Run:
        """See :meth:`aion.WorkflowHandle.cancel`."""
        return self._run(self._client.cancel_workflow(namespace, workflow_id, reason, run_id))

    def list_workflows(self, namespace: str, *, status: Union[RunStatus, str, None] = None,
                       workflow_type: str = "", page_size: int = 0, page_token: str = "") -> Tuple[List[Run], str]:
        """See :meth:`aion.Client.list_workflows`."""
        return self._run(self._client.list_workflows(namespace, status=status, workflow_type=workflow_type,
                                                     page_size=page_size, page_token=page_token))

    def create_namespace(self, name: str) -> bool:
        """See :meth:`aion.Client.create_namespace`."""
        return self._run(self._client.create_namespace(name))

    def get_namespace(self, name: str, *, timeout: Optional[float] = None) -> Namespace:
        """See :meth:`aion.Client.get_namespace`."""
        return self._run(self._client.get_namespace(name, timeout=timeout))

    def set_placement(self, name: str, mode: str, nodes: Sequence[str] = ()) -> None:
        """See :meth:`aion.Client.set_placement`."""
        self._run(self._client.set_placement(name, mode, nodes))

    def set_retention(self, name: str, retention: Optional[Duration], *,
                      timeout: Optional[float] = None) -> Namespace:
        """See :meth:`aion.Client.set_retention`."""
        return self._run(self._client.set_retention(name, retention, timeout=timeout))

    def list_workers(self, namespace: str = "") -> List[WorkerInfo]:
        """See :meth:`aion.Client.list_workers`."""
        return self._run(self._client.list_workers(namespace))

    def drain_worker(self, worker_id: int) -> WorkerInfo:
        """See :meth:`aion.Client.drain_worker`."""
        return self._run(self._client.drain_worker(worker_id))
