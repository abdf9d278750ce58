"""Test harness: real aion server processes on loopback ports, Python workers in the test's own
event loop or in processes of their own, and the Go demo worker.

The server binary is $AION_BINARY (the Go test e2e/python builds it and sets it); without it
the harness builds one with `go build` into a temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent
sys.path.insert(0, str(SDK))

import aion  # noqa: E402

_counter = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def binary() -> Iterator[str]:
    path = os.environ.get("AION_BINARY")
    if path:
        yield path
        return
    d = tempfile.mkdtemp(prefix="aion-pytest-")
    out = os.path.join(d, "aion")
    subprocess.run(["go", "build", "-o", out, "./cmd/aion"], cwd=REPO, check=True)
    yield out
    shutil.rmtree(d, ignore_errors=True)


class Proc:
    """One child process with its combined output captured line by line."""

    def __init__(self, name: str, args: List[str], env: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.out: List[str] = []
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e, text=True,
                                  start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.out.append(line)
            self.lines.put(line)

    def wait_line(self, pattern: str, timeout: float = 30.0) -> "re.Match[str]":
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name} printed no line matching {pattern!r} within {timeout}s:\n"
                                     + self.output())
            try:
                line = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if self.p.poll() is not None and self.lines.empty():
                    time.sleep(0.05)
                    if self.lines.empty():
                        raise AssertionError(f"{self.name} exited ({self.p.returncode}) before printing "
                                             f"{pattern!r}:\n" + self.output()) from None
                continue
            m = rx.search(line)
            if m:
                return m

    def output(self) -> str:
        return "".join(self.out)

    def signal(self, sig: int) -> None:
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        return self.p.wait(timeout)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        with contextlib.suppress(Exception):
            self.p.wait(10)


class Server:
    """One aion server process on loopback ports with its data directory; stop and start it
    again on the same address and data."""

    def __init__(self, binary: str, extra: List[str]) -> None:
        self.binary = binary
        self.extra = extra
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.http = f"127.0.0.1:{free_port()}"
        self.data = tempfile.mkdtemp(prefix="aion-data-")
        self.proc: Optional[Proc] = None
        self.boots = 0
        self.start()

    def start(self) -> None:
        args = [self.binary, "server", "--grpc-addr", self.addr, "--http-addr", self.http, "--data-dir",
                self.data, "--sqlite-sync", "normal", *self.extra]
        self.proc = Proc(f"server#{self.boots}", args, {"AION_LOG_LEVEL": "info"})
        self.boots += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://{self.http}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.p.poll() is not None:
                raise AssertionError("server exited during start:\n" + self.proc.output())
            time.sleep(0.05)
        raise AssertionError("server not ready within 30s:\n" + self.proc.output())

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: the server drains its workers, then exits."""
        assert self.proc is not None
        self.proc.signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)

    def intervention_ack(self, intervention_id: str) -> Optional["tuple[bool, str]"]:
        """The worker's acknowledgement of an intervention as the server logged it (accepted,
        message); None while none arrived."""
        assert self.proc is not None
        for line in self.proc.out:
            if "intervention acknowledged" in line and f"intervention={intervention_id} " in line:
                m = re.search(r'accepted=(\w+) message=("(?:[^"\\]|\\.)*"|\S*)', line)
                assert m, line
                msg = m.group(2)
                return m.group(1) == "true", msg[1:-1] if msg.startswith('"') else msg
        return None

    def disconnect_reason(self, worker_id: int, timeout: float = 15.0) -> str:
        """The reason the server logged when the worker left, waiting up to timeout for the line
        (the server logs it once the stream's handler has ended, after the worker's side closed);
        empty if it never came."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.proc.out):
                m = re.search(rf'msg="worker disconnected" worker={worker_id} reason=(\w+)', line)
                if m:
                    return m.group(1)
            if time.monotonic() > deadline:
                return ""
            time.sleep(0.02)


@pytest.fixture(scope="session")
def server(binary: str) -> Iterator[Server]:
    """One server shared by the tests that need nothing special of it (each uses its own
    namespace)."""
    s = Server(binary, [])
    yield s
    s.close()


@pytest.fixture
def new_server(binary: str) -> Iterator[Callable[..., Server]]:
    """Starts a server of the test's own, with extra flags."""
    made: List[Server] = []

    def make(*extra: str) -> Server:
        s = Server(binary, list(extra))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def ns(request: pytest.FixtureRequest) -> str:
    """A namespace of the test's own."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:80]
    return f"{name}-{next(_counter)}"


def run(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """Runs an async test body on a fresh event loop, bounded to 120 s."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        async def bounded() -> Any:
            return await asyncio.wait_for(fn(*args, **kwargs), 120)

        return asyncio.run(bounded())

    return wrapper


class Running:
    """A worker running in the test's event loop."""

    def __init__(self, worker: aion.Worker) -> None:
        self.worker = worker
        self.task = asyncio.ensure_future(worker.run())

    async def registered(self, timeout: float = 10.0) -> int:
        reg = asyncio.ensure_future(self.worker.wait_registered())
        done, _ = await asyncio.wait({reg, self.task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if reg not in done:
            reg.cancel()
            if self.task.done():
                self.task.result()
            raise AssertionError("the worker never registered")
        return reg.result()

    async def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        await asyncio.wait_for(asyncio.shield(self.task), timeout)

    async def done(self, timeout: float = 30.0) -> None:
        await asyncio.wait_for(asyncio.shield(self.task), timeout)


@contextlib.asynccontextmanager
async def running(address: str, register: Callable[[aion.Worker], None], **options: Any) -> Any:
    """Runs a worker (quick reconnects, short grace periods) for the body; stops it after."""
    options.setdefault("min_backoff", 0.02)
    options.setdefault("max_backoff", 0.2)
    w = aion.Worker(address, **options)
    w._ack_grace = 2.0
    w._close_wait = 2.0
    register(w)
    r = Running(w)
    try:
        yield r
    finally:
        if not r.task.done():
            w.stop()
            w.stop()  # the second stop cancels handlers still running
            try:
                await asyncio.wait_for(asyncio.shield(r.task), 30)
            except BaseException:
                r.task.cancel()
                with contextlib.suppress(BaseException):
                    await r.task


async def eventually(what: str, cond: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if await cond():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def go_worker(binary: str, server: Server, name: str, *args: str) -> "tuple[Proc, int]":
    """Starts the Go demo worker (aion worker demo) and returns it with its worker id."""
    p = Proc(name, [binary, "worker", "demo", "--address", server.addr, *args])
    m = p.wait_line(r'aion worker registered" worker_id=(\d+)')
    return p, int(m.group(1))


def py_worker(server: Server, name: str, *args: str) -> "tuple[Proc, int]":
    """Starts tests/worker_proc.py (a Python worker process) and returns it with its worker id."""
    p = Proc(name, [sys.executable, str(HERE / "worker_proc.py"), "--address", server.addr, *args],
             {"PYTHONPATH": str(SDK)})
    m = p.wait_line(r"aion worker registered worker_id=(\d+)")
    return p, int(m.group(1))


@pytest.fixture
def procs() -> Iterator[List[Proc]]:
    """Processes the test starts; killed at its end, their output printed if it failed."""
    started: List[Proc] = []
    yield started
    for p in started:
        p.kill()


def ran_on(a: aion.Activity) -> int:
    return a.attempts[-1].worker_id if a.attempts else 0


class Proxy:
    """A TCP proxy in front of a server: cut() drops every connection through it, as a network
    failure would."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self._writers: List[asyncio.StreamWriter] = []
        self._server: Optional[asyncio.base_events.Server] = None

    async def __aenter__(self) -> "Proxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        host, port = self.target.rsplit(":", 1)
        try:
            ur, uw = await asyncio.open_connection(host, int(port))
        except OSError:
            w.close()
            return
        self._writers += [w, uw]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    def cut(self) -> None:
        for w in self._writers:
            w.transport.abort()
        self._writers = []
