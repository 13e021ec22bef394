"""Request assembly: the messages and tools an LLM gets for a request context, and the token budget.

The order follows the reference system (notes §4): the system prompt, the history, one
``"Reference: ..."`` user message per reference, then one ``"Rule: ..."`` per rule (each group in
request-context order), then the user message. Tools are offered under the agent's tool names
(``<server>_<tool>`` where every provider accepts it: :mod:`contextsieve.agent.toolnames`). Stashed
segments a session retrieved (contextsieve's addition) come right after the history, oldest first, one
``"Stashed context (<type>, <time>): ..."`` user message each: they are earlier context brought back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import IncludeMode, Item, ItemKey, Reference, Rule, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.agent.toolnames import ToolNames
from contextsieve.errors import InputError, brief
from contextsieve.selection.context import ContextEntry, Dropped, RequestContext, StashedEntry
from contextsieve.session.session_items import tool_access, tool_available

if TYPE_CHECKING:
    from contextsieve.selection.search_trace import SearchTrace
    from contextsieve.stash.results import RetrieveTrace

__all__ = [
    "LOAD_CALL_ID",
    "Request",
    "SEARCH_TOOL",
    "anthropic_tool_result",
    "openai_tool_search_output",
    "tool_definition",
    "tool_catalog",
    "own_definition",
    "item_text",
    "stashed_text",
    "assemble",
    "fit_budget",
]


@dataclass(frozen=True)
class Request:
    """What to send to an LLM for one user message.

    Attributes:
        context: the items used and why.
        message: the user's message with ``@ref:`` / ``@rule:`` mentions removed.
        messages: system prompt, history, one ``"Reference: ..."`` and one ``"Rule: ..."`` user message per
            item (references first), then the user message: OpenAI chat shape.
        tools: the tools offered, as ``{"name", "description", "input_schema"}`` (:func:`tool_definition`).
        trace: what the search computed (``None`` for a request rebuilt from a stored context).
        stash_texts: the texts of the stashed segments sent (``context.stashed``), by segment id.
        stash_trace: what the stash's retrieve ranked (``None`` without a stash retrieve); ``explain``
            of a stashed segment reads it.
        catalog: every tool the session may use, as :func:`tool_definition`, sorted by name (the same
            list for every request of the session, its definitions shared by them: copy one before
            editing it, as the payload methods do): what a deferred offer declares.
        always: names of the catalog's tools of include mode ``always`` (a deferred offer never defers
            them).
        names: the agent's tool names when the request was built (:meth:`tool_key` reads a name back).
        task: for a later step of a task (the context's ``task_step``), the task's first message, which
            the step's outcome is learned under (``None``: a task's first request, or a request rebuilt
            from a stored context).
    """

    context: RequestContext
    message: str
    messages: list[dict[str, str]]
    tools: list[dict[str, Any]]
    trace: SearchTrace | None = field(default=None, compare=False, repr=False)
    stash_texts: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    stash_trace: RetrieveTrace | None = field(default=None, compare=False, repr=False)
    catalog: tuple[dict[str, Any], ...] = field(default=(), compare=False, repr=False)
    always: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    names: ToolNames = field(default_factory=lambda: ToolNames({}), compare=False, repr=False)
    task: str | None = field(default=None, compare=False, repr=False)

    def tool_key(self, name: str) -> ItemKey:
        """The agent's tool a model's tool ``name`` (from this request's payloads, or a call the model
        made) means; :class:`~contextsieve.errors.UnknownItemError` for a name no tool had."""
        return self.names.key(name)

    def openai(self) -> dict[str, Any]:
        """``{"messages": [...], "tools": [...]}`` for the OpenAI chat completions API."""
        tools = [
            {
                "type": "function",
                "function": {"name": t["name"], "description": t["description"], "parameters": dict(t["input_schema"])},
            }
            for t in self.tools
        ]
        return {"messages": self.messages, "tools": tools}

    def anthropic(self, tools: str = "selected") -> dict[str, Any]:
        """Keyword arguments of ``anthropic.Anthropic().messages.create`` (all but ``model`` and
        ``max_tokens``).

        Args:
            tools: ``"selected"`` (default): ``{"system": str, "messages", "tools"}`` with this request's
                tools. ``"deferred"``: the prompt cache is kept across the session. ``tools`` declares
                the search tool (:data:`SEARCH_TOOL`), the ``always`` tools, then every other tool of
                the session with ``defer_loading: true``, in an order that never changes within the
                session; ``cache_control`` sits on the system block and on the last tool that is not
                deferred (never on a deferred one: the API refuses that). This request's selected
                tools are loaded the API's own way: the messages end with a call of the search tool
                for the user's message and its ``tool_result``, whose content is one
                ``tool_reference`` block per selected tool (:func:`anthropic_tool_result`). Nothing that
                changes per request is in the cached prefix (tools, system).
        """
        system = self.messages[0]["content"] if self.messages and self.messages[0]["role"] == "system" else ""
        rest: list[dict[str, Any]] = [dict(m) for m in self.messages if m["role"] != "system"]
        if tools == "selected":
            return {"system": system, "messages": rest, "tools": [own_definition(t) for t in self.tools]}
        if tools != "deferred":
            raise InputError(f"tools must be 'selected' or 'deferred', got {brief(tools)}")
        declared: list[dict[str, Any]] = [dict(SEARCH_TOOL)]
        declared += [own_definition(t) for t in self.catalog if t["name"] in self.always]
        declared[-1]["cache_control"] = {"type": "ephemeral"}
        declared += [{**own_definition(t), "defer_loading": True} for t in self.catalog if t["name"] not in self.always]
        loaded = [t["name"] for t in self.tools if t["name"] not in self.always]
        call_id = LOAD_CALL_ID
        rest.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": call_id, "name": SEARCH_TOOL["name"], "input": {"query": self.message}}
                ],
            }
        )
        rest.append({"role": "user", "content": [anthropic_tool_result(call_id, loaded)]})
        return {
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": rest,
            "tools": declared,
        }

    def openai_responses(self, tools: str = "selected") -> dict[str, Any]:
        """Keyword arguments of ``openai.OpenAI().responses.create`` (all but ``model``):
        ``instructions`` (the system prompt), ``input`` (the other messages as input items) and
        ``tools`` (function tools).

        Args:
            tools: ``"selected"`` (default): this request's tools. ``"deferred"``: a client-executed
                ``tool_search`` tool, the ``always`` tools, then every other tool of the session with
                ``defer_loading: true``, in an order that never changes within the session (OpenAI
                caches the longest prefix it saw: instructions and tools stay byte-identical); this
                request's selected tools are loaded the API's own way: ``input`` ends with a
                ``tool_search_call`` for the user's message and its ``tool_search_output`` holding their
                definitions (:func:`openai_tool_search_output`).
        """
        system = self.messages[0]["content"] if self.messages and self.messages[0]["role"] == "system" else ""
        items: list[dict[str, Any]] = [
            {"role": m["role"], "content": m["content"]} for m in self.messages if m["role"] != "system"
        ]
        if tools == "selected":
            return {"instructions": system, "input": items, "tools": [_openai_function(t) for t in self.tools]}
        if tools != "deferred":
            raise InputError(f"tools must be 'selected' or 'deferred', got {brief(tools)}")
        declared: list[dict[str, Any]] = [
            {
                "type": "tool_search",
                "execution": "client",
                "description": SEARCH_TOOL["description"],
                "parameters": SEARCH_TOOL["input_schema"],
            }
        ]
        declared += [_openai_function(t) for t in self.catalog if t["name"] in self.always]
        declared += [
            {**_openai_function(t), "defer_loading": True} for t in self.catalog if t["name"] not in self.always
        ]
        loaded = [t for t in self.tools if t["name"] not in self.always]
        items.append(
            {
                "type": "tool_search_call",
                "call_id": LOAD_CALL_ID,
                "execution": "client",
                "arguments": {"query": self.message},
                "status": "completed",
            }
        )
        items.append(openai_tool_search_output(LOAD_CALL_ID, loaded))
        return {"instructions": system, "input": items, "tools": declared}


#: The search tool a deferred offer declares (answered by the client with contextsieve's search:
#: ``Session.search_tools``), in Anthropic's tool shape; the OpenAI offer uses its description and
#: schema for a client-executed ``tool_search``.
SEARCH_TOOL: dict[str, Any] = {
    "name": "search_tools",
    "description": (
        "Find more tools by what you need to do. The tools for the current request are already loaded; "
        "call this when you need one that is not."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what the tool should do"}},
        "required": ["query"],
    },
}
#: The id of the search call a deferred offer adds to load the request's selected tools.
LOAD_CALL_ID = "contextsieve_load"


def own_definition(t: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the tool definition ``t`` with its own copy of the schema's top level, to hand out: the
    definitions of :func:`tool_catalog` are shared by a session's requests (and a tool's schema with
    the tool), so a host that edits what it is given (``cache_control`` on the last tool,
    ``additionalProperties`` on a schema) edits its copy only."""
    return {**t, "input_schema": dict(t["input_schema"])}


def _openai_function(t: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": t["name"],
        "description": t["description"],
        "parameters": dict(t["input_schema"]),  # the request's own: catalog definitions are shared
        "strict": False,
    }


def anthropic_tool_result(tool_use_id: str, names: Sequence[str]) -> dict[str, Any]:
    """The ``tool_result`` block answering a call of the search tool: one ``tool_reference`` per tool
    name (a deferred tool the API then loads), or a text saying none was found."""
    content: list[dict[str, Any]] = [{"type": "tool_reference", "tool_name": n} for n in names]
    if not content:
        content = [{"type": "text", "text": "No tool matched."}]
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


def openai_tool_search_output(call_id: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``tool_search_output`` input item answering a client-executed ``tool_search`` call: the
    definitions of the tools found (``tools`` as :func:`tool_definition` gives them)."""
    return {
        "type": "tool_search_output",
        "call_id": call_id,
        "execution": "client",
        "status": "completed",
        "tools": [_openai_function(t) for t in tools],
    }


def tool_definition(tool: Tool, names: ToolNames) -> dict[str, Any]:
    """A tool as offered to the LLM: ``{"name", "description", "input_schema"}``, named by ``names``
    (the agent's :meth:`~contextsieve.agent.agent.Agent.tool_names`: ``<server>_<tool>`` where providers
    accept it, see :mod:`contextsieve.agent.toolnames`); a tool declared without a schema gets
    ``{"type": "object"}`` (an empty schema is refused by LLM APIs)."""
    schema = tool.input_schema or {"type": "object"}
    return {"name": names.name(tool.key), "description": tool.description, "input_schema": schema}


def item_text(item: Item, names: ToolNames) -> str:
    """What an item adds to a request: its message text, or its tool definition as JSON (for token
    counts; ``names`` are the agent's tool names)."""
    if isinstance(item, Tool):
        return json.dumps(tool_definition(item, names))
    return ("Reference: " if isinstance(item, Reference) else "Rule: ") + item.text


def stashed_text(entry: StashedEntry, text: str) -> str:
    """What a stashed segment adds to a request: ``"Stashed context (<type>, <time>): <text>"``."""
    return f"Stashed context ({entry.segment_type}, {entry.timestamp}): {text}"


def tool_catalog(agent: Agent, names: ToolNames, access: str) -> tuple[tuple[dict[str, Any], ...], frozenset[str]]:
    """Every tool a session with tool ``access`` may use (:func:`~contextsieve.session.session_items.tool_access`),
    as :func:`tool_definition` gives them, sorted by name, and the names of those of include mode
    ``always``: a request's :attr:`Request.catalog` and :attr:`Request.always`. Kept with the agent's
    :meth:`~contextsieve.agent.agent.Agent.table` (until its items change) for these ``names``: built
    afresh for every request it took 0.28 ms on a 507-tool agent (``benchmarks.speed.tool_catalog``). The
    definitions are shared by the requests; whatever hands one out for editing copies it. The agent's
    lock is held by the caller."""
    memo = agent.table().memo
    hit = memo.get(("catalog", access))
    if hit is not None and hit[0] is names:
        return hit[1], hit[2]
    usable = [
        t for t in agent.tools if access == "all" or (access == "no approval" and not agent.permission_required(t))
    ]
    catalog = tuple(sorted((tool_definition(t, names) for t in usable), key=lambda d: d["name"]))
    always = frozenset(names.name(t.key) for t in usable if agent.include_mode(t) is IncludeMode.ALWAYS)
    memo[("catalog", access)] = (names, catalog, always)
    return catalog, always


def assemble(
    agent: Agent,
    ctx: RequestContext,
    message: str,
    history: Iterable[tuple[str, str]],
    settings: AgentSettings,
    trace: SearchTrace | None = None,
    stash_texts: Mapping[str, str] | None = None,
    stash_trace: RetrieveTrace | None = None,
) -> Request:
    """The LLM request for ``ctx`` (items are looked up now, by key, so later edits show).

    Args:
        history: earlier ``(role, content)`` messages (system messages are skipped).
        settings: the session's settings (which tools it may offer: autonomous sessions filter some,
            :func:`~contextsieve.session.session_items.tool_access`).
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
    names = agent.tool_names()
    msgs += [{"role": "user", "content": item_text(r, names)} for r in items if isinstance(r, Reference)]
    msgs += [
        {"role": "user", "content": item_text(r, names)}
        for r in items
        if isinstance(r, Rule) and not isinstance(r, Reference)
    ]
    msgs.append({"role": "user", "content": message})
    tools = [tool_definition(t, names) for t in items if isinstance(t, Tool) and tool_available(agent, settings, t)]
    sent = {e.segment_id: texts[e.segment_id] for e in ctx.stashed if e.segment_id in texts}
    catalog, always = tool_catalog(agent, names, tool_access(agent, settings))
    return Request(ctx, message, msgs, tools, trace, sent, stash_trace, catalog, always, names)


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
