"""Learning from what a model did with a request's offer: the tools it called become examples of
them, the selected tools it left become their misses, and per tool what a session saw (offered,
called, failed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind
from contextsieve.agent.toolnames import ToolNames
from contextsieve.errors import InputError, brief
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.session.assembly import Request

__all__ = ["Outcomes", "tool_keys"]


def tool_keys(agent: Agent, calls: Iterable[ItemKey | str], what: str, names: ToolNames | None = None) -> list[ItemKey]:
    """Tools named as :class:`ItemKey`, ``"tool:SERVER:NAME"``, ``"SERVER:NAME"`` or the offered name
    ``"SERVER_NAME"``, each once in order; :class:`~contextsieve.errors.UnknownItemError` for a tool
    the agent does not have, :class:`InputError` for one name instead of a list or a key of another kind.
    An offered name is read through ``names`` (a request's own names: what the model was offered under),
    then the agent's current names (a name never changes meaning: :mod:`contextsieve.agent.toolnames`)."""
    if isinstance(calls, (str, ItemKey)):
        raise InputError(f"{what} takes a list of tools, not one")
    if not isinstance(calls, Iterable) or isinstance(calls, (bytes, bytearray, Mapping)):
        raise InputError(f"{what} takes a list of tools, got {brief(calls)}")
    keys: list[ItemKey] = []
    for c in calls:
        if isinstance(c, str) and ":" not in c:  # the name a model called it by
            found = names.get(c) if names is not None else None
            key = found if found is not None else agent.tool_names().key(c)
            agent.get(key)  # UnknownItemError when the agent no longer has it
            keys.append(key)
            continue
        if isinstance(c, str) and c.count(":") == 1 and c.split(":")[0] not in {k.value for k in ItemKind}:
            c = "tool:" + c  # SERVER:NAME
        key = ItemKey.parse(c) if isinstance(c, str) else c
        if not isinstance(key, ItemKey) or key.kind is not ItemKind.TOOL:
            raise InputError(f"{what} takes tools, got {c!r:.80}")
        agent.get(key)  # UnknownItemError when the agent has no such tool
        keys.append(key)
    return list(dict.fromkeys(keys))


class Outcomes:
    """Per tool key, what one session's :meth:`record` calls saw: offered, called, failed."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    def checked(
        self, agent: Agent, request: Request, called: Iterable[ItemKey | str], failed: Iterable[ItemKey | str]
    ) -> tuple[list[ItemKey], list[ItemKey]]:
        """The called and failed tools as keys, checked before anything is recorded."""
        if not isinstance(request, Request):
            raise InputError(f"record_outcome takes a Request, got {brief(request)}")
        done = tool_keys(agent, called, "called", request.names)
        bad = tool_keys(agent, failed, "failed", request.names)
        if not set(bad) <= set(done):
            raise InputError(f"failed names tools that were not called: {[str(k) for k in bad if k not in done]}")
        if not request.message.strip():
            raise InputError("record_outcome needs a request with a message")
        return done, bad

    @staticmethod
    def learn(
        agent: Agent,
        store: ChunkStore,
        request: Request,
        done: list[ItemKey],
        bad: list[ItemKey],
        task_message: str | None = None,
        step: bool | None = None,
    ) -> dict[str, list[str]]:
        """Record examples (called, not failed) and misses (selected, not called) in the chunk store.

        ``task_message``: the message of the task ``request`` is a later step of (``None``: the request
        starts its task, or its task is not known). ``step``: whether ``request`` is a later step
        (default: whether ``task_message`` is given). A step's text ("then post it there") says little on
        its own, so a step's calls become examples of the task's message (of the step's own message
        when its task is not known: never of another task's), and a step records no misses (a tool the
        task's first request offered may be the one a later step calls: the call removes that miss)."""
        step = task_message is not None if step is None else step
        selected = [  # what the search chose for this message (a tool carried or a companion was not)
            e.key
            for e in request.context.entries
            if e.key.kind is ItemKind.TOOL and e.mode is IncludeMode.AGENT and e.via not in ("task", "companion")
        ]
        good = [k for k in done if k not in bad]
        missed = [k for k in selected if k not in done and agent.has(k)] if not step else []
        if good:
            store.record_examples(request.message if task_message is None else task_message, good)
        if missed:
            store.record_examples(request.message, missed, "misses")
        return {"examples": [str(k) for k in good], "misses": [str(k) for k in missed], "failed": [str(k) for k in bad]}

    def count(self, agent: Agent, request: Request, done: list[ItemKey], bad: list[ItemKey]) -> None:
        """Count, per tool the request offered or the model called: offered, called, failed."""
        offered = {request.names[t["name"]] for t in request.tools if t["name"] in request.names}
        for key in (k for k in dict.fromkeys([*offered, *done]) if agent.has(k)):
            n = self.counts.setdefault(str(key), {"offered": 0, "called": 0, "failed": 0})
            n["offered"] += key in offered
            n["called"] += key in done
            n["failed"] += key in bad

    def copy(self) -> dict[str, dict[str, int]]:
        return {k: dict(v) for k, v in self.counts.items()}
