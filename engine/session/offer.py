"""How a session offers tools across its requests: each request its own selection, or a stable offer
that only grows within a task (:class:`OfferConfig`, :class:`StableOffer`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import ItemKind
from contextsieve.errors import InputError, brief
from contextsieve.session.assembly import Request, own_definition

if TYPE_CHECKING:
    from contextsieve.session.requests import ToolMatch

__all__ = ["OfferConfig", "StableOffer"]


@dataclass(frozen=True, kw_only=True)
class OfferConfig:
    """How a session offers tools across its requests (for hosts without deferred loading: the MCP
    gateway, Chat Completions, frameworks); the deferred offers of :meth:`Request.anthropic` /
    :meth:`Request.openai_responses` keep the prompt cache by other means.

    Attributes:
        mode: ``"request"`` (default): each request offers its own selection, so the tools array
            changes from request to request (and with it the provider's prompt cache). ``"stable"``:
            within a task the offer only grows: a tool once offered stays, newly selected ones are
            appended in the order they were first selected, so consecutive requests send the same
            tools array unless something new is needed (:meth:`Session.new_task` starts over).
        budget: most tools a stable offer holds (default 30). Over it, the tools selected longest
            ago (by the last request that selected them; never one this request selected) are
            dropped first, which changes the array once.
        prefill: a stable offer's first request of a task also offers the best ``prefill`` tools of
            a tool search for its message (:meth:`Session.search_tools`, after the selected ones;
            within the budget), so that later steps of the task find theirs already offered and the
            array stays the same (default 0: off; more tools in context from the first step on, measured
            in ``benchmarks.quality.tool_offers``).
        grow: after a task's first request, add at most this many of a request's selected tools (its
            best by score) that are not offered yet (default None: every selected tool). With
            ``prefill``, later steps mostly find their tools offered and the array rarely changes.
        span: how long a stable offer grows: ``"task"`` (default: :meth:`Session.new_task` starts it
            over) or ``"session"`` (it grows across the session's tasks, within ``budget``: the MCP
            gateway's ``--stable-offer``, whose host's tool list then changes only when a task needs a
            tool not offered yet).
    """

    mode: str = "request"
    budget: int = 30
    prefill: int = 0
    grow: int | None = None
    span: str = "task"

    def __post_init__(self) -> None:
        if self.mode not in ("request", "stable"):
            raise InputError(f"offer mode must be 'request' or 'stable', got {brief(self.mode)}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or not 1 <= self.budget <= 1000:
            raise InputError(f"offer budget must be an int from 1 to 1000, got {brief(self.budget)}")
        if isinstance(self.prefill, bool) or not isinstance(self.prefill, int) or not 0 <= self.prefill <= self.budget:
            raise InputError(f"offer prefill must be an int from 0 to the budget, got {brief(self.prefill)}")
        if self.grow is not None and (isinstance(self.grow, bool) or not isinstance(self.grow, int) or self.grow < 0):
            raise InputError(f"offer grow must be None or an int >= 0, got {brief(self.grow)}")
        if self.span not in ("task", "session"):
            raise InputError(f"offer span must be 'task' or 'session', got {brief(self.span)}")


class StableOffer:
    """The tools a stable offer holds within a task (see :class:`OfferConfig`): tool prompt name ->
    the number of the last request that selected it (0: offered by the prefill, selected by none yet).
    Not thread-safe: the session holds its lock around it."""

    def __init__(self, config: OfferConfig) -> None:
        self.config = config
        self.offered: dict[str, int] = {}
        self.requests = 0

    def new_task(self) -> None:
        """Start over: the next request's offer is its own selection (and the prefill)."""
        self.offered.clear()

    def apply(self, request: Request, agent: Agent, search_tools: Callable[[str, int], list[ToolMatch]]) -> Request:
        """``request`` with the stable offer as its tools, the offer updated with its selection.

        Args:
            request: a request as the selection built it (its ``tools`` are the selected ones).
            agent: the session's agent (for tool names).
            search_tools: ``(message, limit) -> matches`` (:meth:`Session.search_tools`), for the prefill.
        """
        self.requests += 1
        defs = {t["name"]: t for t in request.catalog}
        first = not self.offered
        chosen = [t["name"] for t in request.tools]
        if not first and self.config.grow is not None:
            names = agent.tool_names()
            score = {names.name(e.key): e.score or 0.0 for e in request.context.entries if e.key.kind is ItemKind.TOOL}
            fresh = sorted((n for n in chosen if n not in self.offered), key=lambda n: -score.get(n, 0.0))
            chosen = [n for n in chosen if n in self.offered or n in fresh[: self.config.grow]]
        for t in request.tools:
            defs.setdefault(t["name"], t)
        for n in chosen:
            self.offered[n] = self.requests  # a new name is appended; a known one keeps its place
        if first and self.config.prefill and request.message.strip():
            room = self.config.budget - len(self.offered)
            for m in search_tools(request.message, min(50, self.config.prefill))[: max(0, room)]:
                name = m.definition["name"]
                if name in defs:
                    self.offered.setdefault(name, 0)  # 0: selected by no request yet, the first to go
        over = len(self.offered) - self.config.budget
        if over > 0:
            now = set(chosen)
            oldest = sorted((n for n in self.offered if n not in now), key=lambda n: self.offered[n])[:over]
            for n in oldest:
                del self.offered[n]
        gone = [n for n in self.offered if n not in defs]  # a tool the agent no longer has
        for n in gone:
            del self.offered[n]
        return dataclasses.replace(request, tools=[own_definition(defs[n]) for n in self.offered])
