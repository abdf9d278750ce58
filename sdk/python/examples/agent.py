"""An AI agent as an aion activity: a loop of model turns that people steer while it runs.

The model here is a fake that runs locally (no network, no weights): it answers each turn
after a short delay, counts tokens, and at the turn ``approval_at`` proposes a tool call
that needs a person's approval. Swap FakeModel for a real client and nothing else changes.

While the agent runs, ``aion activity intervene`` (or ``Client.intervene``) steers it:

* inject-message: a user message joins the transcript before the next turn; with priority
  interrupt the turn in flight is cut short and redone with it;
* update-budget: new ceilings on turns and tokens;
* pause / resume: no new turn starts while paused (heartbeats go on);
* respond-to-approval: approves or denies the tool call the agent waits on;
* cancel: the attempt stops, reported canceled.

Its heartbeats carry its progress ({"turns": N, "tokens": T, "awaiting_approval": id}), and a
retried attempt resumes from them. Run it with:

    /usr/bin/python3 sdk/python/examples/agent.py --address 127.0.0.1:50051 --namespace demo
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
from typing import List, Optional

import aion
from aion import activity


@dataclasses.dataclass
class AgentInput:
    task: str
    max_turns: int = 5
    max_tokens: int = 10_000
    #: The turn at which the model asks to call a tool (0: never).
    approval_at: int = 0
    #: How long one model call takes, in seconds.
    turn_seconds: float = 0.2


@dataclasses.dataclass
class AgentOutput:
    transcript: List[str]
    turns: int
    tokens: int
    #: done, max_turns or max_tokens.
    stopped_by: str
    paused_seconds: float
    interrupted_turns: int


@dataclasses.dataclass
class Reply:
    text: str
    tokens: int
    #: A tool call the model wants to make; it needs approval.
    tool_call: Optional[str] = None


class FakeModel:
    """A stand-in for a model API: deterministic replies after a delay."""

    def __init__(self, turn_seconds: float, approval_at: int) -> None:
        self.turn_seconds = turn_seconds
        self.approval_at = approval_at

    async def complete(self, transcript: List[str], turn: int) -> Reply:
        await asyncio.sleep(self.turn_seconds)
        last = transcript[-1]
        text = f"turn {turn}: thinking about {last!r}"
        if turn == self.approval_at:
            return Reply(text=text + " -> I want to send an email", tokens=len(text.split()),
                         tool_call=f"call-{turn}")
        return Reply(text=text, tokens=len(text.split()))


async def agent(inp: AgentInput) -> AgentOutput:
    """The activity: turns of the model until it is done or a budget runs out."""
    model = FakeModel(inp.turn_seconds, inp.approval_at)
    progress = activity.heartbeat_details(into=dict, default={})
    turns, tokens = int(progress.get("turns", 0)), int(progress.get("tokens", 0))
    max_turns, max_tokens = inp.max_turns, inp.max_tokens
    transcript = [f"task: {inp.task}"]
    paused = 0.0
    interrupted = 0
    ivs = activity.interventions()

    def apply(iv: activity.Intervention) -> bool:
        """Applies one intervention; True when it interrupts the turn in flight."""
        nonlocal max_turns, max_tokens
        if iv.kind == "inject_message" and iv.message is not None:
            transcript.append(f"user: {iv.message.text}")
            iv.accept()
            return iv.message.priority is aion.Priority.INTERRUPT
        if iv.kind == "update_budget" and iv.budget is not None:
            if iv.budget.max_turns is not None:
                max_turns = iv.budget.max_turns
            if iv.budget.max_tokens is not None:
                max_tokens = iv.budget.max_tokens
            iv.accept()
            return False
        iv.decline(f"no approval is awaited now ({iv.kind})")
        return False

    while True:
        while (iv := ivs.poll()) is not None:
            apply(iv)
        paused += await activity.wait_while_paused()
        if turns >= max_turns:
            stopped = "max_turns"
            break
        if tokens >= max_tokens:
            stopped = "max_tokens"
            break

        # One model call, raced against interventions: an interrupt cuts it short.
        call = asyncio.ensure_future(model.complete(transcript, turns + 1))
        reply: Optional[Reply] = None
        while reply is None:
            nxt = asyncio.ensure_future(ivs.get())
            done, _ = await asyncio.wait({call, nxt}, return_when=asyncio.FIRST_COMPLETED)
            if nxt in done:
                if apply(nxt.result()):
                    call.cancel()
                    interrupted += 1
                    call = asyncio.ensure_future(model.complete(transcript, turns + 1))
            else:
                nxt.cancel()
                reply = call.result()
        turns += 1
        tokens += reply.tokens
        transcript.append(f"model: {reply.text}")

        if reply.tool_call is not None:
            # Wait for a person: the approval arrives as an intervention; others are applied
            # meanwhile, and pause holds the wait too.
            activity.heartbeat({"turns": turns, "tokens": tokens, "awaiting_approval": reply.tool_call})
            while True:
                iv = await ivs.get()
                if iv.kind == "respond_to_approval" and iv.approval is not None:
                    if iv.approval.call_id != reply.tool_call:
                        iv.decline(f"awaiting approval of {reply.tool_call}, not {iv.approval.call_id}")
                        continue
                    iv.accept()
                    if iv.approval.approve:
                        transcript.append(f"tool: {reply.tool_call} sent ({iv.approval.note})")
                    else:
                        transcript.append(f"tool: {reply.tool_call} denied ({iv.approval.note})")
                    break
                apply(iv)
        activity.heartbeat({"turns": turns, "tokens": tokens})
    return AgentOutput(transcript=transcript, turns=turns, tokens=tokens, stopped_by=stopped,
                       paused_seconds=round(paused, 3), interrupted_turns=interrupted)


#: What this agent honours, so what its worker advertises.
CAPABILITIES = [aion.Capability.INJECT_MESSAGE, aion.Capability.UPDATE_BUDGET, aion.Capability.PAUSE_RESUME,
                aion.Capability.RESPOND_TO_APPROVAL, aion.Capability.CANCEL]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default="127.0.0.1:50051")
    p.add_argument("--namespace", default="demo")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO)
    worker = aion.Worker(args.address, namespaces=[args.namespace], slots=4, capabilities=CAPABILITIES)
    worker.register_activity("py-agent", agent)
    worker.run_sync()


if __name__ == "__main__":
    main()
