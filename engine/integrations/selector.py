"""The framework-neutral half of the integrations: per-request tool choice over a framework's tools.

A framework hands contextsieve its tools as names, descriptions and JSON schemas
(:class:`ToolSpec`); :class:`ToolSelector` keeps them as the tools of a contextsieve agent (or uses
an :class:`~contextsieve.Engine`'s agent, tools of an agent file and MCP servers included) and
answers, for the latest user turn and the tool results since, which of them to send
(:meth:`ToolSelector.choose`). The framework modules (:mod:`.langchain`, :mod:`.pydantic_ai`,
:mod:`.openai_agents`) only translate their tool objects and hooks to this.

When a choice fails (the embedder raises or returns NaN, the cache folder cannot be opened, a tool
description or message is not valid text...), every integration fails open through
:func:`~contextsieve.integrations.tool_choice.failed_choice`: the model call gets every tool the
framework gave it (a :class:`~contextsieve.integrations.tool_choice.FailedChoice` records it), one
warning is logged (logger ``contextsieve.integrations``) and the error is kept in the integration's
``last_error``; made with ``fail_open=False`` it raises
:class:`~contextsieve.errors.ToolChoiceError` instead, the error as its cause.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.agent.tool_limits import limit_tool
from contextsieve.engine import Engine
from contextsieve.errors import InputError, brief
from contextsieve.integrations.tool_choice import Choice, FailedChoice, error_text, logger
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.session.offer import OfferConfig
from contextsieve.session.session import Session
from contextsieve.stash.store import StashStore

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "ToolSpec",
    "ToolSelector",
    "SelectorOptions",
    "DEFAULT_SERVER",
    "learn_calls",
]

#: the server name tools built from a framework's own tool objects are kept under
DEFAULT_SERVER = "tools"


@dataclass(frozen=True)
class ToolSpec:
    """A framework's tool as contextsieve ranks it.

    Attributes:
        name: the name the framework sends it under (unique within ``server``).
        description: what it does (the main text it is ranked by; may be empty).
        input_schema: its JSON schema (parameter names and descriptions are ranked too; default ``{}``).
        server: the group it belongs to, e.g. an MCP server's name (default :data:`DEFAULT_SERVER`).
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    server: str = DEFAULT_SERVER

    def __post_init__(self) -> None:
        for f in ("name", "description", "server"):
            if not isinstance(getattr(self, f), str):
                raise InputError(f"a tool's {f} must be a str, got {brief(getattr(self, f))}")
        if not isinstance(self.input_schema, Mapping):
            raise InputError(f"tool {self.name!r}: input_schema must be a mapping, got {brief(self.input_schema)}")


class SelectorOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`ToolSelector.from_tools` besides ``always_include`` and
    ``max_tools``: the agent built, its engine and its session (each optional).
    :class:`~contextsieve.integrations.pydantic_ai.SelectedToolset` passes them on when it builds its
    selector.

    Attributes:
        rules: the agent's rules (their own include modes; default none).
        references: the agent's references (their own include modes; default none).
        system_prompt: the agent's system prompt (default ``""``).
        name: the agent's name (default ``"agent"``).
        embedder: :class:`~contextsieve.Engine`'s embedder (default ``None``: MiniLM, loaded on first need).
        cache_dir: :class:`~contextsieve.Engine`'s embedding cache (default ``None``: the user's cache;
            ``False``: none).
        offer: :meth:`Engine.session`'s ``offer``, how tools are offered across calls
            (:class:`~contextsieve.OfferConfig`; default ``None``: per call).
        stash: :meth:`Engine.session`'s ``stash``, a stash store for the session's pruned context
            (default ``None``: none).
        stash_session: :meth:`Engine.session`'s ``stash_session``, the session's name in the stash
            (default ``None``: a new random name).
        preset: :meth:`Engine.session`'s ``preset`` (default ``None``: the agent's settings as they are).
        server_descriptions: what each :attr:`ToolSpec.server` is for (embedding context of its tools, as
            an agent file's server ``description``; default ``None``: none).
    """

    rules: Iterable[Rule]
    references: Iterable[Reference]
    system_prompt: str
    name: str
    embedder: TextEmbedder | None
    cache_dir: str | os.PathLike[str] | bool | None
    offer: OfferConfig | None
    stash: StashStore | None
    stash_session: str | None
    preset: str | None
    server_descriptions: Mapping[str, str] | None


#: what :meth:`ToolSelector.from_tools` uses for an option not given
_OPTION_DEFAULTS: dict[str, Any] = {
    "rules": (),
    "references": (),
    "system_prompt": "",
    "name": "agent",
    "embedder": None,
    "cache_dir": None,
    "offer": None,
    "stash": None,
    "stash_session": None,
    "preset": None,
    "server_descriptions": None,
}
#: the names of :class:`SelectorOptions`
SELECTOR_OPTIONS = frozenset(_OPTION_DEFAULTS)


def _positive(value: int | None, what: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(f"{what} must be None or an int >= 1, got {brief(value)}")
    return value


class ToolSelector:
    """Chooses a framework's tools per model call through a contextsieve :class:`Session`.

    Args:
        session: the session whose agent holds the tools (see :meth:`from_tools` to build one from
            the framework's tools, or ``engine.session()`` over an agent file).
        always_include: framework tool names always sent (they do not count against ``max_tools``),
            as ``LLMToolSelectorMiddleware``'s argument of that name.
        max_tools: most tools chosen per call besides ``always_include`` (default ``None``: the
            session's own cut, ``tool_top_n`` and the score threshold).
        min_proposal: least similarity of a tool a tool result proposes (default
            0.3): short results ("230.00 EUR") otherwise pull in loosely related
            tools at 0.15-0.2.

    Thread-safe: calls of one selector run one at a time.
    """

    def __init__(
        self,
        session: Session,
        *,
        always_include: Iterable[str] = (),
        max_tools: int | None = None,
        min_proposal: float = 0.3,
    ) -> None:
        if not isinstance(session, Session):
            raise InputError(f"session must be a contextsieve Session, got {brief(session)}")
        if isinstance(always_include, str):
            raise InputError("always_include must be a list of tool names, not one str")
        self.session = session
        self.always_include = tuple(always_include)
        self.max_tools = _positive(max_tools, "max_tools")
        if isinstance(min_proposal, bool) or not isinstance(min_proposal, (int, float)) or not -1 <= min_proposal <= 1:
            raise InputError(f"min_proposal must be a number from -1 to 1, got {brief(min_proposal)}")
        self.min_proposal = float(min_proposal)
        self._lock = threading.RLock()
        for name in self.always_include:
            tool = self._tool(name)
            if tool is None:
                raise InputError(f"always_include names {name!r}, which is not one of the agent's tools")
            if self.session.agent.include_mode(tool) is not IncludeMode.ALWAYS:
                self.session.agent.upsert(_with_include(tool, IncludeMode.ALWAYS))
            if tool.key not in dict(self.session.items()):
                self.session.add(tool.key)

    @classmethod
    def from_tools(
        cls,
        tools: Iterable[ToolSpec],
        *,
        always_include: Iterable[str] = (),
        max_tools: int | None = None,
        **options: Unpack[SelectorOptions],
    ) -> ToolSelector:
        """A selector over ``tools`` (no agent file needed): an agent named ``name`` whose tools are
        ``tools`` (include mode ``agent``, those of ``always_include`` ``always``), with ``rules`` and
        ``references`` (their own include modes) and one server per :attr:`ToolSpec.server`.

        ``always_include`` and ``max_tools`` are the selector's own (see the class). ``**options``
        (:class:`SelectorOptions`, each described there; each optional): the agent's ``rules``,
        ``references``, ``system_prompt`` and ``name``; :class:`~contextsieve.Engine`'s ``embedder``
        and ``cache_dir``; :meth:`Engine.session`'s ``offer``, ``stash``, ``stash_session`` and
        ``preset``; and ``server_descriptions``. Over an agent file (its rules, references and MCP
        servers) build it as ``ToolSelector(Engine.from_file(path).session())`` instead.

        Raises:
            TypeError: a keyword argument that is none of these (as Python raises for a function).
        """
        unknown = [k for k in options if k not in SELECTOR_OPTIONS]
        if unknown:
            raise TypeError(f"ToolSelector.from_tools() got an unexpected keyword argument {unknown[0]!r}")
        o: dict[str, Any] = {**_OPTION_DEFAULTS, **options}
        specs = _specs(tools)
        always = set(always_include) if not isinstance(always_include, str) else set()
        agent = Agent(
            name=o["name"], system_prompt=o["system_prompt"], rules=list(o["rules"]), references=list(o["references"])
        )
        about = dict(o["server_descriptions"] or {})
        for server in dict.fromkeys(s.server for s in specs):
            agent.add_server(
                McpServer(
                    server,
                    default_include=IncludeMode.AGENT,
                    default_permission_required=False,
                    description=about.get(server, ""),
                )
            )
        for s in specs:
            agent.upsert(_tool(s, IncludeMode.ALWAYS if s.name in always else None))
        session = Engine(agent, embedder=o["embedder"], cache_dir=o["cache_dir"]).session(
            preset=o["preset"], offer=o["offer"], stash=o["stash"], stash_session=o["stash_session"]
        )
        return cls(session, always_include=always_include, max_tools=max_tools)

    # -- the tools ---------------------------------------------------------------------------------

    def _tool(self, name: str) -> Tool | None:
        """The agent's tool a framework calls ``name``: by its own name (first server in order) or by
        its offered name (:meth:`Agent.tool_names`, ``<server>_<tool>`` where valid)."""
        tools = self.session.agent.tools
        for t in tools:
            if t.name == name:
                return t
        key = self.session.agent.tool_names().get(name)
        return None if key is None else next((t for t in tools if t.key == key), None)

    def name_of(self, key: ItemKey) -> str:
        """The framework's name of the agent's tool ``key`` (its own name)."""
        return key.name

    def sync(self, tools: Iterable[ToolSpec], *, servers: Iterable[str] | None = None) -> int:
        """Make the agent's tools of the servers in ``tools`` (and of ``servers``, default none more)
        equal to ``tools``: new tools are added (include ``agent``), changed descriptions or schemas
        replaced (re-embedded on the next call), tools of those servers no longer listed removed (a
        server named in ``servers`` with no tool in ``tools`` is emptied). Returns how many changed.
        For frameworks whose tool lists change between calls (MCP servers)."""
        specs = _specs(tools)
        if isinstance(servers, str):
            raise InputError("servers must be a list of server names, not one str")
        agent = self.session.agent
        changed = 0
        with self._lock, agent.lock:
            touched = dict.fromkeys([*(servers or ()), *(s.server for s in specs)])
            for server in touched:
                if server not in agent.servers:
                    agent.add_server(
                        McpServer(server, default_include=IncludeMode.AGENT, default_permission_required=False)
                    )
            have = {t.key: t for t in agent.tools if t.server in touched}
            for s in specs:
                new = _tool(s, IncludeMode.ALWAYS if s.name in self.always_include else None)
                old = have.pop(new.key, None)
                if old is None or (old.description, old.input_schema, old.include) != (
                    new.description,
                    new.input_schema,
                    new.include,
                ):
                    agent.upsert(new)
                    changed += 1
                    if new.include is IncludeMode.ALWAYS:
                        self.session.add(new.key)
            for key in have:
                agent.delete(key)
                changed += 1
        return changed

    # -- choosing -----------------------------------------------------------------------------------

    def choose(
        self,
        message: str,
        *,
        tool_results: Sequence[str] = (),
        available: Iterable[str] | None = None,
    ) -> Choice:
        """The tools to send for a model call.

        Args:
            message: the conversation's latest user turn.
            tool_results: texts of the tool results since that turn (newest last); each may point to
                more tools (:meth:`Session.expand_from`; the last 4 are read).
            available: the framework names of the tools it could send now (default: every tool of the
                agent); tools outside it are never chosen.
        """
        if isinstance(tool_results, str) or not all(isinstance(t, str) for t in tool_results):
            raise InputError("tool_results must be a sequence of str")
        allowed = None if available is None else set(available)
        with self._lock:
            request = self.session.build_request(message)
            always = {self._tool(n).key for n in self.always_include if self._tool(n) is not None}  # type: ignore[union-attr]
            scores = {e.key: (e.score if e.score is not None else float("inf")) for e in request.context.entries}
            offered = [
                tool
                for tool in (self.session.agent.get(request.tool_key(t["name"])) for t in request.tools)
                if isinstance(tool, Tool)
            ]
            proposed: list[Tool] = []
            seen = {t.key for t in offered}
            for text in list(tool_results)[-4:]:
                if not text.strip():
                    continue
                for e in self.session.expand_from(text).entries:
                    if e.key.kind is ItemKind.TOOL and e.key not in seen and (e.score or 0.0) >= self.min_proposal:
                        tool = self.session.agent.get(e.key)
                        if isinstance(tool, Tool):
                            proposed.append(tool)
                            scores[e.key] = e.score or 0.0
                            seen.add(e.key)
            offered += proposed
            named = {t.key: t.name for t in offered}  # the name the framework has it under
            if allowed is not None:
                for t in offered:
                    named[t.key] = t.name if t.name in allowed else request.names.name(t.key)
                offered = [t for t in offered if named[t.key] in allowed]
            dropped: list[Tool] = []
            if self.max_tools is not None:
                ranked = sorted((t for t in offered if t.key not in always), key=lambda t: -scores.get(t.key, 0.0))
                keep = {t.key for t in ranked[: self.max_tools]}
                dropped = [t for t in ranked if t.key not in keep]
                offered = [t for t in offered if t.key in always or t.key in keep]
            return Choice(
                tuple(named[t.key] for t in offered),
                request,
                tuple(named[t.key] for t in proposed if t in offered),
                tuple(named[t.key] for t in dropped),
                tuple(t.key for t in offered),
            )

    def record_calls(self, choice: Choice, called: Iterable[str]) -> list[ItemKey]:
        """Learning from use: the model called ``called`` (framework tool names) after ``choice``, so
        ``choice``'s message becomes an example request of each of them that the choice offered
        (:meth:`Session.record_tool_calls`, kept with the session's engine's history: see
        docs/selection.md). Names the choice did not offer are ignored; no misses are recorded (a
        framework asks again after each tool result, with the same message). Returns the tools recorded."""
        if not isinstance(choice, Choice):
            raise InputError(f"record_calls takes a Choice, got {brief(choice)}")
        if isinstance(called, str):
            raise InputError("called must be a list of tool names, not one str")
        offered = dict(zip(choice.tools, choice.keys))
        keys = list(dict.fromkeys(offered[n] for n in called if isinstance(n, str) and n in offered))
        if keys and choice.request.message.strip():
            with self._lock:
                self.session.record_tool_calls(choice.request.message, keys)
        return keys


def learn_calls(
    selector: ToolSelector | None, choice: Choice | FailedChoice | None, called: Iterable[object]
) -> tuple[list[ItemKey], Exception | None]:
    """A hook's learning from use: :meth:`ToolSelector.record_calls` of the tools the model called in
    its reply to ``choice`` (the str names of ``called``), failing open. Nothing is recorded for a
    :class:`FailedChoice`, without a selector or without a name. Returns the tools recorded and the
    error recording raised (``None`` without one): that error is logged (one warning, logger
    ``contextsieve.integrations``), never raised, so the agent goes on without this lesson."""
    names = [n for n in called if isinstance(n, str)]
    if selector is None or not isinstance(choice, Choice) or not names:
        return [], None
    try:
        return selector.record_calls(choice, names), None
    except Exception as e:  # a hook fails open
        logger.warning("contextsieve: the tools the model called were not recorded (%s)", error_text(e))
        return [], e


def _specs(tools: Iterable[ToolSpec]) -> list[ToolSpec]:
    if isinstance(tools, (str, bytes, Mapping)):
        raise InputError(f"tools must be a list of ToolSpec, got {brief(tools)}")
    specs = list(tools)
    for s in specs:
        if not isinstance(s, ToolSpec):
            raise InputError(f"tools must be ToolSpec objects, got {brief(s)}")
    return specs


def _tool(spec: ToolSpec, include: IncludeMode | None = None) -> Tool:
    """The agent's tool for a framework's tool, its description and schema held to
    :class:`~contextsieve.agent.tool_limits.ToolLimits` (a framework's tools often come from MCP servers: a 1 MB
    description would stall every choice). Only what contextsieve ranks by is cut: the framework still
    sends its own definition."""
    description, schema, note = limit_tool(spec.description, dict(spec.input_schema))
    return Tool(
        spec.server,
        spec.name,
        description,
        schema,
        include=include,
        permission_required=False,
        cut_note=note,
    )


def _with_include(tool: Tool, include: IncludeMode) -> Tool:
    return Tool(
        tool.server,
        tool.name,
        tool.description,
        tool.input_schema,
        include=include,
        permission_required=tool.permission_required,
        summary=tool.summary,
        cut_note=tool.cut_note,
    )
