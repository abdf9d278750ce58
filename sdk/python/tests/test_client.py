"""The client against a real server: activities, bad input, workflows (run by the Go demo
worker), and the blocking client."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Any, Dict, List, Optional

import grpc
import pytest

import aion
from aion import payload
from conftest import Proc, Server, go_worker, run, running


def echo(w: aion.Worker) -> None:
    @w.activity("echo")
    async def _echo(x: Any) -> Any:
        return x

    @w.activity("raw")
    async def _raw(x: bytes) -> bytes:
        return x[::-1]


@run
async def test_schedule_get_wait_result_list_and_cancel(server: Server, ns: str) -> None:
    async with aion.Client(server.addr) as c:
        h = await c.schedule(ns, "echo", {"hello": "world"}, id="first", priority=2, fairness_key="tenant-a")
        assert (h.id, h.namespace, h.existing) == ("first", ns, False)
        assert h.activity.state is aion.ActivityState.SCHEDULED and h.activity.priority == 2
        assert h.activity.fairness_key == "tenant-a" and h.activity.payload_value() == {"hello": "world"}
        again = await c.schedule(ns, "echo", {"hello": "world"}, id="first", priority=2, fairness_key="tenant-a")
        assert again.existing and again.id == "first"
        with pytest.raises(aion.RPCError) as e:
            await c.schedule(ns, "echo", {"hello": "other"}, id="first")
        assert e.value.code == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(aion.RPCError) as e:
            await c.wait(ns, "first", timeout=0.3)
        assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        with pytest.raises(aion.NotTerminal):
            aion.result_of(await h.get())
        async with running(server.addr, echo, namespaces=[ns]):
            assert await h.result(timeout=15) == {"hello": "world"}
            raw = await c.schedule(ns, "raw", b"\x00\x01 not json")
            assert (await raw.wait(timeout=15)).result == b"nosj ton \x01\x00"
        doomed = await c.schedule(ns, "nobody-runs-this", None, start_delay=dt.timedelta(hours=1))
        assert doomed.activity.ready_time is not None
        a = await doomed.cancel("not needed")
        assert a.state is aion.ActivityState.CANCELED and a.failure is not None and a.failure.message == "not needed"
        with pytest.raises(aion.ActivityFailed) as f:
            await doomed.result(timeout=5)
        assert f.value.failure is not None and f.value.failure.type == "canceled"
        page = await c.list(ns, page_size=2)
        assert len(page.activities) == 2 and page.next_page_token
        assert [a.id for a in page.activities][0] == doomed.id  # newest first
        every = [a async for a in c.list_all(ns, page_size=1)]
        assert {a.id for a in every} == {"first", raw.id, doomed.id}
        done = await c.list(ns, state="completed")
        assert {a.id for a in done.activities} == {"first", raw.id}
        assert all(a.payload == b"" for a in done.activities)  # left out unless asked for
        with_payloads = await c.list(ns, state=aion.ActivityState.COMPLETED, include_payloads=True)
        assert {bytes(a.payload) for a in with_payloads.activities} == {b'{"hello":"world"}', b"\x00\x01 not json"}


@run
async def test_bad_input_is_refused_naming_the_field(server: Server, ns: str) -> None:
    async with aion.Client(server.addr) as c:
        for call, field in [
            (c.schedule(ns, "bad type", None), "activity_type"),
            (c.schedule("", "echo", None), "namespace"),
            (c.schedule(ns, "echo", None, priority=9), "priority"),
            (c.schedule(ns, "echo", None, retry_policy=aion.RetryPolicy(backoff_coefficient=0.5)),
             "backoff_coefficient"),
            (c.get(ns, "no such id!"), "id"),
            (c.intervene(ns, "x", aion.interventions.update_budget()), ""),
        ]:
            with pytest.raises(aion.RPCError) as e:
                await call
            assert e.value.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), e.value
            assert field in e.value.details, e.value
        with pytest.raises(aion.RPCError) as e:
            await c.get(ns, "missing")
        assert e.value.code == grpc.StatusCode.NOT_FOUND and "missing" in str(e.value)
        with pytest.raises(ValueError, match="not JSON encodable"):
            await c.schedule(ns, "echo", object())
        with pytest.raises(ValueError, match="state"):
            await c.list(ns, state="sleeping")
        # A batch: each item succeeds or fails on its own, in request order.
        results = await c.schedule_batch([
            aion.ScheduleRequest(aion.ScheduleOptions(namespace=ns, activity_type="echo", id="b1"), 1),
            aion.ScheduleRequest(aion.ScheduleOptions(namespace=ns, activity_type="bad type"), 2),
            aion.ScheduleRequest(aion.ScheduleOptions(namespace=ns, activity_type="echo", id="b3"), 3),
        ])
        assert [r.handle.id if r.handle else None for r in results] == ["b1", None, "b3"]
        err = results[1].error
        assert err is not None and err.code == grpc.StatusCode.INVALID_ARGUMENT and "activity_type" in err.details


@run
async def test_workflows_start_signal_query_wait_and_cancel(binary: str, server: Server, ns: str,
                                                            procs: List[Proc]) -> None:
    p, _ = go_worker(binary, server, "go-demo", "--namespace", ns)
    procs.append(p)
    async with aion.Client(server.addr) as c:
        h = await c.start_workflow(ns, "order", {"order_id": "42", "amount": 12, "sleep": "10ms"}, id="order-42")
        assert (h.workflow_id, h.existing) == ("order-42", False) and h.run is not None
        assert h.run.status is aion.RunStatus.RUNNING
        again = await c.start_workflow(ns, "order", {"order_id": "42", "amount": 12, "sleep": "10ms"},
                                       id="order-42")
        assert again.existing and again.run_id == h.run_id
        for _ in range(200):
            status = await c.query_workflow(ns, "order-42", "status")
            if "ship" in str(status):
                break
            await asyncio.sleep(0.05)
        assert "ship" in str(status), status
        assert await h.signal("ship", {"carrier": "post", "tracking": "1Z"}) > 0
        run_ = await c.wait_workflow(ns, "order-42", timeout=30)
        assert run_.status is aion.RunStatus.COMPLETED, run_
        assert "1Z" in str(await h.result(timeout=5))
        other = await c.start_workflow(ns, "order", {"order_id": "43", "amount": 1}, id="order-43")
        await other.cancel("changed my mind")
        closed = await other.wait(timeout=30)
        assert closed.status is aion.RunStatus.CANCELED, closed
        with pytest.raises(aion.WorkflowFailed) as e:
            await other.result(timeout=5)
        assert e.value.run.status is aion.RunStatus.CANCELED
        runs, _ = await c.list_workflows(ns, status="completed")
        assert [r.workflow_id for r in runs] == ["order-42"]
        with pytest.raises(aion.RPCError) as rpc:
            await c.signal_workflow(ns, "order-43", "ship", {})
        assert rpc.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_sync_client_does_what_the_async_one_does(server: Server, ns: str) -> None:
    with aion.SyncClient(server.addr) as c:
        h = c.schedule(ns, "echo", [1, 2, 3], id="s1")
        assert c.get(ns, h.id).state is aion.ActivityState.SCHEDULED
        assert [a.id for a in c.list_all(ns)] == ["s1"]

        async def serve() -> None:
            async with running(server.addr, echo, namespaces=[ns]) as r:
                await r.registered()
                await asyncio.get_running_loop().run_in_executor(None, lambda: c.wait(ns, "s1", timeout=15))

        asyncio.run(serve())
        assert c.result(ns, "s1") == [1, 2, 3]
        with pytest.raises(aion.RPCError) as e:
            c.get(ns, "missing")
        assert e.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(RuntimeError, match="closed"):
        c.get(ns, "s1")


@dataclasses.dataclass
class Item:
    sku: str
    qty: int = 1


@dataclasses.dataclass
class Order:
    id: str
    items: List[Item]
    note: Optional[str] = None
    tags: Dict[str, float] = dataclasses.field(default_factory=dict)


def test_payloads_convert_to_and_from_annotated_types() -> None:
    o = Order("42", [Item("a", 2), Item("b")], tags={"x": 1.5})
    data = payload.encode(o)
    assert data == b'{"id":"42","items":[{"sku":"a","qty":2},{"sku":"b","qty":1}],"note":null,"tags":{"x":1.5}}'
    assert payload.decode(data, Order) == o
    assert payload.decode(b'{"id":"1","items":[]}', Order) == Order("1", [])
    assert payload.decode(b"", None) is None
    assert payload.decode(b"\xff", bytes) == b"\xff"
    assert payload.encode(b"\xff") == b"\xff"
    for bad, into, msg in [
        (b'{"items":[]}', Order, "field 'id' of Order is missing"),
        (b'{"id":"1","items":[{"sku":3}]}', Order, "$.items[0].sku: want str"),
        (b'"x"', int, "want an integer"),
        (b"true", int, "want an integer"),
        (b"not json", None, "not JSON"),
    ]:
        with pytest.raises(payload.PayloadError, match=msg.replace("[", r"\[").replace("$", r"\$")):
            payload.decode(bad, into)
    with pytest.raises(payload.PayloadError):
        payload.encode(float("nan"))


@run
async def test_retention_is_set_read_back_refused_out_of_range_and_restored(server: Server, ns: str) -> None:
    week = dt.timedelta(days=7)
    async with aion.Client(server.addr) as c:
        with pytest.raises(aion.RPCError) as e:
            await c.set_retention(ns, dt.timedelta(hours=1))
        assert e.value.code == grpc.StatusCode.NOT_FOUND and ns in e.value.details, e.value
        assert await c.create_namespace(ns)
        n = await c.get_namespace(ns)
        assert (n.name, n.origin, n.placement, n.nodes, n.retention) == (ns, "explicit", "unplaced", [], week)
        assert n.created_time is not None and n.created_time.tzinfo is not None
        n = await c.set_retention(ns, dt.timedelta(hours=72))
        assert (n.name, n.retention) == (ns, dt.timedelta(hours=72))
        assert (await c.get_namespace(ns)).retention == dt.timedelta(hours=72)
        assert (await c.set_retention(ns, 90)).retention == dt.timedelta(seconds=90)  # seconds
        for bad, shown in [(30, "30s"), (dt.timedelta(days=3651), "87624h0m0s"), (-60, "-1m0s")]:
            with pytest.raises(aion.RPCError) as e:
                await c.set_retention(ns, bad)
            assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT, e.value
            assert f"retention: {shown}" in e.value.details, e.value
        assert (await c.get_namespace(ns)).retention == dt.timedelta(seconds=90)  # the refusals changed nothing
        assert (await c.set_retention(ns, None)).retention == week
        assert (await c.set_retention(ns, 60)).retention == dt.timedelta(minutes=1)
        assert (await c.set_retention(ns, 0)).retention == week
        with pytest.raises(aion.RPCError) as e:
            await c.get_namespace(ns + "-never")
        assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_sync_client_creates_places_reads_and_retains_a_namespace(server: Server, ns: str) -> None:
    with aion.SyncClient(server.addr) as c:
        assert c.create_namespace(ns) is True
        assert c.create_namespace(ns) is False
        c.set_placement(ns, "prefer", ["node-a"])
        assert c.set_retention(ns, dt.timedelta(hours=1)).retention == dt.timedelta(hours=1)
        n = c.get_namespace(ns)
        assert (n.placement, n.nodes, n.retention) == ("prefer", ["node-a"], dt.timedelta(hours=1))
        with pytest.raises(aion.RPCError) as e:
            c.set_retention(ns, 1)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "retention: 1s" in e.value.details
