"""The agent: its rules, references, MCP servers and tools, system prompt and default settings.

The agent is the source of truth; sessions copy its settings and may override them for themselves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypedDict

import numpy as np

from contextsieve.agent.items import IncludeMode, Item, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.agent.toolnames import ToolNames, tool_names
from contextsieve.choices import (
    ExpansionSource,
    KeywordFusion,
    KeywordRole,
    Preset,
    QueryPooling,
    QuerySplit,
    RelationPooling,
    ToolDomain,
    ToolPermission,
    allowed,
)
from contextsieve.errors import InputError, UnknownItemError, brief

__all__ = [
    "AgentSettings",
    "SettingsOverrides",
    "McpServer",
    "Agent",
    "ItemTable",
    "UnknownItemError",
    "PRESETS",
    "DOMAIN_SETTINGS",
    "OUTCOME_WEIGHT",
    "MISS_SIMILARITY",
]

#: Similarity under which an item needs keyword evidence to be selected (``context_min_score``);
#: chosen with ``python -m benchmarks.small_talk`` (docs/selection.md): the highest floor that lowers
#: recall on none of the catalogs.
CONTEXT_MIN_SCORE = 0.15

#: Default ``outcome_weight``: the most ranking score a tool loses for a request close to its
#: recorded misses (chosen with ``python -m benchmarks.tool_outcomes``, docs/selection.md).
OUTCOME_WEIGHT = 0.2
#: Cosine between a request and a recorded miss from which the miss lowers the tool's score.
MISS_SIMILARITY = 0.7

#: Selection presets (the seeds' "Aggressive / Normal / Conservative"): aggressive keeps the context
#: small, conservative larger (and adds one expansion pass: items closely related to the chosen ones);
#: "reference" selects as the reference system does (one shared top-5, similarity only, sentences).
#: Explicit settings given with a preset win over it.
PRESETS: dict[str, dict[str, Any]] = {
    "aggressive": {
        "context_top_k": 10,
        "context_top_n": 3,
        "tool_top_n": 5,
        "context_min_ratio": 0.5,
        "context_include_score": 0.8,
        "expansion_depth": 0,
    },
    "normal": {
        "context_top_k": 20,
        "context_top_n": 5,
        "tool_top_n": 10,
        "context_min_ratio": 0.3,
        "context_include_score": 0.7,
        "expansion_depth": 0,
    },
    "conservative": {
        "context_top_k": 40,
        "context_top_n": 8,
        "tool_top_n": 15,
        "context_min_ratio": None,
        "context_include_score": 0.6,
        "expansion_depth": 1,
        "expansion_threshold": 0.75,
        "expansion_top_n": 3,
    },
    "reference": {
        "context_top_k": 20,
        "context_top_n": 5,
        "context_include_score": 0.7,
        "context_min_ratio": None,
        "context_min_score": None,
        "tool_domain": "shared",
        "keyword_weight": 0.0,
        "keyword_role": "rerank",
        "query_split": "sentences",
        "tool_query_split": "sentences",
        "expansion_depth": 0,
    },
}


#: (name, low, high, may be None) of every numeric setting; int bounds mean the value must be an int.
_NUMERIC_SETTINGS = (
    ("context_top_k", 1, 100, False),
    ("context_top_n", 1, 50, False),
    ("tool_top_n", 1, 50, False),
    ("context_include_score", 0.0, 1.0, False),
    ("temperature", 0.0, 1.0, False),
    ("top_p", 0.0, 1.0, False),
    ("max_chat_turns", 1, 10**6, False),
    ("max_output_tokens", 1, 10**7, False),
    ("token_budget", 0, 10**9, True),
    ("min_representation_floor", -1.0, 1.0, True),
    ("min_representation_cap", 0, 100, False),
    ("expansion_depth", 0, 5, False),
    ("expansion_threshold", -1.0, 1.0, False),
    ("expansion_top_n", 0, 50, False),
    ("max_query_chunks", 1, 1000, False),
    ("expansion_chunk_cap", 1, 1000, False),
    ("keyword_weight", 0.0, 10.0, False),
    ("context_min_ratio", 0.0, 1.0, True),
    ("context_min_score", -1.0, 1.0, True),
    ("server_weight", 0.0, 10.0, False),
    ("prf_weight", 0.0, 1.0, False),
    ("prf_depth", 0, 50, False),
    ("outcome_weight", 0.0, 1.0, False),
)
#: (name, allowed values) of every string choice setting.
_CHOICE_SETTINGS = (
    ("query_pooling", allowed(QueryPooling)),
    ("tool_permission", allowed(ToolPermission)),
    ("expansion_source", allowed(ExpansionSource)),
    ("relation_pooling", allowed(RelationPooling)),
    ("keyword_fusion", allowed(KeywordFusion)),
    ("keyword_role", allowed(KeywordRole)),
    ("query_split", allowed(QuerySplit)),
    ("tool_query_split", allowed(QuerySplit)),
    ("tool_domain", allowed(ToolDomain)),
)
#: Settings a domain (tools) may override through ``tool_settings``: everything that steers selection.
DOMAIN_SETTINGS = frozenset(
    {
        "context_top_k",
        "context_top_n",
        "context_include_score",
        "keyword_weight",
        "query_pooling",
        "min_representation_floor",
        "min_representation_cap",
        "expansion_depth",
        "expansion_threshold",
        "expansion_top_n",
        "expansion_chunk_cap",
        "expansion_source",
        "relation_pooling",
        "keyword_fusion",
        "keyword_role",
        "context_min_ratio",
        "context_min_score",
        "server_weight",
        "query_split",
        "prf_weight",
        "prf_depth",
        "outcome_weight",
    }
)


class SettingsOverrides(TypedDict, total=False):
    """The settings a session or one request may override, by name, typed as in :class:`AgentSettings`
    (whose docstring gives each one's range and default). ``Session(...)``, ``Engine.session(...)``,
    ``Engine.select(...)`` and ``Session.build_request(...)`` take them as keyword arguments; a test
    keeps this list equal to :class:`AgentSettings`' fields."""

    context_top_k: int
    context_top_n: int
    tool_top_n: int
    context_include_score: float
    max_chat_turns: int
    max_output_tokens: int
    temperature: float
    top_p: float
    tool_permission: ToolPermission
    model: str | None
    token_budget: int | None
    min_representation_floor: float | None
    min_representation_cap: int
    expansion_depth: int
    expansion_threshold: float
    expansion_top_n: int
    expansion_chunk_cap: int
    query_pooling: QueryPooling
    expansion_source: ExpansionSource
    relation_pooling: RelationPooling
    tool_settings: Mapping[str, Any] | None
    keyword_weight: float
    keyword_fusion: KeywordFusion
    max_query_chunks: int
    keyword_role: KeywordRole
    context_min_ratio: float | None
    context_min_score: float | None
    query_split: QuerySplit
    tool_query_split: QuerySplit
    server_weight: float
    tool_domain: ToolDomain
    prf_weight: float
    prf_depth: int
    outcome_weight: float


@dataclass(frozen=True)
class AgentSettings:
    """Settings an agent gives its sessions (names and defaults as in the reference system).

    Attributes:
        context_top_k: chunks kept from the semantic search before grouping by item (1-100, default 20).
        context_top_n: items to aim for from semantic search (1-50, default 5); with tools in a domain
            of their own (``tool_domain``, the default) the rules and references.
        tool_top_n: tools to aim for when tools are a domain of their own (1-50, default 10; a
            ``context_top_n`` in ``tool_settings`` wins). With ``context_min_ratio`` it is a cap.
        context_include_score: items at or above this similarity are always kept (0-1, default 0.7).
        max_chat_turns: default 20. max_output_tokens: default 1000.
        temperature: 0-1, default 0.5. top_p: 0-1, default 0.5.
        tool_permission: ``"always"``, ``"never"`` or ``"tool"`` (ask per tool; default).
        model: ``"provider:modelId"`` or ``None``.
        token_budget: most tokens the request's rules, references and tools may take (``None``: no cap).
            Agent-mode items are dropped, lowest score first, to fit; always/manual items never are.
        min_representation_floor: when set, every query sentence whose best candidate scores at least
            this much gets an item, even if the max-pooled ranking left it out (default ``None``: off).
        min_representation_cap: most items added that way per request (default 2).
        expansion_depth: passes of context expansion after the query search (default 0: off).
        expansion_threshold: similarity an item needs to be pulled in by a selected item (default 0.75).
        expansion_top_n: most items each pass adds (default 3).
        expansion_chunk_cap: chunks of each selected item used as queries, best first (default 5).
        expansion_source: where expansion finds related items: ``"pass2"`` (default; the selected items'
            chunks search the others), ``"graph"`` (the item relationship graph, computed once per index
            and looked up) or ``"hybrid"`` (both, the higher score wins).
        relation_pooling: item-item similarity of the graph: ``"mean_embedding"`` (default),
            ``"best_pair"`` or ``"mean_pairs"``.
        query_pooling: how a chunk's scores against several query sentences combine: ``"max"``
            (default, the reference) or ``"mean"``.
        tool_settings: overrides for the tools domain (names from :data:`DOMAIN_SETTINGS`, e.g.
            ``{"context_top_n": 8, "keyword_weight": 0.5}``). When given, tools are searched as a domain
            of their own with these settings, rules + references with the others; expansion in each domain
            may still be pulled by items of either. Default ``None``: one shared search, as the reference.
        keyword_weight: weight of BM25 (normalised by the best candidate chunk's BM25 for the message)
            added to the dense score of each chunk (default 0.3; 0 = dense only, as the reference system).
            Chosen by ``python -m benchmarks.tool_selection`` (docs/selection.md).
        keyword_fusion: how the keyword term joins the dense score: ``"weighted"`` (default: dense +
            weight x normalised BM25) or ``"rrf"`` (reciprocal-rank fusion, the BM25 term scaled by the weight).
        max_query_chunks: most query sentences a message is searched with (1-1000, default 32), so a
            request's cost is bounded whatever the message: a longer message is searched with its first
            half and last half of that many sentences, and the request context notes it.
        keyword_role: ``"add"`` (default: a keyword match alone can bring in an item the model scored
            at or below 0) or ``"rerank"`` (a chunk needs a dense similarity above 0, as the reference;
            the keyword term only re-ranks).
        context_min_ratio: adaptive size: the items that fill up to top-N must score at least this share
            of the best item's ranking score, so top-N is a cap (0-1, default 0.3; ``None``: always fill
            up to top-N, as the reference).
        context_min_score: absolute floor on the evidence: an item below the include score is kept
            only if one of its top chunks matches a keyword of the message, or its similarity reaches
            this (twice this when no item of the domain matches a keyword: the message names nothing
            there). Default :data:`CONTEXT_MIN_SCORE`; ``None``: no floor, as the reference. Small
            talk ("hi", "thanks!") then selects nothing beyond ``always`` items, while a request
            that names a tool's words keeps it however low MiniLM scores it.
        prf_weight: pseudo-relevance feedback: after a first search, each query vector moves by this
            weight (0-1) toward the mean of the ``prf_depth`` best chunks and the search runs again
            (default 0: off; ``benchmarks.tool_selection`` measures it).
        prf_depth: chunks the feedback step averages (0-50, default 3).
        outcome_weight: learning from what the model did with an offer: a tool offered for earlier
            requests and not called (its misses, recorded by :meth:`Session.record_outcome`) loses up
            to this much ranking score (0-1; default :data:`OUTCOME_WEIGHT`) for a request as close to
            one of them as :data:`MISS_SIMILARITY` cosine or closer, linearly from 0 there to all of it
            at 1 (the same message). 0 turns it off; without recorded misses it changes nothing.
        tool_domain: ``"own"`` (default: tools are searched as a domain of their own, aiming for
            ``tool_top_n`` tools, with ``tool_settings`` applied; a long document cannot crowd the tools
            out) or ``"shared"`` (rules, references and tools compete for one ``context_top_n``, as the
            reference; ``tool_settings`` still give tools their own domain).
        server_weight: weight of the server profile score (a server's name, description and tool names,
            embedded as one vector, against the best query sentence) added to its tools' ranking scores
            (default 0: off), while the candidate tools come from two servers or more.
        query_split: what of a message the search uses: ``"sentences"`` (default, as the reference) or
            ``"steps"`` (the sentences, then the steps of the task: pieces split at line breaks, list
            markers, semicolons and CJK punctuation, and clauses joined by "and", "then", "und dann",
            "y luego", "然后"...; see :func:`contextsieve.retrieval.text.split_query`). With tools in their own
            domain this is for rules and references.
        tool_query_split: the same for the tools domain (default ``"steps"``: a task's steps often each
            need a tool; a ``query_split`` in ``tool_settings`` wins).
    """

    context_top_k: int = 20
    context_top_n: int = 5
    tool_top_n: int = 10
    context_include_score: float = 0.7
    max_chat_turns: int = 20
    max_output_tokens: int = 1000
    temperature: float = 0.5
    top_p: float = 0.5
    tool_permission: ToolPermission = "tool"
    model: str | None = None
    token_budget: int | None = None
    min_representation_floor: float | None = None
    min_representation_cap: int = 2
    expansion_depth: int = 0
    expansion_threshold: float = 0.75
    expansion_top_n: int = 3
    expansion_chunk_cap: int = 5
    query_pooling: QueryPooling = "max"
    expansion_source: ExpansionSource = "pass2"
    relation_pooling: RelationPooling = "mean_embedding"
    tool_settings: Mapping[str, Any] | None = None
    keyword_weight: float = 0.3
    keyword_fusion: KeywordFusion = "weighted"
    max_query_chunks: int = 32
    keyword_role: KeywordRole = "add"
    context_min_ratio: float | None = 0.3
    context_min_score: float | None = CONTEXT_MIN_SCORE
    query_split: QuerySplit = "sentences"
    tool_query_split: QuerySplit = "steps"
    server_weight: float = 0.0
    tool_domain: ToolDomain = "own"
    prf_weight: float = 0.0
    prf_depth: int = 3
    outcome_weight: float = OUTCOME_WEIGHT

    def __post_init__(self) -> None:
        for name, lo, hi, optional in _NUMERIC_SETTINGS:
            v = getattr(self, name)
            if v is None and optional:
                continue
            wrong_type = (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or (isinstance(lo, int) and not isinstance(v, int))
            )
            if wrong_type or not lo <= v <= hi:
                kind = "an int" if isinstance(lo, int) else "a number"
                raise InputError(
                    f"setting {name} must be {'None or ' if optional else ''}{kind} in {lo}..{hi}, got {brief(v)}"
                )
        for name, values in _CHOICE_SETTINGS:
            v = getattr(self, name)
            if not isinstance(v, str) or v not in values:
                raise InputError(f"setting {name} must be one of {', '.join(values)}, got {brief(v)}")
        if self.tool_settings is not None:
            if not isinstance(self.tool_settings, Mapping):
                raise InputError(
                    f"setting tool_settings must be a mapping or None, got {type(self.tool_settings).__name__}"
                )
            wrong = set(self.tool_settings) - DOMAIN_SETTINGS
            if wrong:
                raise InputError(f"tool_settings may set only {sorted(DOMAIN_SETTINGS)}; got {sorted(wrong)}")
            object.__setattr__(self, "tool_settings", MappingProxyType(dict(self.tool_settings)))
            try:
                self.for_tools()  # validates the values
            except InputError as e:
                raise InputError(f"tool_settings: {e}") from e

    @property
    def own_tool_domain(self) -> bool:
        """Whether tools are searched as a domain of their own (``tool_domain`` or ``tool_settings``)."""
        return self.tool_domain == "own" or bool(self.tool_settings)

    def for_tools(self) -> "AgentSettings":
        """The settings the tools domain is searched with: these, aiming for ``tool_top_n`` tools, then
        ``tool_settings`` (these settings as they are while tools share the search)."""
        if not self.own_tool_domain:
            return self
        overrides = {
            "context_top_n": self.tool_top_n,
            "query_split": self.tool_query_split,
            **(self.tool_settings or {}),
        }
        return dataclasses.replace(self, tool_settings=None, tool_domain="shared", **overrides)

    def with_overrides(self, preset: Preset | str | None = None, **overrides: Any) -> "AgentSettings":
        """A copy with a preset (see :data:`PRESETS`) and then some settings applied (unknown names are an error)."""
        if preset is not None:
            if not isinstance(preset, str) or preset not in PRESETS:
                raise InputError(f"unknown preset {brief(preset)}; presets: {sorted(PRESETS)}")
            overrides = {**PRESETS[preset], **overrides}
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise InputError(f"unknown settings {sorted(unknown)}; known: {sorted(known)}")
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True)
class McpServer:
    """An MCP server of the agent and the tool defaults it sets.

    Attributes:
        name: the server's name in the agent.
        config: its connection config as in the agent file (type, command/args or url, ...), kept as is.
        default_include: include mode of its tools that set none (``None``: ``always``).
        default_permission_required: for its tools that set none (``None``: required).
        description: what the server is for (a contextsieve extension: ``description`` in its config
            in the agent file; default ``""``); used as embedding context of its tools.
    """

    name: str
    config: dict[str, Any] = field(default_factory=dict)
    default_include: IncludeMode | None = None
    default_permission_required: bool | None = None
    description: str = ""


@dataclass(frozen=True)
class ItemTable:
    """An agent's items as arrays (see :meth:`Agent.table`): position ``i`` is ``items[i]``.

    Attributes:
        always / agent: the item's effective include mode is ``always`` / ``agent``.
        tool: the item is a tool. needs_permission: a tool whose calls need approval.
        position: item key -> position.
    """

    shape: tuple[int, ...]
    items: list[Item]
    keys: list[ItemKey]
    always: np.ndarray
    agent: np.ndarray
    tool: np.ndarray
    needs_permission: np.ndarray
    position: dict[ItemKey, int]


@dataclass
class Agent:
    """An agent's items and settings. Items are kept sorted (priority, then name) for rules/references.

    Change items through :meth:`upsert` and :meth:`delete`, servers through :meth:`add_server` and
    :meth:`remove_server` (they keep the order, the key index and :meth:`table` up to date; an item
    replaced in a list in place would not be seen by :meth:`table`).
    """

    name: str = "agent"
    system_prompt: str = ""
    settings: AgentSettings = field(default_factory=AgentSettings)
    rules: list[Rule] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    servers: dict[str, McpServer] = field(default_factory=dict)
    tools: list[Tool] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    autonomous: bool = False
    document: dict[str, Any] = field(default_factory=dict, repr=False)  # the file as read, for round trips
    catalog: Mapping[ItemKey, tuple[str, str]] = field(default_factory=dict, repr=False)  # tools a catalog described
    source: str = field(default="", compare=False)
    """Where the agent was loaded from (the agent file, resolved; ``""``: made in code): part of its
    :attr:`identity`."""
    load_warnings: tuple[str, ...] = field(default=(), compare=False)
    """What loading the agent file warned about, one message per problem (each also issued as an
    :class:`~contextsieve.errors.AgentFileWarning`): keys nobody reads, with their likely meaning;
    ``()`` for an agent made in code or a file without such problems."""
    loaded_keys: frozenset[ItemKey] = field(default=frozenset(), init=False, repr=False)  # the items it was made with
    lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)
    """Held while the agent changes and while a request reads it (see :class:`contextsieve.Session`)."""

    def __post_init__(self) -> None:
        self._check_unique()
        self.rules.sort(key=lambda r: (r.priority, r.name))
        self.references.sort(key=lambda r: (r.priority, r.name))
        self._reindex()
        self.loaded_keys = frozenset(self._by_key)

    def _reindex(self) -> None:
        with self.lock:
            self._by_key: dict[ItemKey, Item] = {it.key: it for it in self.all_items()}
            self._version = getattr(self, "_version", 0) + 1
            self._table: ItemTable | None = None
            self._names: tuple[tuple[int, ...], ToolNames] | None = None

    def table(self) -> ItemTable:
        """All items with their effective include modes and permissions as arrays, for per-request
        masks that cost no Python loop over the items. Rebuilt after :meth:`upsert`, :meth:`delete`,
        :meth:`add_server` or :meth:`remove_server`, and when a list was replaced or changed length."""
        with self.lock:
            return self._current_table()

    def _current_table(self) -> ItemTable:
        shape = (
            self._version,
            id(self.rules),
            len(self.rules),
            id(self.references),
            len(self.references),
            id(self.tools),
            len(self.tools),
            id(self.servers),
            len(self.servers),
        )
        if self._table is None or self._table.shape != shape:
            items = list(self.all_items())
            modes = [self.include_mode(it) for it in items]
            self._table = ItemTable(
                shape,
                items,
                [it.key for it in items],
                np.array([m is IncludeMode.ALWAYS for m in modes], dtype=bool),
                np.array([m is IncludeMode.AGENT for m in modes], dtype=bool),
                np.array([isinstance(it, Tool) for it in items], dtype=bool),
                np.array([isinstance(it, Tool) and self.permission_required(it) for it in items], dtype=bool),
                {it.key: i for i, it in enumerate(items)},
            )
        return self._table

    @property
    def identity(self) -> str:
        """What keeps this agent's data apart from every other agent's: its default stash store, its stash
        namespace (``agent:<identity>``) and its usage log are named by it. The declared name made
        file-safe (at most 60 characters), then, for an agent loaded from a file, ``-`` and 10 hex
        digits of the SHA-256 of the file's resolved path: two agents named alike (every ``agent.yaml``
        is "agent" without a declared name) in two folders never share data unless the user points them
        at one store and namespace on purpose. An agent made in code is its name alone."""
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", self.name).strip(".-")[:60] or "agent"
        if not self.source:
            return stem
        return f"{stem}-{hashlib.sha256(self.source.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"

    def tool_names(self) -> ToolNames:
        """The name a model sees for each tool, and the way back (:mod:`contextsieve.agent.toolnames` has the
        rule): what every payload, the gateway and the integrations name tools by. Rebuilt when the
        tools change, as :meth:`table`."""
        with self.lock:
            table = self._current_table()
            if self._names is None or self._names[0] != table.shape:
                self._names = (table.shape, tool_names(t.key for t in self.tools))
            return self._names[1]

    def _check_unique(self) -> None:
        seen: set[ItemKey] = set()
        for item in self.all_items():
            if item.key in seen:
                raise InputError(f"duplicate item {item.key}")
            seen.add(item.key)
        for tool in self.tools:
            if tool.server not in self.servers:
                raise InputError(f"tool {tool.key} names server {tool.server!r}, which the agent does not have")

    def all_items(self) -> Iterable[Item]:
        """Rules, then references, then tools (each list in its own order)."""
        yield from self.rules
        yield from self.references
        yield from self.tools

    def get(self, key: ItemKey | str) -> Item:
        """The item with ``key``; :class:`UnknownItemError` if there is none."""
        key = ItemKey.parse(key) if isinstance(key, str) else key
        if not isinstance(key, ItemKey):
            raise InputError(f"an item key must be a str or an ItemKey, got {type(key).__name__}")
        with self.lock:
            item = self._by_key.get(key)
            if item is None:  # the lists may have been changed directly: look again before failing
                self._reindex()
                item = self._by_key.get(key)
        if item is None:
            raise UnknownItemError(f"the agent has no {key}")
        return item

    def has(self, key: ItemKey | str) -> bool:
        """Whether the agent has an item with ``key`` (``False`` for text that is no item key)."""
        try:
            self.get(key)
        except (UnknownItemError, InputError):
            return False
        return True

    def add_server(self, server: McpServer) -> None:
        """Add an MCP server, or replace the one with the same name (its tools stay)."""
        with self.lock:
            self.servers[server.name] = server
            self._reindex()

    def remove_server(self, name: str) -> None:
        """Remove an MCP server and its tools; :class:`UnknownItemError` if there is none."""
        with self.lock:
            if name not in self.servers:
                raise UnknownItemError(f"the agent has no MCP server {name!r}")
            del self.servers[name]
            self.tools = [t for t in self.tools if t.server != name]
            self._reindex()

    def set_server_tools(self, server: str, tools: Sequence[Tool], listed: Mapping[ItemKey, tuple[str, str]]) -> None:
        """Replace every tool of ``server`` with ``tools`` (a live listing with the file's overrides
        applied: :func:`contextsieve.agent.agentfile.server_tools`); ``listed`` says which came from the
        listing (they are not written into the agent file). The tools keep their place among the
        servers' tools."""
        with self.lock:
            if server not in self.servers:
                raise UnknownItemError(f"the agent has no MCP server {server!r}")
            if any(t.server != server for t in tools):
                raise InputError(f"set_server_tools({server!r}) got tools of another server")
            at = next((i for i, t in enumerate(self.tools) if t.server == server), len(self.tools))
            others = [t for t in self.tools if t.server != server]
            at = sum(1 for t in self.tools[:at] if t.server != server)
            self.tools = others[:at] + list(tools) + others[at:]
            catalog = {k: v for k, v in self.catalog.items() if k.server != server}
            catalog.update(listed)
            self.catalog = catalog
            self._check_unique()
            self._reindex()

    def server_descriptions(self) -> dict[str, str]:
        """Server name -> description (the context tools are embedded with)."""
        return {name: server.description for name, server in self.servers.items()}

    def include_mode(self, item: Item) -> IncludeMode:
        """Effective include mode: a tool's own, else its server's default, else ``always``."""
        if isinstance(item, Tool):
            if item.include is not None:
                return item.include
            server = self.servers.get(item.server)
            return server.default_include if server and server.default_include is not None else IncludeMode.ALWAYS
        return item.include

    def permission_required(self, tool: Tool) -> bool:
        """Whether calling ``tool`` needs approval: its own setting, else its server's, else True."""
        if tool.permission_required is not None:
            return tool.permission_required
        server = self.servers.get(tool.server)
        return server.default_permission_required if server and server.default_permission_required is not None else True

    def _list_of(self, item: Item) -> list[Any]:
        """The list that holds items of ``item``'s kind."""
        lists: dict[ItemKind, list[Any]] = {
            ItemKind.RULE: self.rules,
            ItemKind.REFERENCE: self.references,
            ItemKind.TOOL: self.tools,
        }
        return lists[item.kind]

    def upsert(self, item: Item) -> None:
        """Add ``item``, or replace the item with the same key."""
        with self.lock:
            target = self._list_of(item)
            if isinstance(item, Tool) and item.server not in self.servers:
                raise InputError(f"tool {item.key} names server {item.server!r}, which the agent does not have")
            for i, old in enumerate(target):
                if old.key == item.key:
                    target[i] = item
                    break
            else:
                target.append(item)
            if item.kind is not ItemKind.TOOL:
                target.sort(key=lambda r: (r.priority, r.name))
            self._reindex()

    def delete(self, key: ItemKey | str) -> None:
        """Remove the item with ``key``; :class:`UnknownItemError` if there is none."""
        with self.lock:
            item = self.get(key)
            self._list_of(item).remove(item)
            self._reindex()
