"""The worker against a real server process: the cases of the Go SDK's worker/run_test.go and
intervention_test.go, for the Python SDK."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import threading
import time
from typing import Any, Dict, List, Optional

import grpc
import pytest

import aion
from aion import activity
from aion import interventions as iv
from conftest import Proxy, Server, eventually, ran_on, run, running

QUICK = aion.RetryPolicy(initial_interval=0.005, maximum_interval=0.005)


async def until(c: aion.Client, ns: str, id: str, what: str, cond: Any, timeout: float = 15) -> aion.Activity:
    got: List[aion.Activity] = []

    async def check() -> bool:
        a = await c.get(ns, id)
        got[:] = [a]
        return bool(cond(a))

    await eventually(f"{id} {what}", check, timeout)
    return got[0]


def echo(w: aion.Worker) -> None:
    @w.activity("echo")
    async def _echo(x: Any) -> Any:
        return x


@run
async def test_register_carries_the_workers_options(server: Server, ns: str) -> None:
    a, b = ns + "-a", ns + "-b"
    async with aion.Client(server.addr) as c, running(server.addr, echo, namespaces=[a, b], task_queue="gpu",
                                                      node="n1", slots=3, identity="me",
                                                      capabilities=["cancel"]) as r:
        wid = await r.registered()
        [w] = [w for w in await c.list_workers(a) if w.id == wid]
        assert (w.namespaces, w.task_queue, w.node, w.slots, w.activity_types, w.identity, w.sdk_version) == (
            [a, b], "gpu", "n1", 3, ["echo"], "me", aion.SDK_VERSION), w
        await r.stop()
    assert server.disconnect_reason(wid) == "drained"


@dataclasses.dataclass
class AddIn:
    a: int
    b: int


@dataclasses.dataclass
class AddOut:
    sum: int
    by: str


@run
async def test_task_completes_with_the_typed_result(server: Server, ns: str) -> None:
    def reg(w: aion.Worker) -> None:
        @w.activity("add")
        async def add(x: AddIn) -> AddOut:
            return AddOut(sum=x.a + x.b, by=activity.info().activity_id)

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], task_queue="math") as r:
        wid = await r.registered()
        h = await c.schedule(ns, "add", AddIn(2, 3), task_queue="math")
        out = await h.result(into=AddOut, timeout=15)
        assert out == AddOut(sum=5, by=h.id)
        a = await h.get()
        assert [(t.worker_id, t.outcome) for t in a.attempts] == [(wid, aion.AttemptOutcome.COMPLETED)]


@run
async def test_info_and_heartbeat_details_reach_the_handler(server: Server, ns: str) -> None:
    infos: List[activity.ActivityInfo] = []
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("resume")
        async def resume(_: None) -> int:
            infos.append(activity.info())
            done = activity.heartbeat_details(into=dict, default=None)
            if done is None:  # first attempt: report progress, then fail so that the retry resumes
                activity.heartbeat({"done": 41})
                await release.wait()
                raise RuntimeError("transient")
            return int(done["done"]) + 1

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], node="n1",
                                                      task_queue="q") as r:
        wid = await r.registered()
        h = await c.schedule(ns, "resume", None, task_queue="q", node="n1", start_to_close_timeout=60,
                             heartbeat_timeout=10, retry_policy=QUICK)
        await until(c, ns, h.id, "shows the heartbeat", lambda a: a.heartbeat_value() == {"done": 41})
        release.set()
        assert await h.result(timeout=15) == 42
        a = await h.get()
    assert len(infos) == 2
    for i, info in enumerate(infos):
        assert (info.namespace, info.activity_id, info.attempt, info.task_queue, info.activity_type, info.node,
                info.worker_id) == (ns, h.id, i + 1, "q", "resume", "n1", wid), info
        assert info.start_to_close_timeout == dt.timedelta(seconds=60)
        assert info.heartbeat_timeout == dt.timedelta(seconds=10)
        assert info.deadline is not None and info.started_time is not None
        assert info.deadline - info.started_time == dt.timedelta(seconds=60)
        assert info.started_time == a.attempts[i].started_time
    assert a.attempts[0].failure is not None and a.attempts[0].failure.type == "RuntimeError"


@run
async def test_heartbeats_are_throttled_and_the_server_keeps_the_last_details(server: Server, ns: str) -> None:
    sent = asyncio.Event()
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("progress")
        async def progress(_: None) -> int:
            for i in range(1, 51):
                activity.heartbeat(i)
            sent.set()
            await release.wait()
            return 50

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns]):
        # With a 4 s heartbeat timeout heartbeats are throttled to one a second.
        h = await c.schedule(ns, "progress", None, heartbeat_timeout=4)
        await sent.wait()
        first = await until(c, ns, h.id, "shows a heartbeat", lambda a: a.last_heartbeat_details)
        seen = time.monotonic()
        assert first.heartbeat_value() == 1, "the rest held back by the throttle"
        await until(c, ns, h.id, "shows the last details", lambda a: a.heartbeat_value() == 50)
        assert time.monotonic() - seen >= 0.5, "want the last details held back about a second"
        release.set()
        assert await h.result(timeout=15) == 50


class QuotaError(Exception):
    """An application's exception: its module and name become the failure type."""


@run
async def test_handler_errors_become_failures(server: Server, ns: str) -> None:
    def reg(w: aion.Worker) -> None:
        @w.activity("plain")
        async def plain(_: Any) -> None:
            raise ValueError("boom")

        @w.activity("typed")
        async def typed(_: Dict[str, int]) -> None:
            raise aion.ActivityError("quota", "over quota", retryable=False, details={"limit": 3})

        @w.activity("listed")
        async def listed(_: Any) -> None:
            raise aion.ActivityError("flaky", "listed as non-retryable by the policy")

        @w.activity("exported")
        async def exported(_: Any) -> None:
            raise aion.non_retryable(QuotaError("code 7"))

        @w.activity("unencodable")
        async def unencodable(_: Any) -> object:
            return object()

        @w.activity("recovers")
        async def recovers(_: Any) -> str:
            if activity.info().attempt == 1:
                raise RuntimeError("first try fails")
            return "ok"

        @w.activity("sync_fails")
        def sync_fails(_: Any) -> None:
            raise KeyError("missing")

    two = aion.RetryPolicy(initial_interval=0.005, maximum_attempts=2, non_retryable_error_types=["flaky"])
    cases = [
        # type, payload, state, failure types of the attempts ("" completed), retryable, message
        ("plain", {}, aion.ActivityState.FAILED, ["ValueError", "ValueError"], True, "boom"),
        ("typed", {}, aion.ActivityState.FAILED, ["quota"], False, "over quota"),
        ("listed", {}, aion.ActivityState.FAILED, ["flaky"], True, "listed"),
        ("exported", {}, aion.ActivityState.FAILED, ["test_worker.QuotaError"], False, "code 7"),
        ("typed", "text", aion.ActivityState.FAILED, ["payload_decode_error"], False, "decode payload"),
        ("unencodable", {}, aion.ActivityState.FAILED, ["result_encode_error"], False, "encode result"),
        ("recovers", {}, aion.ActivityState.COMPLETED, ["RuntimeError", ""], True, "first try"),
        ("sync_fails", {}, aion.ActivityState.FAILED, ["KeyError", "KeyError"], True, "missing"),
    ]
    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], slots=8):
        handles = [await c.schedule(ns, typ, payload, retry_policy=two) for typ, payload, *_ in cases]
        for h, (typ, payload, state, failures, retryable, message) in zip(handles, cases):
            a = await h.wait(timeout=15)
            assert a.state is state and len(a.attempts) == len(failures), (typ, a)
            for at, want in zip(a.attempts, failures):
                if not want:
                    assert at.outcome is aion.AttemptOutcome.COMPLETED and at.failure is None, (typ, at)
                    continue
                f = at.failure
                assert f is not None and f.type == want and f.retryable == retryable and message in f.message, (
                    typ, payload, f)
        typed = await handles[1].get()
        assert typed.failure is not None and typed.failure.details_value() == {"limit": 3}
        plain = await handles[0].get()
        assert plain.failure is not None and "Traceback" in plain.failure.details_value()


@run
async def test_slots_bound_concurrency(server: Server, ns: str) -> None:
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

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], slots=2):
        hs = [await c.schedule(ns, "work", None) for _ in range(6)]

        async def busy() -> bool:
            return cur >= 2

        await eventually("both slots busy", busy)
        await asyncio.sleep(0.1)
        release.set()
        for h in hs:
            assert (await h.wait(timeout=15)).state is aion.ActivityState.COMPLETED
    assert peak == 2


@pytest.mark.parametrize("how,accepted", [("Cancel", False), ("cancel intervention", True)])
def test_cancellations_reach_the_handler(server: Server, ns: str, how: str, accepted: bool) -> None:
    @run
    async def body() -> None:
        causes: List[Any] = []

        def reg(w: aion.Worker) -> None:
            @w.activity("block")
            async def block(_: Any) -> None:
                activity.heartbeat("started")
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    causes.append(activity.cancel_cause())
                    raise

        async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns],
                                                          capabilities=["cancel"]):
            h = await c.schedule(ns, "block", None)
            await until(c, ns, h.id, "runs", lambda a: a.last_heartbeat_details)
            if how == "Cancel":
                await h.cancel("not needed")
            else:
                res = await h.intervene(iv.cancel("not needed"))
                assert res.delivered, res
            a = await h.wait(timeout=15)
            assert a.state is aion.ActivityState.CANCELED and a.attempts[0].outcome is aion.AttemptOutcome.CANCELED, a
        assert len(causes) == 1 and isinstance(causes[0], aion.ActivityCanceled) and "not needed" in str(causes[0])

    body()


@run
async def test_interventions_reach_the_handler_which_acknowledges_them(server: Server, ns: str) -> None:
    got: List[activity.Intervention] = []
    done = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("agent")
        async def agent(_: Any) -> List[str]:
            activity.heartbeat("started")
            ivs = activity.interventions()
            while len(got) < 3:
                x = await ivs.get()
                got.append(x)
                if x.kind == "respond_to_approval":
                    x.decline("no call awaits approval")
                else:
                    x.accept()
            await done.wait()
            return [x.kind for x in got]

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], capabilities=[
            "inject_message", "update_budget", "respond_to_approval"]):
        h = await c.schedule(ns, "agent", None)
        await until(c, ns, h.id, "runs", lambda a: a.last_heartbeat_details)
        results = [await h.intervene(cmd) for cmd in (
            iv.inject_message("use metric units", iv.Priority.INTERRUPT), iv.update_budget(max_turns=5),
            iv.respond_to_approval("call-1", True, "ok"))]
        assert all(r.delivered and r.attempt == 1 and r.intervention_id for r in results), results
        # An outcome that is not delivery: the worker did not advertise pause_resume.
        assert (await h.intervene(iv.pause())).outcome is iv.Outcome.CAPABILITY_NOT_SUPPORTED
        # Another attempt than the current one.
        assert (await h.intervene(iv.inject_message("x"), attempt=2)).outcome is iv.Outcome.STALE_TARGET
        done.set()
        assert await h.result(timeout=15) == ["inject_message", "update_budget", "respond_to_approval"]
        assert (await h.intervene(iv.inject_message("late"))).outcome is iv.Outcome.STALE_TARGET
        with pytest.raises(aion.RPCError) as e:
            await h.intervene(iv.inject_message(""))
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "text" in e.value.details

        async def acked() -> bool:
            return all(server.intervention_ack(r.intervention_id) is not None for r in results)

        await eventually("the acks in the server's log", acked)
    assert got[0].message == activity.InjectedMessage("use metric units", iv.Priority.INTERRUPT)
    assert got[1].budget == activity.BudgetUpdate(max_tokens=None, max_turns=5)
    assert got[2].approval == activity.ApprovalResponse("call-1", True, "ok")
    assert [server.intervention_ack(r.intervention_id) for r in results] == [
        (True, ""), (True, ""), (False, "no call awaits approval")]


@run
async def test_interventions_the_handler_leaves_are_declined(server: Server, ns: str) -> None:
    took = asyncio.Event()
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("agent")
        async def agent(_: Any) -> None:
            activity.heartbeat("started")
            await activity.interventions().get()  # taken, never acknowledged
            took.set()
            await release.wait()

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns],
                                                      capabilities=["inject_message"]) as r:
        h = await c.schedule(ns, "agent", None)
        await until(c, ns, h.id, "runs", lambda a: a.last_heartbeat_details)
        first = await h.intervene(iv.inject_message("one"))
        await took.wait()
        second = await h.intervene(iv.inject_message("two"))  # never taken

        async def waiting() -> bool:
            return any(a._iv_queue for a in r.worker._running.values())

        await eventually("the second intervention to wait for the handler", waiting)
        release.set()
        await h.wait(timeout=15)

        async def acked() -> bool:
            return all(server.intervention_ack(r.intervention_id) for r in (first, second))

        await eventually("the acks in the server's log", acked)
    assert server.intervention_ack(first.intervention_id) == (
        False, "the handler took the intervention but returned without acknowledging it")
    assert server.intervention_ack(second.intervention_id) == (
        False, "the attempt ended before the handler took the intervention")


@run
async def test_pause_holds_the_handler_at_wait_while_paused_and_keeps_its_heartbeats(server: Server, ns: str) -> None:
    def reg(w: aion.Worker) -> None:
        @w.activity("loop")
        async def loop(_: Any) -> Dict[str, Any]:
            paused = 0.0
            for turn in range(3):
                paused += await activity.wait_while_paused()
                activity.heartbeat({"turn": turn})
                await asyncio.sleep(0.1)
            return {"paused": paused}

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns],
                                                      capabilities=["pause_resume"]):
        # A 1 s heartbeat timeout: a pause of 2 s without heartbeats would time the attempt out.
        h = await c.schedule(ns, "loop", None, heartbeat_timeout=1)
        await until(c, ns, h.id, "runs", lambda a: a.last_heartbeat_details)
        assert (await h.intervene(iv.pause())).delivered
        await asyncio.sleep(2)
        a = await h.get()
        assert a.state is aion.ActivityState.RUNNING and a.attempt == 1, a
        assert (await h.intervene(iv.resume())).delivered
        out = await h.result(timeout=15)
        a = await h.get()
    assert out["paused"] >= 1.8, out
    assert len(a.attempts) == 1


@run
async def test_graceful_stop_finishes_in_flight_work_and_takes_no_more(server: Server, ns: str) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("block")
        async def block(_: Any) -> str:
            started.set()
            await release.wait()
            return "done"

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], slots=2) as r:
        wid = await r.registered()
        first = await c.schedule(ns, "block", None)
        await started.wait()
        r.worker.stop()  # as SIGTERM would

        async def draining() -> bool:
            return any(w.id == wid and w.draining for w in await c.list_workers(ns))

        await eventually("the worker to drain", draining)
        second = await c.schedule(ns, "block", None)

        def other(w: aion.Worker) -> None:
            @w.activity("block")
            async def block(_: Any) -> str:
                return "elsewhere"

        async with running(server.addr, other, namespaces=[ns]) as r2:
            oid = await r2.registered()
            a = await second.wait(timeout=15)
            assert a.state is aion.ActivityState.COMPLETED and [t.worker_id for t in a.attempts] == [oid], a
        release.set()
        await r.done()
        a = await first.get()
        assert a.state is aion.ActivityState.COMPLETED and a.result_value() == "done", a
    assert server.disconnect_reason(wid) == "drained"


@run
async def test_stop_timeout_cancels_handlers_as_retryable_worker_stopping(server: Server, ns: str) -> None:
    causes: List[Any] = []
    started = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("block")
        async def block(_: Any) -> None:
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                causes.append(activity.cancel_cause())
                raise

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], stop_timeout=0.05) as r:
        h = await c.schedule(ns, "block", None)
        await started.wait()
        await r.stop()
        a = await h.get()
    assert len(causes) == 1 and isinstance(causes[0], aion.WorkerStopping), causes
    assert a.state is aion.ActivityState.SCHEDULED and len(a.attempts) == 1, a
    f = a.attempts[0].failure
    assert f is not None and f.type == "worker_stopping" and f.retryable, f


@run
async def test_a_sync_handler_runs_in_a_thread_and_polls_its_cancellation(server: Server, ns: str) -> None:
    threads: List[str] = []

    def reg(w: aion.Worker) -> None:
        @w.activity("count")
        def count(n: int) -> int:
            threads.append(threading.current_thread().name)
            for i in range(n):
                activity.heartbeat(i)
                time.sleep(0.01)
            return n

        @w.activity("poll")
        def poll(_: Any) -> None:
            activity.heartbeat("started")
            while not activity.is_cancelled():
                time.sleep(0.01)
            activity.raise_if_cancelled()

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns], slots=2):
        assert await (await c.schedule(ns, "count", 5)).result(timeout=15) == 5
        h = await c.schedule(ns, "poll", None)
        await until(c, ns, h.id, "runs", lambda a: a.last_heartbeat_details)
        await h.cancel("stop polling")
        a = await h.wait(timeout=15)
        assert a.state is aion.ActivityState.CANCELED
    assert threads and threads[0].startswith("aion-activity"), threads


def test_server_drain_finishes_work_then_reconnects_to_the_restarted_server(new_server: Any, ns: str) -> None:
    srv: Server = new_server("--drain-timeout", "10s")

    @run
    async def body() -> None:
        started = asyncio.Event()
        release = asyncio.Event()
        calls = 0

        def reg(w: aion.Worker) -> None:
            @w.activity("block")
            async def block(n: int) -> int:
                nonlocal calls
                calls += 1
                if n == 1:
                    started.set()
                    await release.wait()
                return n * 10

        async with running(srv.addr, reg, namespaces=[ns], slots=2) as r:
            await r.registered()
            async with aion.Client(srv.addr) as c:
                first = await c.schedule(ns, "block", 1)
                await started.wait()
            loop = asyncio.get_running_loop()
            stopped = loop.run_in_executor(None, srv.stop)
            await asyncio.sleep(0.3)
            assert not stopped.done(), "the server exited with work in flight"
            release.set()
            assert await stopped == 0
            srv.start()  # same address, same data: the worker comes back by itself
            await r.registered()
            async with aion.Client(srv.addr) as c:
                a = await c.get(ns, first.id)
                assert a.state is aion.ActivityState.COMPLETED and a.result_value() == 10 and len(a.attempts) == 1
                assert await (await c.schedule(ns, "block", 2)).result(timeout=15) == 20
            assert not r.task.done(), "run returned after a server's drain; want it to reconnect"
            await r.stop()
        assert calls == 2

    body()


def test_server_drain_with_exit_on_drain_returns(new_server: Any, ns: str) -> None:
    srv: Server = new_server()

    @run
    async def body() -> None:
        async with running(srv.addr, echo, namespaces=[ns], exit_on_drain=True) as r:
            await r.registered()
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, srv.stop) == 0
            await r.done(10)

    body()


@run
async def test_operator_drain_retires_the_worker_after_its_work(server: Server, ns: str) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("block")
        async def block(_: Any) -> str:
            started.set()
            await release.wait()
            return "done"

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns]) as r:
        wid = await r.registered()
        h = await c.schedule(ns, "block", None)
        await started.wait()
        await c.drain_worker(wid)
        await asyncio.sleep(0.1)
        assert not r.task.done(), "run returned with work in flight"
        release.set()
        await r.done(15)  # retired: run returns, no reconnect
        assert (await h.get()).state is aion.ActivityState.COMPLETED
    assert server.disconnect_reason(wid) == "drained"


def test_refused_registration_ends_run(new_server: Any, ns: str) -> None:
    srv: Server = new_server()
    closed: Server = new_server("--auto-create", "closed")

    @run
    async def body() -> None:
        async with aion.Client(srv.addr) as c:
            await c.create_namespace("gpu-only")
            await c.set_placement("gpu-only", "pinned", ["gpu-a"])
        for server, opts, typ, code, contains in [
            (srv, dict(namespaces=[ns, "gpu-only"], node="cpu-1"), "echo", grpc.StatusCode.FAILED_PRECONDITION,
             "gpu-only"),
            (closed, dict(namespaces=["ghost"]), "echo", grpc.StatusCode.NOT_FOUND, '"ghost"'),
            (srv, dict(namespaces=[ns]), "bad type", grpc.StatusCode.INVALID_ARGUMENT, "activity_types[0]"),
            (srv, dict(namespaces=[ns], slots=20000), "echo", grpc.StatusCode.INVALID_ARGUMENT, "slots"),
        ]:
            def reg(w: aion.Worker, typ: str = typ) -> None:
                w.register_activity(typ, lambda x: x)

            async with running(server.addr, reg, **opts) as r:
                with pytest.raises(aion.WorkerRefused) as e:
                    await r.done(15)
                assert e.value.code == code and contains in e.value.details, (opts, e.value)
        async with aion.Client(srv.addr) as c:
            assert await c.list_workers() == []

    body()


@run
async def test_unacknowledged_result_is_resent_after_the_connection_dies(server: Server, ns: str) -> None:
    calls = 0
    started = asyncio.Event()
    release = asyncio.Event()

    def reg(w: aion.Worker) -> None:
        @w.activity("count")
        async def count(_: Any) -> int:
            nonlocal calls
            calls += 1
            if calls == 1:
                started.set()
                await release.wait()
            return activity.info().attempt

    async with Proxy(server.addr) as proxy, aion.Client(server.addr) as c:
        async with running(proxy.addr, reg, namespaces=[ns]) as r:
            await r.registered()
            h = await c.schedule(ns, "count", None, retry_policy=QUICK)
            await started.wait()
            proxy.cut()  # the server fails the attempt as worker_lost and retries it here
            release.set()  # the first result goes out on the next stream, and is answered stale
            assert await h.result(timeout=30) == 2
            a = await h.get()

            async def forgotten() -> bool:
                return not r.worker._book

            await eventually("every result answered", forgotten)
        assert calls == 2
        assert a.attempts[0].failure is not None and a.attempts[0].failure.type == "worker_lost", a.attempts


@run
async def test_refused_heartbeat_stops_the_stale_attempt(server: Server, ns: str) -> None:
    causes: List[Any] = []

    def reg(w: aion.Worker) -> None:
        @w.activity("beat")
        async def beat(_: Any) -> int:
            if activity.info().attempt > 1:
                return activity.info().attempt
            i = 0
            try:
                while True:
                    activity.heartbeat(i)
                    i += 1
                    await asyncio.sleep(0.005)
            except asyncio.CancelledError:
                causes.append(activity.cancel_cause())
                raise

    async with Proxy(server.addr) as proxy, aion.Client(server.addr) as c:
        async with running(proxy.addr, reg, namespaces=[ns], slots=2):
            h = await c.schedule(ns, "beat", None, heartbeat_timeout=0.4, retry_policy=QUICK)
            await until(c, ns, h.id, "heartbeats", lambda a: a.last_heartbeat_details)
            proxy.cut()  # the still running handler's next heartbeat, on the new stream, is refused

            async def cancelled() -> bool:
                return bool(causes)

            await eventually("the stale attempt's handler to be cancelled", cancelled)
            assert isinstance(causes[0], aion.AttemptStale), causes
            a = await h.wait(timeout=15)
        assert a.state is aion.ActivityState.COMPLETED and len(a.attempts) == 2, a
        assert a.attempts[0].failure is not None and a.attempts[0].failure.type == "worker_lost"


@run
async def test_start_to_close_timeout_ends_the_attempt_and_it_is_retried(server: Server, ns: str) -> None:
    causes: List[Any] = []

    def reg(w: aion.Worker) -> None:
        @w.activity("slow")
        async def slow(_: Any) -> str:
            if activity.info().attempt > 1:
                return "second"
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                causes.append(activity.cancel_cause())
                raise
            return "never"

    async with aion.Client(server.addr) as c, running(server.addr, reg, namespaces=[ns]):
        start = time.monotonic()
        h = await c.schedule(ns, "slow", None, start_to_close_timeout=0.2, retry_policy=QUICK)
        assert await h.result(timeout=15) == "second"
        a = await h.get()
    assert time.monotonic() - start >= 0.19
    # Its own deadline or the server's CancelActivity, whichever came first (due together).
    assert len(causes) == 1 and isinstance(causes[0], (aion.DeadlineExceeded, aion.ActivityCanceled)), causes
    first = a.attempts[0]
    assert first.outcome is aion.AttemptOutcome.TIMED_OUT and first.failure is not None
    assert first.failure.type == "start_to_close_timeout" and first.failure.retryable


def test_pings_keep_an_idle_worker_registered(new_server: Any, ns: str) -> None:
    # A worker silent for 600 ms is deregistered; the server asks for a ping every 200 ms.
    srv: Server = new_server("--heartbeat-window", "600ms")

    @run
    async def body() -> None:
        async with aion.Client(srv.addr) as c, running(srv.addr, echo, namespaces=[ns]) as r:
            wid = await r.registered()
            await asyncio.sleep(2.4)  # four heartbeat windows of silence but for the pings
            assert [w.id for w in await c.list_workers(ns)] == [wid]
            assert r.worker.worker_id == wid
            assert await (await c.schedule(ns, "echo", 1)).result(timeout=15) == 1

    body()
