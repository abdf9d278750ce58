"""Interventions: mid-run commands for the worker running an activity's attempt.

A client builds a :class:`Command` with one of the functions below and sends it with
:meth:`aion.Client.intervene`; the server delivers it only to a worker that advertised
the command's :class:`Capability` (docs/protocol.md, interventions)::

    await client.intervene("demo", activity_id, interventions.inject_message("use metric units"))
    await client.intervene("demo", activity_id, interventions.update_budget(max_turns=5))

On the worker side the SDK applies cancel, pause and resume itself and hands the others
to the handler (see :mod:`aion.activity`).
"""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass
from typing import Any, Optional, Union

from ._gen.v1 import activity_pb2, intervention_pb2


class Capability(str, enum.Enum):
    """An intervention primitive a worker advertises (``Worker(capabilities=[...])``).

    The worker SDK applies CANCEL (the handler is cancelled with
    :class:`aion.errors.ActivityCanceled`) and PAUSE_RESUME (see
    :func:`aion.activity.wait_while_paused`) itself; the others reach the handler through
    :func:`aion.activity.interventions`. Advertise only what the worker's handlers honour.
    """

    INJECT_MESSAGE = "inject_message"
    CANCEL = "cancel"
    PAUSE_RESUME = "pause_resume"
    UPDATE_BUDGET = "update_budget"
    RESPOND_TO_APPROVAL = "respond_to_approval"

    def to_proto(self) -> int:
        """The wire enum value."""
        return intervention_pb2.InterventionPrimitive.Value(  # type: ignore[no-any-return]
            "INTERVENTION_PRIMITIVE_" + self.value.upper())


class Priority(str, enum.Enum):
    """How urgently an injected message is handled."""

    #: At the next natural boundary (for an agent: after the current turn).
    NORMAL = "normal"
    #: At once, interrupting the current step.
    INTERRUPT = "interrupt"

    def to_proto(self) -> int:
        """The wire enum value."""
        if self is Priority.INTERRUPT:
            return int(intervention_pb2.MESSAGE_PRIORITY_INTERRUPT)
        return int(intervention_pb2.MESSAGE_PRIORITY_NORMAL)

    @classmethod
    def from_proto(cls, v: int) -> "Priority":
        """The priority of a wire value; unspecified is normal."""
        return cls.INTERRUPT if v == intervention_pb2.MESSAGE_PRIORITY_INTERRUPT else cls.NORMAL


@dataclass(frozen=True)
class Command:
    """One intervention command; build it with the functions of this module."""

    proto: intervention_pb2.InterventionCommand

    @property
    def kind(self) -> str:
        """inject_message, cancel, pause, resume, update_budget or respond_to_approval; empty
        for none."""
        return self.proto.WhichOneof("command") or ""


def inject_message(text: str, priority: Union[Priority, str] = Priority.NORMAL) -> Command:
    """Adds a message to the running work (for an agent, a user turn); capability
    inject_message."""
    return Command(intervention_pb2.InterventionCommand(inject_message=intervention_pb2.InjectMessageCommand(
        text=text, priority=typing.cast(Any, Priority(priority).to_proto()))))


def pause() -> Command:
    """Suspends the running work at its next safe point until :func:`resume`; capability
    pause_resume."""
    return Command(intervention_pb2.InterventionCommand(pause=intervention_pb2.PauseCommand()))


def resume() -> Command:
    """Continues work suspended by :func:`pause`; capability pause_resume."""
    return Command(intervention_pb2.InterventionCommand(resume=intervention_pb2.ResumeCommand()))


def update_budget(*, max_tokens: Optional[int] = None, max_turns: Optional[int] = None) -> Command:
    """Changes the running work's budget; a limit left None is unchanged (at least one must
    be given, or the server refuses the command); capability update_budget."""
    cmd = intervention_pb2.UpdateBudgetCommand()
    if max_tokens is not None:
        cmd.max_tokens = max_tokens
    if max_turns is not None:
        cmd.max_turns = max_turns
    return Command(intervention_pb2.InterventionCommand(update_budget=cmd))


def respond_to_approval(call_id: str, approve: bool, note: str = "") -> Command:
    """Answers the approval request ``call_id`` the running work waits on (for an agent, a
    tool call awaiting consent); capability respond_to_approval."""
    return Command(intervention_pb2.InterventionCommand(respond_to_approval=intervention_pb2.RespondToApprovalCommand(
        call_id=call_id, approve=approve, note=note)))


def cancel(reason: str = "") -> Command:
    """Asks the worker to wind the attempt down cooperatively; it then reports the attempt,
    usually as canceled; capability cancel. :meth:`aion.Client.cancel` is the durable cancel:
    it closes the activity at once and needs no capability."""
    return Command(intervention_pb2.InterventionCommand(cancel=intervention_pb2.CancelCommand(reason=reason)))


class Outcome(str, enum.Enum):
    """What became of an :meth:`aion.Client.intervene` call."""

    #: The command is on the stream of the worker running the attempt (delivery is not
    #: application: the worker acknowledges its own verdict to the server).
    DELIVERED = "delivered"
    #: No attempt is running on a live worker, or the attempt asked for is not current.
    STALE_TARGET = "stale_target"
    #: The worker running the attempt did not advertise the command's capability.
    CAPABILITY_NOT_SUPPORTED = "capability_not_supported"

    @classmethod
    def from_proto(cls, v: int) -> "Outcome":
        """The outcome of a wire value; raises ValueError for an unknown one."""
        name = activity_pb2.InterventionOutcome.Name(v)
        return cls(name[len("INTERVENTION_OUTCOME_"):].lower())


@dataclass(frozen=True)
class Result:
    """The answer to :meth:`aion.Client.intervene`."""

    outcome: Outcome
    #: The server's identifier of the command; set when delivered.
    intervention_id: str = ""
    #: The attempt the command went to; 0 unless delivered.
    attempt: int = 0

    @property
    def delivered(self) -> bool:
        """Whether the command reached the worker."""
        return self.outcome is Outcome.DELIVERED
