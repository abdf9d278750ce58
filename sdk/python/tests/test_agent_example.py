"""The agent example (examples/agent.py) steered through every intervention it honours."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import Any

import aion
from aion import interventions as iv
from conftest import SDK, Server, eventually, run, running

_spec = importlib.util.spec_from_file_location("agent_example", SDK / "examples" / "agent.py")
assert _spec is not None and _spec.loader is not None
agent_example = importlib.util.module_from_spec(_spec)
sys.modules["agent_example"] = agent_example
_spec.loader.exec_module(agent_example)


def register(w: aion.Worker) -> None:
    w.register_activity("py-agent", agent_example.agent)


@run
async def test_the_agent_honours_inject_message_update_budget_pause_and_approval(server: Server, ns: str) -> None:
    async with aion.Client(server.addr) as c, running(server.addr, register, namespaces=[ns],
                                                      capabilities=agent_example.CAPABILITIES):
        h = await c.schedule(ns, "py-agent", agent_example.AgentInput(
            task="plan a trip", max_turns=8, approval_at=2, turn_seconds=1.0), heartbeat_timeout=3)

        async def started() -> bool:
            return (await h.get()).state is aion.ActivityState.RUNNING

        await eventually("the agent to start", started)

        async def progress(cond: Any) -> None:
            async def check() -> bool:
                return bool(cond((await h.get()).heartbeat_value() or {}))

            await eventually("the agent's progress", check)

        # A message for the next turn, and one that interrupts the turn in flight (the first
        # model call, a second long).
        assert (await h.intervene(iv.inject_message("prefer trains"))).delivered
        await asyncio.sleep(0.3)
        assert (await h.intervene(iv.inject_message("under 500 EUR", iv.Priority.INTERRUPT))).delivered
        # Turn 2 asks to send an email and waits for a person.
        await progress(lambda p: p.get("awaiting_approval") == "call-2")
        wrong = await h.intervene(iv.respond_to_approval("call-9", True))
        assert wrong.delivered
        # Paused: no new turn starts, and heartbeats keep the attempt alive past its 3 s timeout.
        assert (await h.intervene(iv.pause())).delivered
        assert (await h.intervene(iv.respond_to_approval("call-2", True, "ok by me"))).delivered
        await progress(lambda p: p.get("turns") == 2 and "awaiting_approval" not in p)
        await asyncio.sleep(3.5)
        assert (await h.get()).heartbeat_value()["turns"] == 2, "a turn ran while paused"
        # A smaller budget: it stops after four turns instead of eight.
        assert (await h.intervene(iv.update_budget(max_turns=4))).delivered
        assert (await h.intervene(iv.resume())).delivered
        out = await h.result(into=agent_example.AgentOutput, timeout=30)
        a = await h.get()

        async def acked() -> bool:
            return server.intervention_ack(wrong.intervention_id) is not None

        await eventually("the wrong call's ack", acked)
    assert (out.turns, out.stopped_by) == (4, "max_turns"), out
    assert out.paused_seconds >= 3.0 and out.interrupted_turns == 1, out
    assert "user: prefer trains" in out.transcript and "user: under 500 EUR" in out.transcript, out.transcript
    assert "tool: call-2 sent (ok by me)" in out.transcript, out.transcript
    assert len(a.attempts) == 1
    assert server.intervention_ack(wrong.intervention_id) == (False, "awaiting approval of call-2, not call-9")


@run
async def test_the_agent_stops_on_a_denied_tool_and_a_cancel(server: Server, ns: str) -> None:
    async with aion.Client(server.addr) as c, running(server.addr, register, namespaces=[ns],
                                                      capabilities=agent_example.CAPABILITIES):
        h = await c.schedule(ns, "py-agent", {"task": "t", "max_turns": 3, "approval_at": 1, "turn_seconds": 0.05})

        async def awaiting() -> bool:
            return ((await h.get()).heartbeat_value() or {}).get("awaiting_approval") == "call-1"

        await eventually("the approval request", awaiting)
        assert (await h.intervene(iv.respond_to_approval("call-1", False, "not now"))).delivered
        out = await h.result(timeout=30)
        assert "tool: call-1 denied (not now)" in out["transcript"] and out["turns"] == 3, out
        slow = await c.schedule(ns, "py-agent", {"task": "t", "max_turns": 100, "turn_seconds": 0.05})

        async def turning() -> bool:
            return bool((await slow.get()).last_heartbeat_details)

        await eventually("a turn", turning)
        assert (await slow.intervene(iv.cancel("enough"))).delivered
        a = await slow.wait(timeout=15)
        assert a.state is aion.ActivityState.CANCELED, a
