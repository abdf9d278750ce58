"""Python workers as their users run them, in processes of their own beside the Go demo worker,
against a real server process: routing, round-robin in a mixed pool, SIGKILL and SIGTERM."""

from __future__ import annotations

import collections
import signal
import time
from typing import List

import aion
from conftest import Proc, Server, go_worker, py_worker, ran_on


def test_routing_keeps_namespace_task_queue_and_node_pin(server: Server, ns: str, procs: List[Proc]) -> None:
    a_ns, b_ns = ns + "-a", ns + "-b"
    workers = {}
    for name, args in {
        "tenant-a": ["--namespace", a_ns],
        "tenant-b": ["--namespace", b_ns],
        "gpu-queue": ["--namespace", a_ns, "--task-queue", "gpu"],
        "node-n1": ["--namespace", a_ns, "--task-queue", "pinq", "--node", "n1"],
        "node-n2": ["--namespace", a_ns, "--task-queue", "pinq", "--node", "n2"],
    }.items():
        p, wid = py_worker(server, name, *args)
        procs.append(p)
        workers[name] = wid
    cases = [
        (a_ns, {}, "tenant-a"),
        (b_ns, {}, "tenant-b"),
        (a_ns, {"task_queue": "gpu"}, "gpu-queue"),
        (a_ns, {"task_queue": "pinq", "node": "n1"}, "node-n1"),
        (a_ns, {"task_queue": "pinq", "node": "n2"}, "node-n2"),
    ]
    with aion.SyncClient(server.addr) as c:
        for rnd in range(3):
            for i, (namespace, opts, want) in enumerate(cases):
                ident = f"route-{rnd}-{i}"
                h = c.schedule(namespace, "echo", {"hello": ident}, id=ident, **opts)
                a = c.wait(namespace, h.id, timeout=30)
                assert a.state is aion.ActivityState.COMPLETED, a
                assert ran_on(a) == workers[want], f"{namespace} {opts} ran on {ran_on(a)}, want {want} ({workers[want]})"
                assert a.result_value() == {"hello": ident}


def test_mixed_pool_of_a_go_and_a_python_worker_splits_200_activities_evenly(
        binary: str, server: Server, ns: str, procs: List[Proc]) -> None:
    gp, go_id = go_worker(binary, server, "go-worker", "--namespace", ns, "--slots", "200")
    procs.append(gp)
    pp, py_id = py_worker(server, "py-worker", "--namespace", ns, "--slots", "200")
    procs.append(pp)
    with aion.SyncClient(server.addr) as c:
        reqs = [aion.ScheduleRequest(aion.ScheduleOptions(namespace=ns, activity_type="echo", id=f"mix-{i}"),
                                     {"i": i}) for i in range(200)]
        results = c.schedule_batch(reqs)
        assert all(r.error is None for r in results), [r.error for r in results if r.error]
        by = collections.Counter()
        for i in range(200):
            a = c.wait(ns, f"mix-{i}", timeout=60)
            assert a.state is aion.ActivityState.COMPLETED and a.result_value() == {"i": i}, a
            assert len(a.attempts) == 1, a.attempts
            by[ran_on(a)] += 1
    assert set(by) == {go_id, py_id}, by
    for wid in (go_id, py_id):
        assert 90 <= by[wid] <= 110, f"worker {wid} ran {by[wid]} of 200 activities, want 45-55% ({dict(by)})"
    print(f"split of 200 activities: Go worker {by[go_id]}, Python worker {by[py_id]}")


def test_python_worker_killed_mid_activity_is_retried_elsewhere(
        binary: str, server: Server, ns: str, procs: List[Proc]) -> None:
    victim, victim_id = py_worker(server, "victim", "--namespace", ns, "--slots", "1")
    procs.append(victim)
    with aion.SyncClient(server.addr) as c:
        h = c.schedule(ns, "sleep", {"ms": 3000}, id="long",
                       retry_policy=aion.RetryPolicy(initial_interval=0.05))
        deadline = time.monotonic() + 30
        while True:
            a = c.get(ns, h.id)
            if a.state is aion.ActivityState.RUNNING and a.last_heartbeat_details:
                break
            assert time.monotonic() < deadline, a
            time.sleep(0.02)
        assert ran_on(a) == victim_id
        survivor, survivor_id = py_worker(server, "survivor", "--namespace", ns, "--slots", "1")
        procs.append(survivor)
        victim.signal(signal.SIGKILL)
        a = c.wait(ns, h.id, timeout=60)
    assert a.state is aion.ActivityState.COMPLETED, a
    assert len(a.attempts) == 2 and ran_on(a) == survivor_id, a.attempts
    first = a.attempts[0]
    assert first.worker_id == victim_id and first.failure is not None and first.failure.type == "worker_lost", first
    # The retry resumed from the killed attempt's last heartbeat.
    assert a.result_value()["slept_ms"] == 3000


def test_sigterm_drains_a_python_worker_without_losing_work(
        binary: str, server: Server, ns: str, procs: List[Proc]) -> None:
    worker, wid = py_worker(server, "draining", "--namespace", ns, "--slots", "8")
    procs.append(worker)
    with aion.SyncClient(server.addr) as c:
        ids = [c.schedule(ns, "sleep", {"ms": 1500}, id=f"d-{i}").id for i in range(8)]
        # Every handler is running (it has heartbeated) when the SIGTERM comes.
        deadline = time.monotonic() + 30
        while True:
            acts = [c.get(ns, i) for i in ids]
            if all(a.last_heartbeat_details for a in acts):
                break
            assert time.monotonic() < deadline, acts
            time.sleep(0.02)
        assert any(a.state is aion.ActivityState.RUNNING for a in acts), "every activity finished before the SIGTERM"
        worker.signal(signal.SIGTERM)
        while not any(w.id == wid and w.draining for w in c.list_workers(ns)):
            assert time.monotonic() < deadline, "the worker never drained"
            time.sleep(0.02)
        # The work scheduled now waits for a worker that comes later: the draining one takes none.
        late = c.schedule(ns, "echo", {"late": True}, id="late").id
        assert worker.wait(30) == 0, worker.output()
        for i in ids:
            a = c.get(ns, i)
            assert a.state is aion.ActivityState.COMPLETED and len(a.attempts) == 1 and ran_on(a) == wid, a
        assert c.get(ns, late).attempts == []
        other, other_id = py_worker(server, "after", "--namespace", ns)
        procs.append(other)
        a = c.wait(ns, late, timeout=30)
        assert a.state is aion.ActivityState.COMPLETED and ran_on(a) == other_id, a
    assert server.disconnect_reason(wid) == "drained"
