"""The tools contextsieve gives a model, written once for MCP and every framework.

Each tool is one :class:`AgentTool`: its name, title, model-facing description, argument schema with
its limits, MCP annotations (``readOnlyHint`` / ``destructiveHint`` / ``idempotentHint`` /
``openWorldHint`` as the MCP specification defines them) and a plain function of what it works on
and the checked arguments, returning a JSON-ready dict. The MCP server (``serve``), the gateway and
the framework integrations only register these (``contextsieve.mcp_server.tool_surface``,
``contextsieve.integrations``): the text a model reads, the arguments it may pass and the result it
gets back are the same everywhere.

- Context tools (:data:`CONTEXT_TOOLS`) work on a :class:`~contextsieve.session.session.Session`
  (:class:`ContextScope`).
- Stash tools (:data:`~contextsieve.session.stash_agent_tools.STASH_TOOLS`, in
  :mod:`contextsieve.session.stash_agent_tools`) work on a :class:`~contextsieve.stash.store.StashStore`
  and one stash namespace (:class:`~contextsieve.session.stash_agent_tools.StashScope`).

A call's arguments are checked against the tool's schema first (:meth:`AgentTool.check`): a value a
model can fix (a wrong type, a number out of range, a missing or unknown argument) is a
:class:`~contextsieve.errors.ToolArgumentError` whose message says how, which every adapter returns
to the model as an error result (MCP ``isError``), never as a protocol error the model cannot see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from contextsieve.agent.items import ItemKey, ItemKind, Reference, Rule
from contextsieve.errors import InputError, ToolArgumentError, brief

if TYPE_CHECKING:
    from contextsieve.agent.agent import Agent
    from contextsieve.session.assembly import Request
    from contextsieve.session.requests import ToolMatch
    from contextsieve.session.session import Session

__all__ = [
    "AgentTool",
    "ContextScope",
    "CONTEXT_TOOLS",
    "SET_TASK",
    "context_result",
    "tool_match",
    "tool_list_chars",
    "tool_hints",
    "text_argument",
]


@dataclass(frozen=True)
class AgentTool:
    """One tool a model can call.

    Attributes:
        name: the tool's name (valid for every provider).
        title: a short human-readable title (MCP ``title``).
        description: what the tool is for and when to call it, for a model.
        properties: JSON-schema properties of its arguments (with their limits).
        required: the arguments that must be given.
        annotations: MCP tool annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``,
            ``openWorldHint``).
        run: ``run(scope, arguments) -> dict``: the work, on checked arguments (defaults filled in).
    """

    name: str
    title: str
    description: str
    properties: Mapping[str, Mapping[str, Any]]
    required: tuple[str, ...]
    annotations: Mapping[str, bool]
    run: Callable[[Any, dict[str, Any]], dict[str, Any]] = field(repr=False, compare=False)

    def input_schema(self, extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON schema of the arguments (``extra``: more properties an adapter adds, such as MCP's
        session handle)."""
        props = {**{k: dict(v) for k, v in self.properties.items()}, **{k: dict(v) for k, v in (extra or {}).items()}}
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if self.required:
            schema["required"] = list(self.required)
        return schema

    def check(self, arguments: object, extra: Sequence[str] = ()) -> dict[str, Any]:
        """``arguments`` checked against the schema, with defaults filled in (names in ``extra`` pass
        through unchecked: an adapter's own arguments). :class:`ToolArgumentError` says what to fix."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(f"{self.name}: the arguments must be an object, got {brief(arguments)}")
        unknown = [k for k in arguments if k not in self.properties and k not in extra]
        if unknown:
            raise ToolArgumentError(
                f"{self.name}: unknown argument {brief(unknown[0])}; it takes {', '.join(self.properties)}"
            )
        out: dict[str, Any] = {}
        for name, prop in self.properties.items():
            if name in arguments and arguments[name] is not None:
                out[name] = _checked(arguments[name], prop, f"{self.name}: {name}")
            elif name in self.required:
                raise ToolArgumentError(f"{self.name}: {name} is required")
            else:
                out[name] = prop.get("default")
        for name in extra:
            if name in arguments:
                out[name] = arguments[name]
        return out

    def call(self, scope: Any, arguments: object) -> dict[str, Any]:
        """Check ``arguments`` and run the tool on ``scope``."""
        return self.run(scope, self.check(arguments))

    def definition(self, extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """The tool as MCP lists it: ``name``, ``title``, ``description``, ``inputSchema``, ``annotations``."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema(extra),
            "annotations": dict(self.annotations),
        }


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (Mapping,),
}


def _checked(value: Any, prop: Mapping[str, Any], where: str) -> Any:
    """``value`` against one schema property (the subset the tools use); :class:`ToolArgumentError`."""
    kind = prop.get("type")
    if kind is not None:
        ok = isinstance(value, _TYPES[kind]) and (kind == "boolean" or not isinstance(value, bool))
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            value, ok = int(value), True
        if not ok:
            raise ToolArgumentError(f"{where} must be {_a(kind)}, got {brief(value)}")
    if "enum" in prop and value not in prop["enum"]:
        raise ToolArgumentError(f"{where} must be one of {', '.join(map(str, prop['enum']))}; got {brief(value)}")
    if kind in ("integer", "number"):
        lo, hi = prop.get("minimum"), prop.get("maximum")
        if (lo is not None and value < lo) or (hi is not None and value > hi) or value != value:
            raise ToolArgumentError(f"{where} must be from {lo} to {hi}, got {brief(value)}")
    if kind == "string":
        if "maxLength" in prop and len(value) > prop["maxLength"]:
            raise ToolArgumentError(f"{where} has {len(value)} characters; the limit is {prop['maxLength']}")
        if len(value) < prop.get("minLength", 0):
            raise ToolArgumentError(f"{where} must not be empty")
    if kind == "array":
        n, lo, hi = len(value), prop.get("minItems", 0), prop.get("maxItems")
        if n < lo or (hi is not None and n > hi):
            raise ToolArgumentError(f"{where} must have {lo} to {hi} items, got {n}")
        items = prop.get("items")
        value = [_checked(v, items, f"{where}[{i}]") if items else v for i, v in enumerate(value)]
    if kind == "object" and "properties" in prop:
        inner = prop["properties"]
        if prop.get("additionalProperties") is False:
            unknown = [k for k in value if k not in inner]
            if unknown:
                raise ToolArgumentError(f"{where}: unknown field {brief(unknown[0])}; fields: {', '.join(inner)}")
        for r in prop.get("required", ()):
            if r not in value:
                raise ToolArgumentError(f"{where}: {r} is required")
        value = {
            k: _checked(v, inner[k], f"{where}.{k}") if k in inner and v is not None else v for k, v in value.items()
        }
    return value


def _a(kind: str) -> str:
    return {"integer": "an integer", "object": "an object", "array": "an array"}.get(kind, f"a {kind}")


def tool_hints(read_only: bool, destructive: bool = False, idempotent: bool = False) -> Mapping[str, bool]:
    """MCP annotations: a read-only tool needs no more; a tool that writes says whether it may destroy
    and whether repeating it changes more."""
    if read_only:
        return MappingProxyType({"readOnlyHint": True})
    hints = {"destructiveHint": destructive}  # readOnlyHint false is the default (destructiveHint true)
    if idempotent:  # false is the default
        hints["idempotentHint"] = True
    return MappingProxyType(hints)


def text_argument(description: str = "") -> dict[str, Any]:
    """A text argument (its name says what it is unless ``description``); its length limit is the
    server's (``ServeConfig.max_message_chars``, checked by the adapter), not the schema's."""
    return {"type": "string", **({"description": description} if description else {})}


# -- context tools ----------------------------------------------------------------------------------


@dataclass
class ContextScope:
    """What the context tools work on: a session of an agent.

    Attributes:
        session: the contextsieve session.
        history_turns: request contexts the session keeps (default 100; older ones are dropped).
        select: the gateway's ``select(message, preset, settings) -> Request``: the request for a
            message built its own way (the offer changes); default ``None``: :meth:`Session.build_request`.
        offered: the gateway's tools on offer now, by name (what ``set_task`` returns).
        calling_tools: ``serve``'s note on how a host calls the tools ``select_context`` returns (serve
            does not forward tool calls; the gateway does): with it, the result has ``calling_tools``,
            the note and each tool's route (server and MCP tool name). Default ``None``: no such field.
    """

    session: Session
    history_turns: int = 100
    select: Callable[[str, str | None, dict[str, Any]], Request] | None = None
    offered: Callable[[], list[str]] | None = None
    calling_tools: str | None = None


def context_result(req: Request, agent: Agent, calling_tools: str | None = None) -> dict[str, Any]:
    """What ``select_context`` returns for a request: items (the reference shape), the texts of the
    selected rules, references and stashed segments, the tools to offer, what was dropped and noted;
    with ``calling_tools`` (see :class:`ContextScope`), how a host calls the tools and each one's route."""
    ctx = req.context
    texts = []
    for e in ctx.entries:
        if e.key.kind is not ItemKind.TOOL:
            item = agent.get(e.key)
            assert isinstance(item, (Rule, Reference))
            texts.append({"type": e.key.kind.value, "name": e.key.name, "text": item.text})
    texts += [
        {"type": "stash", "name": e.segment_id, "text": req.stash_texts[e.segment_id]}
        for e in ctx.stashed
        if e.segment_id in req.stash_texts
    ]
    out: dict[str, Any] = {
        "items": [e.to_dict() for e in ctx.entries] + [e.to_dict() for e in ctx.stashed],
        "texts": texts,
        "tools": req.tools,
        "dropped": [{**d.entry.to_dict(), "tokens": d.tokens, "reason": d.reason} for d in ctx.dropped],
        "notes": list(ctx.notes),
        "summary": ctx.summary(),
    }
    if calling_tools and req.tools:
        routes = {t["name"]: req.tool_key(t["name"]) for t in req.tools}
        out["calling_tools"] = {
            "how": calling_tools,
            "routes": {n: {"server": k.server, "tool": k.name} for n, k in routes.items()},
        }
    return out


def _select(scope: ContextScope, a: dict[str, Any]) -> dict[str, Any]:
    s = scope.session
    if scope.select is not None:
        req = scope.select(a["message"], a["preset"], a["settings"] or {})
    else:  # each call is a user message: a task of its own, as the gateway's (never a step of the last)
        s.new_task()
        req = s.build_request(a["message"], preset=a["preset"], **(a["settings"] or {}))
        s.record_reply(req, "")
        del s.history[: -2 * scope.history_turns]
    return context_result(req, s.agent, scope.calling_tools)


def tool_match(match: ToolMatch) -> dict[str, Any]:
    """A :meth:`Session.search_tools` hit as ``search_tools`` returns it: the tool as offered to a model
    (name, description, input_schema), its server and MCP name, and its score."""
    return {**match.definition, "server": match.tool.server, "tool": match.tool.name, "similarity": match.score}


def _search(scope: ContextScope, a: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [tool_match(m) for m in scope.session.search_tools(a["query"], a["limit"])]}


def _key(item: str) -> ItemKey:
    return ItemKey.parse(item)


def _explain(scope: ContextScope, a: dict[str, Any]) -> dict[str, Any]:
    item: ItemKey | str = a["item"] if a["item"].startswith("stash:") else _key(a["item"])
    ex = scope.session.explain(a["message"], item, new_task=True)  # as select_context builds it: a task's first
    return {**ex.__dict__, "text": str(ex)}


def _items(s: Session) -> dict[str, Any]:
    return {"items": [{"item": str(k), "includeMode": m.value} for k, m in s.items()]}


def _add(scope: ContextScope, a: dict[str, Any]) -> dict[str, Any]:
    scope.session.add(_key(a["item"]))
    return _items(scope.session)


def _remove(scope: ContextScope, a: dict[str, Any]) -> dict[str, Any]:
    scope.session.remove(_key(a["item"]))
    return _items(scope.session)


def _record(scope: ContextScope, a: dict[str, Any]) -> dict[str, Any]:
    names = scope.session.agent.tool_names()
    keys = [_key(t) if ":" in t else names.key(t) for t in a["tools"]]
    for k in keys:
        if k.kind is not ItemKind.TOOL:
            raise InputError(f"record_tool_calls: {k} is not a tool")
    scope.session.record_tool_calls(a["message"], keys)
    return {"recorded": [str(k) for k in dict.fromkeys(keys)]}


_ITEM = {
    "type": "string",
    "description": "rule:NAME, reference:NAME or tool:SERVER:NAME",
}

SELECT_CONTEXT = AgentTool(
    "select_context",
    "Select context",
    "Call with each user message: the rules, references and tools for its prompt, and why. Pass the returned "
    "session back as session.",
    {
        "message": text_argument(),
        "settings": {"type": "object", "description": 'e.g. {"context_top_n":8}'},
        "preset": {"type": "string", "enum": ["aggressive", "normal", "conservative", "reference"]},
    },
    ("message",),
    tool_hints(read_only=False, idempotent=True),
    _select,
)
SEARCH_TOOLS = AgentTool(
    "search_tools",
    "Search tools",
    "Find the agent's tools by what they do, best first.",
    {
        "query": text_argument("What the tool should do."),
        "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
    },
    ("query",),
    tool_hints(read_only=True),
    _search,
)
EXPLAIN = AgentTool(
    "explain",
    "Explain",
    "Why an item is or is not selected for a message.",
    {
        "message": text_argument(),
        "item": {**_ITEM, "description": "rule:NAME, reference:NAME, tool:SERVER:NAME or stash:ID"},
    },
    ("message", "item"),
    tool_hints(read_only=True),
    _explain,
)
ADD_TO_SESSION = AgentTool(
    "add_to_session",
    "Add to session",
    "Include an item in every later request.",
    {"item": _ITEM},
    ("item",),
    tool_hints(read_only=False, idempotent=True),
    _add,
)
REMOVE_FROM_SESSION = AgentTool(
    "remove_from_session",
    "Remove from session",
    "Leave an item out of later requests.",
    {"item": _ITEM},
    ("item",),
    tool_hints(read_only=False, destructive=True, idempotent=True),
    _remove,
)
RECORD_TOOL_CALLS = AgentTool(
    "record_tool_calls",
    "Record tool calls",
    "Record the tools called for a message; similar messages then select them.",
    {
        "message": text_argument(),
        "tools": {
            "type": "array",
            "items": {**_ITEM, "description": "tool:SERVER:NAME or called name"},
            "minItems": 1,
            "maxItems": 50,
        },
    },
    ("message", "tools"),
    tool_hints(read_only=False),
    _record,
)
SET_TASK = AgentTool(
    "set_task",
    "Set the task",
    "Call with each new user message: the tools offered change to the ones this task needs. Returns their names.",
    {"message": text_argument()},
    ("message",),
    tool_hints(read_only=False, idempotent=True),
    lambda scope, a: _set(scope, a["message"]),
)


def _set(scope: ContextScope, message: str) -> dict[str, Any]:
    if scope.select is None or scope.offered is None:
        raise InputError("set_task is a gateway's tool")
    scope.select(message, None, {})
    return {"tools": scope.offered()}


#: The context tools, in the order ``serve`` lists them.
CONTEXT_TOOLS: tuple[AgentTool, ...] = (
    SELECT_CONTEXT,
    SEARCH_TOOLS,
    EXPLAIN,
    ADD_TO_SESSION,
    REMOVE_FROM_SESSION,
    RECORD_TOOL_CALLS,
)


def tool_list_chars(tools: Sequence[AgentTool], extra: Mapping[str, Mapping[str, Any]] | None = None) -> int:
    """Characters of the tools' MCP definitions as compact JSON (what a host puts into every prompt)."""
    import json

    return sum(len(json.dumps(t.definition(extra), ensure_ascii=False, separators=(",", ":"))) for t in tools)
