"""The worker against a hand-written, scriptable WorkerService instead of the real server: frames
the real server never sends (a task before RegisterAck, more tasks than slots, results never
acknowledged, a type the worker never registered, the same attempt twice, interventions it
gates away), and exact frame orders (what is re-sent first after a reconnect, Drain then
half-close). They mirror worker/misbehaving_server_test.go of the Go SDK."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, List, Optional, Tuple

import grpc
import grpc.aio
import pytest

import aion
from aion import activity
from aion._gen.v1 import (common_pb2, intervention_pb2, worker_pb2, worker_pb2_grpc)
from conftest import eventually, free_port, run, running

NS = "ns"


class FakeConn:
    """One accepted stream: the worker's frames, and what the test writes back."""

    def __init__(self, register: worker_pb2.Register, context: Any) -> None:
        self.reg = register
        self.ctx = context
        self.inbox: "asyncio.Queue[Optional[worker_pb2.WorkerMessage]]" = asyncio.Queue()
        self.end: "asyncio.Future[Optional[Tuple[grpc.StatusCode, str]]]" = asyncio.get_running_loop().create_future()
        self.pings = 0

    async def send(self, **frame: Any) -> None:
        await self.ctx.write(worker_pb2.ServerMessage(**frame))

    async def ack(self, ping: float = 3600) -> None:
        from google.protobuf import duration_pb2

        await self.send(register_ack=worker_pb2.RegisterAck(
            worker_id=7, heartbeat_window=duration_pb2.Duration(seconds=60),
            ping_interval=duration_pb2.Duration(seconds=int(ping), nanos=int((ping % 1) * 1e9))))

    async def task(self, id: str, attempt: int = 1, typ: str = "echo", payload: bytes = b"{}") -> None:
        await self.send(activity_task=worker_pb2.ActivityTask(namespace=NS, activity_id=id, attempt=attempt,
                                                              task_queue="default", activity_type=typ,
                                                              payload=payload))

    async def result_ack(self, r: worker_pb2.ActivityResult, status: int = worker_pb2.RESULT_STATUS_RECORDED) -> None:
        await self.send(result_ack=worker_pb2.ResultAck(namespace=r.namespace, activity_id=r.activity_id,
                                                        attempt=r.attempt, status=status))

    async def next(self, timeout: float = 5.0) -> Optional[worker_pb2.WorkerMessage]:
        """The worker's next frame that is not a Ping; None when it half-closed."""
        while True:
            m = await asyncio.wait_for(self.inbox.get(), timeout)
            if m is not None and m.HasField("ping"):
                self.pings += 1
                continue
            return m

    async def result(self) -> worker_pb2.ActivityResult:
        m = await self.next()
        assert m is not None and m.HasField("activity_result"), f"got {m}, want an ActivityResult"
        return m.activity_result

    async def close_cleanly(self) -> None:
        """Expects Drain then the half-close from a stopping worker, and ends the stream OK."""
        m = await self.next()
        assert m is not None and m.HasField("drain"), f"got {m}, want Drain"
        m = await self.next()
        assert m is None, f"got {m}, want the half-close"
        self.finish()

    def finish(self, code: Optional[grpc.StatusCode] = None, details: str = "") -> None:
        if not self.end.done():
            self.end.set_result((code, details) if code is not None else None)


class FakeServer(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self) -> None:
        self.conns: "asyncio.Queue[FakeConn]" = asyncio.Queue()
        self.streams = 0
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.server = grpc.aio.server()
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(self, self.server)
        self.server.add_insecure_port(self.addr)

    async def __aenter__(self) -> "FakeServer":
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(0)

    async def Connect(self, request_iterator: Any, context: Any) -> None:  # noqa: N802 (the gRPC method)
        self.streams += 1
        first = await context.read()
        if first is grpc.aio.EOF:
            return
        c = FakeConn(first.register, context)

        async def reader() -> None:
            try:
                while True:
                    m = await context.read()
                    if m is grpc.aio.EOF:
                        await c.inbox.put(None)
                        return
                    await c.inbox.put(m)
            except Exception:
                await c.inbox.put(None)

        rt = asyncio.ensure_future(reader())
        await self.conns.put(c)
        try:
            end = await c.end
        finally:
            rt.cancel()
        if end is not None:
            await context.abort(end[0], end[1])

    async def accept(self, timeout: float = 5.0) -> FakeConn:
        return await asyncio.wait_for(self.conns.get(), timeout)

    async def accepted(self, ping: float = 3600) -> FakeConn:
        c = await self.accept()
        await c.ack(ping)
        return c


def echo(w: aion.Worker) -> None:
    @w.activity("echo")
    async def _echo(x: Any) -> Any:
        return x


@run
async def test_task_before_register_ack_is_a_protocol_error_that_reconnects() -> None:
    async with FakeServer() as srv, running(srv.addr, echo, namespaces=[NS]) as r:
        c1 = await srv.accept()
        await c1.task("a1")  # before RegisterAck
        assert await c1.next() is None, "want the worker to drop the stream"
        c1.finish()
        c2 = await srv.accepted()
        await r.registered()
        r.worker.stop()
        await c2.close_cleanly()
        await r.done()


@run
async def test_slots_bound_concurrency_even_if_the_server_oversends() -> None:
    cur = peak = 0
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("work")
        async def work(_: Any) -> None:
            nonlocal cur, peak
            cur += 1
            peak = max(peak, cur)
            await release.wait()
            cur -= 1

    async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS], slots=2) as r:
        c = await srv.accepted()
        await r.registered()
        for i in range(6):
            await c.task(f"a{i}", typ="work")

        async def both_busy() -> bool:
            return cur >= 2

        await eventually("both slots busy", both_busy)
        release.set()
        for _ in range(6):
            res = await c.result()
            assert res.HasField("completed"), res
            await c.result_ack(res)
        assert peak == 2, f"peak concurrency {peak}, want the 2 slots"
        r.worker.stop()
        await c.close_cleanly()
        await r.done()


@run
async def test_stop_gives_up_when_results_are_never_acknowledged() -> None:
    async with FakeServer() as srv, running(srv.addr, echo, namespaces=[NS], stop_timeout=0.02) as r:
        r.worker._ack_grace = 0.1
        c = await srv.accepted()
        await r.registered()
        await c.task("a1")
        await c.result()  # never acknowledged
        loop = asyncio.get_running_loop()
        start = loop.time()
        r.worker.stop()
        with pytest.raises(aion.WorkerGaveUp, match="1 result"):
            await r.done()
        assert loop.time() - start < 5, "want about stop_timeout + ack grace (120 ms)"


@run
async def test_task_of_an_unregistered_type_fails_without_retry() -> None:
    async with FakeServer() as srv, running(srv.addr, echo, namespaces=[NS]) as r:
        c = await srv.accepted()
        await r.registered()
        await c.task("u", typ="unknown")
        res = await c.result()
        assert res.failed.type == "activity_type_not_registered" and not res.failed.retryable, res
        await c.result_ack(res)
        r.worker.stop()
        await c.close_cleanly()
        await r.done()


@run
async def test_repeated_task_runs_once() -> None:
    calls = 0
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("once")
        async def once(_: Any) -> int:
            nonlocal calls
            calls += 1
            await release.wait()
            return calls

    async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS], slots=2) as r:
        c = await srv.accepted()
        await r.registered()
        await c.task("a", typ="once")
        await c.task("a", typ="once")  # the same attempt again while it runs
        await asyncio.sleep(0.1)
        release.set()
        res = await c.result()
        await c.task("a", typ="once")  # and while its result waits for its ack
        await asyncio.sleep(0.1)
        await c.result_ack(res)
        r.worker.stop()
        await c.close_cleanly()  # no second result before the Drain
        await r.done()
    assert calls == 1


@run
async def test_interventions_the_server_should_not_send_are_declined() -> None:
    took: List[Any] = []
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("agent")
        async def agent(_: Any) -> None:
            ivs = activity.interventions()
            get = asyncio.ensure_future(ivs.get())
            rel = asyncio.ensure_future(release.wait())
            done, pending = await asyncio.wait({get, rel}, return_when=asyncio.FIRST_COMPLETED)
            for p in pending:
                p.cancel()
            if get in done:
                took.append(get.result())

    inject = intervention_pb2.InterventionCommand(inject_message=intervention_pb2.InjectMessageCommand(text="hi"))
    pause = intervention_pb2.InterventionCommand(pause=intervention_pb2.PauseCommand())
    async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS], capabilities=["inject_message"]) as r:
        c = await srv.accepted()
        await r.registered()
        await c.task("a1", attempt=3, typ="agent")
        await asyncio.sleep(0.05)
        for id, attempt, cmd, want in [
            ("a1", 3, pause, "did not advertise the pause_resume capability"),
            ("a1", 3, intervention_pb2.InterventionCommand(), "no command"),
            ("a1", 3, None, "no command"),
            ("a1", 2, inject, "attempt ns/a1#2 is not running on this worker"),
            ("gone", 1, inject, "attempt ns/gone#1 is not running on this worker"),
        ]:
            await c.send(intervention=worker_pb2.Intervention(namespace=NS, activity_id=id, attempt=attempt,
                                                              intervention_id="iv-" + want, command=cmd))
            m = await c.next()
            assert m is not None and m.HasField("intervention_ack"), m
            ack = m.intervention_ack
            assert (ack.intervention_id, ack.activity_id, ack.attempt, ack.accepted) == ("iv-" + want, id, attempt,
                                                                                         False), ack
            assert want in ack.message, ack
        assert not took, f"the handler was handed {took}"
        release.set()
        res = await c.result()
        await c.result_ack(res)
        r.worker.stop()
        await c.close_cleanly()
        await r.done()


@run
async def test_unacknowledged_result_is_resent_first_after_a_reconnect_and_forgotten_once_answered() -> None:
    async with FakeServer() as srv, running(srv.addr, echo, namespaces=[NS]) as r:
        c1 = await srv.accepted()
        await r.registered()
        await c1.task("a1", payload=b'{"x":1}')
        first = await c1.result()
        assert first.completed.result == b'{"x":1}'
        c1.finish(grpc.StatusCode.UNAVAILABLE, "server restarting")  # the ack is lost with the stream
        c2 = await srv.accepted()
        again = await c2.result()  # right after RegisterAck, before anything else
        assert again == first
        await c2.result_ack(again, worker_pb2.RESULT_STATUS_ALREADY_RECORDED)

        async def forgotten() -> bool:
            return not r.worker._book

        await eventually("the answered result to be forgotten", forgotten)
        r.worker.stop()
        await c2.close_cleanly()
        await r.done()
        assert srv.streams == 2


@pytest.mark.parametrize("reason,returns", [
    (worker_pb2.DRAIN_REASON_OPERATOR, True),
    (worker_pb2.DRAIN_REASON_SERVER_SHUTDOWN, False),
])
def test_drain_request_finishes_work_then_half_closes(reason: int, returns: bool) -> None:
    @run
    async def body() -> None:
        release = asyncio.Event()

        def reg(w: aion.Worker) -> None:
            @w.activity("block")
            async def block(_: Any) -> str:
                await release.wait()
                return "done"

        async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS], slots=2) as r:
            c = await srv.accepted()
            await r.registered()
            await c.task("a1", typ="block")
            await asyncio.sleep(0.05)
            await c.send(drain_request=worker_pb2.DrainRequest(reason=reason))
            await c.task("a2", typ="block")  # sent before the server saw... it runs: the drain is the server's
            await asyncio.sleep(0.05)
            release.set()
            for _ in range(2):
                res = await c.result()
                assert res.completed.result == b'"done"', res
                await c.result_ack(res)
            assert await c.next() is None, "want the half-close after the acks"
            c.finish()
            if returns:
                await r.done(10)  # retired: no reconnect
                assert srv.streams == 1
            else:
                c2 = await srv.accepted()  # the server restarts: the worker comes back
                await r.registered()
                r.worker.stop()
                await c2.close_cleanly()
                await r.done()

    body()


@pytest.mark.parametrize("code,fatal", [
    (grpc.StatusCode.INVALID_ARGUMENT, True),
    (grpc.StatusCode.PERMISSION_DENIED, True),
    (grpc.StatusCode.FAILED_PRECONDITION, True),
    (grpc.StatusCode.NOT_FOUND, True),
    (grpc.StatusCode.UNAVAILABLE, False),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, False),
])
def test_only_refusals_end_run(code: grpc.StatusCode, fatal: bool) -> None:
    @run
    async def body() -> None:
        async with FakeServer() as srv, running(srv.addr, echo, namespaces=[NS]) as r:
            c = await srv.accept()
            c.finish(code, "refused: register.slots")
            if fatal:
                with pytest.raises(aion.WorkerRefused) as e:
                    await r.done(10)
                assert e.value.code == code and "register.slots" in str(e.value)
                assert srv.streams == 1
            else:
                c2 = await srv.accepted()
                await r.registered()
                r.worker.stop()
                await c2.close_cleanly()
                await r.done()

    body()


@run
async def test_pings_go_out_every_ping_interval() -> None:
    async with FakeServer() as srv, running(srv.addr, echo, namespaces=[NS]) as r:
        c = await srv.accepted(ping=0.05)
        await r.registered()
        loop = asyncio.get_running_loop()
        start = loop.time()
        pings = 0
        while pings < 5:
            m = await asyncio.wait_for(c.inbox.get(), 2)
            assert m is not None and m.HasField("ping"), m
            pings += 1
            assert m.ping.nonce == pings
        assert loop.time() - start >= 0.2, "five pings came faster than the 50 ms interval"
        r.worker.stop()
        await c.close_cleanly()
        await r.done()


@run
async def test_cancel_activity_and_refused_heartbeat_cancel_the_handler_with_their_cause() -> None:
    causes: List[Any] = []

    def reg(w: aion.Worker) -> None:
        @w.activity("block")
        async def block(_: Any) -> None:
            activity.heartbeat("started")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                causes.append(activity.cancel_cause())
                raise

    async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS], slots=2) as r:
        c = await srv.accepted()
        await r.registered()
        await c.task("c1", typ="block")
        m = await c.next()
        assert m.activity_heartbeat.details == b'"started"', m
        await c.send(cancel_activity=worker_pb2.CancelActivity(namespace=NS, activity_id="c1", attempt=1,
                                                               reason="not needed"))
        res = await c.result()
        assert res.HasField("canceled") and b"not needed" in res.canceled.details, res
        await c.result_ack(res, worker_pb2.RESULT_STATUS_STALE)
        await c.task("s1", typ="block")
        m = await c.next()
        assert m.HasField("activity_heartbeat"), m
        await c.send(heartbeat_ack=worker_pb2.HeartbeatAck(namespace=NS, activity_id="s1", attempt=1,
                                                           refused="not current"))
        res = await c.result()
        assert res.failed.type == "attempt_stale" and res.failed.retryable, res
        await c.result_ack(res, worker_pb2.RESULT_STATUS_STALE)
        assert [type(x) for x in causes] == [aion.ActivityCanceled, aion.AttemptStale], causes
        r.worker.stop()
        await c.close_cleanly()
        await r.done()


@run
async def test_a_task_arriving_while_stopping_is_handed_back_as_worker_stopping() -> None:
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("block")
        async def block(_: Any) -> str:
            await release.wait()
            return "done"

    async with FakeServer() as srv, running(srv.addr, reg, namespaces=[NS], slots=2) as r:
        c = await srv.accepted()
        await r.registered()
        await c.task("a1", typ="block")
        await asyncio.sleep(0.05)
        r.worker.stop()
        m = await c.next()
        assert m.HasField("drain"), m
        await c.task("late", typ="block")  # sent before the server read the Drain
        res = await c.result()
        assert res.activity_id == "late" and res.failed.type == "worker_stopping" and res.failed.retryable, res
        await c.result_ack(res)
        release.set()
        res = await c.result()
        assert res.activity_id == "a1" and res.completed.result == b'"done"', res
        await c.result_ack(res)
        assert await c.next() is None
        c.finish()
        await r.done()
