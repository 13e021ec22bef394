"""The items a session holds itself (its ``always`` items at creation, then what the user adds or
removes) and which of the agent's items a request may search for (:class:`SessionItems`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.errors import InputError, brief
from contextsieve.selection.context import ContextEntry

__all__ = ["SessionItems", "tool_access", "tool_available"]

_SESSION_ORDER = {ItemKind.REFERENCE: 0, ItemKind.RULE: 1, ItemKind.TOOL: 2}  # always items: references, rules, tools
_MENTION = re.compile(r"@(ref|rule):([\w-]+)")


def tool_access(agent: Agent, settings: AgentSettings) -> str:
    """Which of the agent's tools a session with ``settings`` may offer: ``"all"``; ``"no approval"``
    (an autonomous agent with ``tool_permission="tool"``: the tools whose calls need no approval); or
    ``"none"`` (an autonomous agent whose every tool would need approval)."""
    if not agent.autonomous or settings.tool_permission == "never":
        return "all"
    return "no approval" if settings.tool_permission == "tool" else "none"


def tool_available(agent: Agent, settings: AgentSettings, tool: Tool) -> bool:
    """Whether a session with ``settings`` may offer ``tool``: autonomous agents' sessions drop tools
    that would need approval (``tool_permission``; :func:`tool_access`)."""
    access = tool_access(agent, settings)
    return access == "all" or (access == "no approval" and not agent.permission_required(tool))


class SessionItems:
    """A session's own items, in order: key -> include mode (``always`` or ``manual``).

    At creation it holds the agent's ``always`` items: references, then rules (each by priority, then
    name), then tools (server, then tool order). ``always`` items the agent gains later (a server listed
    after the session began, a tool a server added) join it at its next use (:meth:`sync`), after the
    others. An ``always`` item removed stays removed; adding it back makes it ``manual``. An item the
    agent no longer has (a tool its server stopped listing) is left out of requests and comes back with
    its mode when the agent has it again. Not thread-safe: the session holds its lock and the agent's
    around it.
    """

    def __init__(self, agent: Agent) -> None:
        self.modes: dict[ItemKey, IncludeMode] = {}
        self.seen: set[ItemKey] = set()  # the agent's always items this session has taken (or was loaded past)
        self._shape: tuple[int, ...] | None = None
        self.sync(agent)

    def sync(self, agent: Agent) -> None:
        """Take the ``always`` items the agent gained since the last call (at once when its items did
        not change)."""
        table = agent.table()
        if table.shape == self._shape:
            return
        self._shape = table.shape
        new = [table.items[i] for i in np.flatnonzero(table.always) if table.keys[i] not in self.seen]
        for it in sorted(new, key=lambda it: _SESSION_ORDER[it.kind]):  # stable
            self.modes.setdefault(it.key, IncludeMode.ALWAYS)
            self.seen.add(it.key)

    def items(self) -> list[tuple[ItemKey, IncludeMode]]:
        return list(self.modes.items())

    def replace(self, agent: Agent, items: Iterable[tuple[ItemKey | str, IncludeMode | str]]) -> None:
        """Set the items as a whole; every key and mode is checked before anything changes. The agent's
        ``always`` items now are taken as seen: one not among ``items`` stays out."""
        new: dict[ItemKey, IncludeMode] = {}
        for key, mode in items:
            try:
                m = IncludeMode(mode)
            except ValueError as e:
                raise InputError(f"unknown include mode {brief(mode)}") from e
            new[agent.get(key).key] = m
        self.modes = new
        table = agent.table()
        self.seen = {table.keys[i] for i in np.flatnonzero(table.always)} | set(new)
        self._shape = table.shape

    def add(self, agent: Agent, key: ItemKey | str) -> None:
        self.modes.setdefault(agent.get(key).key, IncludeMode.MANUAL)

    def remove(self, agent: Agent, key: ItemKey | str) -> None:
        self.modes.pop(agent.get(key).key, None)

    def take_mentions(self, agent: Agent, message: str) -> str:
        """Add the message's ``@ref:name`` / ``@rule:name`` items as manual; return the message without them."""
        for kind, name in _MENTION.findall(message):
            self.add(agent, ItemKey(ItemKind.REFERENCE if kind == "ref" else ItemKind.RULE, name))
        return " ".join(_MENTION.sub(" ", message).split())

    def entries(self, agent: Agent) -> list[ContextEntry]:
        """The items the agent has as request context entries, in order (with their priorities)."""
        return [
            ContextEntry(k, m, priority=getattr(agent.get(k), "priority", None))
            for k, m in self.modes.items()
            if agent.has(k)
        ]

    def searchable(self, agent: Agent, settings: AgentSettings) -> np.ndarray:
        """Per item position of the agent's table: whether search may choose it now (agent mode, not
        held by the session, and, for a tool, usable in this session)."""
        table = agent.table()
        mask = table.agent.copy()
        if agent.autonomous:
            mode = settings.tool_permission
            if mode == "always":
                mask &= ~table.tool
            elif mode == "tool":
                mask &= ~table.needs_permission
        for key in self.modes:
            pos = table.position.get(key)
            if pos is not None:
                mask[pos] = False
        return mask
