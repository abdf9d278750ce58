"""A Python worker process for the process-level tests: echo, sleep (heartbeating its
progress; a retry resumes from it) and trace-echo (returns the trace context its attempt
carries). It runs until SIGTERM (graceful drain) or SIGKILL."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import aion
from aion import activity


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--namespace", action="append", required=True)
    p.add_argument("--task-queue", default="")
    p.add_argument("--node", default="")
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--stop-timeout", type=float, default=30.0)
    args = p.parse_args()
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(message)s")

    w = aion.Worker(args.address, namespaces=args.namespace, task_queue=args.task_queue, node=args.node,
                    slots=args.slots, stop_timeout=args.stop_timeout, min_backoff=0.05, max_backoff=1.0)

    @w.activity("echo")
    async def echo(x: object) -> object:
        return x

    @w.activity("sleep")
    async def sleep(x: dict) -> dict:
        ms = int(x.get("ms", 0))
        done = activity.heartbeat_details(default=0)
        while done < ms:
            step = min(50, ms - done)
            await asyncio.sleep(step / 1000)
            done += step
            activity.heartbeat(done)
        return {"slept_ms": ms, "by": "python", "worker_id": activity.info().worker_id}

    @w.activity("trace-echo")
    async def trace_echo(_: object) -> list:
        info = activity.info()
        return [info.traceparent, info.tracestate]

    w.run_sync()


if __name__ == "__main__":
    main()
