"""Request assembly: the messages and tools an LLM gets for a request context, and the token budget.

The order follows the reference system (notes §4): the system prompt, the history, one
``"Reference: ..."`` user message per reference, then one ``"Rule: ..."`` per rule (each group in
request-context order), then the user message. Tools are offered as ``<server>_<tool>``. Stashed
segments a session retrieved (contextsieve's addition) come right after the history, oldest first, one
``"Stashed context (<type>, <time>): ..."`` user message each: they are earlier context brought back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contextsieve.agent import Agent
from contextsieve.context import ContextEntry, Dropped, RequestContext, StashedEntry
from contextsieve.items import IncludeMode, Item, Reference, Rule, Tool

if TYPE_CHECKING:
    from contextsieve.search import SearchTrace
    from contextsieve.stash import RetrieveTrace

__all__ = ["Request", "tool_definition", "item_text", "stashed_text", "assemble", "fit_budget"]


@dataclass(frozen=True)
class Request:
    """What to send to an LLM for one user message.

    Attributes:
        context: the items used and why.
        message: the user's message with ``@ref:`` / ``@rule:`` mentions removed.
        messages: system prompt, history, one ``"Reference: ..."`` and one ``"Rule: ..."`` user message per
            item (references first), then the user message: OpenAI chat shape.
        tools: the tools offered, as ``{"name": "<server>_<tool>", "description", "input_schema"}``.
        trace: what the search computed (``None`` for a request rebuilt from a stored context).
        stash_texts: the texts of the stashed segments sent (``context.stashed``), by segment id.
        stash_trace: what the stash's retrieve ranked (``None`` without a stash retrieve); ``explain``
            of a stashed segment reads it.
    """

    context: RequestContext
    message: str
    messages: list[dict[str, str]]
    tools: list[dict[str, Any]]
    trace: SearchTrace | None = field(default=None, compare=False, repr=False)
    stash_texts: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    stash_trace: RetrieveTrace | None = field(default=None, compare=False, repr=False)

    def openai(self) -> dict[str, Any]:
        """``{"messages": [...], "tools": [...]}`` for the OpenAI chat completions API."""
        tools = [
            {
                "type": "function",
                "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
            }
            for t in self.tools
        ]
        return {"messages": self.messages, "tools": tools}

    def anthropic(self) -> dict[str, Any]:
        """``{"system": ..., "messages": [...], "tools": [...]}`` for the Anthropic messages API."""
        system = self.messages[0]["content"] if self.messages and self.messages[0]["role"] == "system" else ""
        rest = [m for m in self.messages if m["role"] != "system"]
        return {"system": system, "messages": rest, "tools": [dict(t) for t in self.tools]}


def tool_definition(tool: Tool) -> dict[str, Any]:
    """A tool as offered to the LLM: ``{"name": "<server>_<tool>", "description", "input_schema"}``; a tool
    declared without a schema gets ``{"type": "object"}`` (an empty schema is refused by LLM APIs)."""
    schema = tool.input_schema or {"type": "object"}
    return {"name": f"{tool.server}_{tool.name}", "description": tool.description, "input_schema": schema}


def item_text(item: Item) -> str:
    """What an item adds to a request: its message text, or its tool definition as JSON (for token counts)."""
    if isinstance(item, Tool):
        return json.dumps(tool_definition(item))
    return ("Reference: " if isinstance(item, Reference) else "Rule: ") + item.text


def stashed_text(entry: StashedEntry, text: str) -> str:
    """What a stashed segment adds to a request: ``"Stashed context (<type>, <time>): <text>"``."""
    return f"Stashed context ({entry.segment_type}, {entry.timestamp}): {text}"


def assemble(
    agent: Agent,
    ctx: RequestContext,
    message: str,
    history: Iterable[tuple[str, str]],
    tool_available: Callable[[Tool], bool],
    trace: SearchTrace | None = None,
    stash_texts: Mapping[str, str] | None = None,
    stash_trace: RetrieveTrace | None = None,
) -> Request:
    """The LLM request for ``ctx`` (items are looked up now, by key, so later edits show).

    Args:
        history: earlier ``(role, content)`` messages (system messages are skipped).
        tool_available: whether a tool may be offered in this session (autonomous sessions filter some).
        stash_texts: the texts of ``ctx.stashed`` by segment id (a segment without one is left out).
    """
    msgs: list[dict[str, str]] = [{"role": "system", "content": agent.system_prompt}]
    msgs += [{"role": role, "content": content} for role, content in history if role != "system"]
    texts = stash_texts or {}
    msgs += [
        {"role": "user", "content": stashed_text(e, texts[e.segment_id])}
        for e in sorted(ctx.stashed, key=lambda e: e.timestamp)
        if e.segment_id in texts
    ]
    items = [agent.get(e.key) for e in ctx.entries]
    msgs += [{"role": "user", "content": item_text(r)} for r in items if isinstance(r, Reference)]
    msgs += [
        {"role": "user", "content": item_text(r)} for r in items if isinstance(r, Rule) and not isinstance(r, Reference)
    ]
    msgs.append({"role": "user", "content": message})
    tools = [tool_definition(t) for t in items if isinstance(t, Tool) and tool_available(t)]
    sent = {e.segment_id: texts[e.segment_id] for e in ctx.stashed if e.segment_id in texts}
    return Request(ctx, message, msgs, tools, trace, sent, stash_trace)


def fit_budget(
    entries: Sequence[ContextEntry | StashedEntry],
    budget: int,
    cost: Callable[[ContextEntry | StashedEntry], int],
) -> tuple[list[ContextEntry | StashedEntry], int, list[Dropped], list[str]]:
    """Drop agent and expansion items and stashed segments, lowest score first (later first on ties),
    until they fit ``budget`` tokens; ``always`` and ``manual`` items are never dropped.

    Returns:
        ``(kept entries, their tokens, dropped, notes)``.
    """
    costs = [cost(e) for e in entries]
    total = sum(costs)
    searched = (IncludeMode.AGENT, IncludeMode.EXPANSION, IncludeMode.STASH)
    fixed = sum(c for e, c in zip(entries, costs) if e.mode not in searched)
    notes = []
    if fixed > budget:
        notes.append(
            f"always and manual items alone take {fixed} tokens, over the budget of {budget}; they are never cut"
        )
    dropped: list[Dropped] = []
    candidates = [i for i, e in enumerate(entries) if e.mode in searched]
    for i in sorted(candidates, key=lambda i: (entries[i].score or 0.0, -i)):
        if total <= budget:
            break
        total -= costs[i]
        dropped.append(Dropped(entries[i], costs[i], f"token budget: the request was over {budget} tokens"))
    gone = {id(d.entry) for d in dropped}
    return [e for e in entries if id(e) not in gone], total, dropped, notes
