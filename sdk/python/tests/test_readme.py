"""The README's Python section works as written: its worker and clients, run as the reader runs
them (their own processes, /usr/bin/python3 or whatever runs these tests), against a server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List

import aion
from conftest import REPO, SDK, Proc, Server


def python_blocks() -> List[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Using it from Python"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_shows_a_worker_and_clients_of_under_20_lines() -> None:
    blocks = python_blocks()
    assert len(blocks) == 3, "want the worker, the blocking client and the asyncio client"
    for b in blocks:
        assert len(b.strip().splitlines()) < 20, b


def test_the_readme_worker_and_clients_work_as_written(new_server: Any, tmp_path: Path, procs: List[Proc]) -> None:
    srv: Server = new_server()
    worker_src, sync_src, async_src = (b.replace("127.0.0.1:50051", srv.addr) for b in python_blocks())
    env = {"PYTHONPATH": str(SDK)}
    (tmp_path / "worker.py").write_text(worker_src)
    worker = Proc("readme-worker", [sys.executable, str(tmp_path / "worker.py")], env)
    procs.append(worker)
    with aion.SyncClient(srv.addr) as c:
        deadline = time.monotonic() + 30
        while not any("greet" in w.activity_types for w in c.list_workers("demo")):
            assert time.monotonic() < deadline, "the README's worker never registered:\n" + worker.output()
            assert worker.p.poll() is None, "the README's worker exited:\n" + worker.output()
            time.sleep(0.05)
    for name, src in (("client.py", sync_src), ("async_client.py", async_src)):
        (tmp_path / name).write_text(src)
        out = subprocess.run([sys.executable, str(tmp_path / name)], env={**os.environ, **env}, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and out.stdout == "hello ann\n", (name, out.stdout, out.stderr)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
