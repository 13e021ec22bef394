"""The agent: its rules, references, MCP servers and tools, system prompt and default settings
(:class:`~contextsieve.agent.settings.AgentSettings`, in :mod:`contextsieve.agent.settings`).

The agent is the source of truth; sessions copy its settings and may override them for themselves.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from contextsieve.agent.identity import path_identity, stem
from contextsieve.agent.items import IncludeMode, Item, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.agent.toolnames import NameBook, ToolNames, tool_names
from contextsieve.errors import InputError, UnknownItemError, check_text

__all__ = [
    "McpServer",
    "Agent",
    "ItemTable",
]


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


#: Numbers each item table a process builds (:attr:`ItemTable.shape`).
_TABLE_SERIAL = itertools.count(1)


@dataclass(frozen=True)
class ItemTable:
    """An agent's items as arrays (see :meth:`Agent.table`): position ``i`` is ``items[i]``.

    Attributes:
        always / agent: the item's effective include mode is ``always`` / ``agent``.
        tool: the item is a tool. needs_permission: a tool whose calls need approval.
        position: item key -> position.
        memo: what higher layers derive from these items and keep until they change (the session's
            tool catalog, :func:`contextsieve.session.assembly.tool_catalog`); dropped with the table.
        shape: a token no other table of the process has (the agent's version and a serial): what
            caches of the items are keyed on.
        sources / sizes: the agent's lists of rules, references and tools and its servers when the
            table was built, and their lengths (held, so a list replaced since is told by identity:
            an ``id`` could be reused once the old list is freed).
    """

    shape: tuple[int, ...]
    items: list[Item]
    keys: list[ItemKey]
    always: np.ndarray
    agent: np.ndarray
    tool: np.ndarray
    needs_permission: np.ndarray
    position: dict[ItemKey, int]
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    sources: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    sizes: tuple[int, ...] = field(default=(), compare=False, repr=False)


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
    """Where the agent was loaded from (the agent file, resolved; ``""``: made in code): what its
    :attr:`identity` is found by (:mod:`contextsieve.agent.identity`)."""
    agent_id: str = field(default="", compare=False)
    """The ``id`` the agent file declares (``""``: none): when given, it is the agent's :attr:`identity`."""
    load_warnings: tuple[str, ...] = field(default=(), compare=False)
    """What loading the agent file warned about, one message per problem (each also issued as an
    :class:`~contextsieve.errors.AgentFileWarning`): keys nobody reads, with their likely meaning;
    ``()`` for an agent made in code or a file without such problems."""
    loaded_keys: frozenset[ItemKey] = field(default=frozenset(), init=False, repr=False)  # the items it was made with
    lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)
    """Held while the agent changes and while a request reads it (see :class:`contextsieve.Session`)."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InputError(f"the agent's name must be a string, got {type(self.name).__name__}")
        check_text(self.name, "the agent's name")  # it keys the agent's data: a lone surrogate is no key
        self._check_unique()
        self.rules.sort(key=lambda r: (r.priority, r.name))
        self.references.sort(key=lambda r: (r.priority, r.name))
        self._book = NameBook()
        self._identity = ""
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
        sources = (self.rules, self.references, self.tools, self.servers)
        sizes = tuple(len(x) for x in sources)
        t = self._table
        if (
            t is None
            or t.shape[0] != self._version
            or t.sizes != sizes
            or any(a is not b for a, b in zip(t.sources, sources))  # a list replaced: held, so never an id reused
        ):
            items = list(self.all_items())
            modes = [self.include_mode(it) for it in items]
            self._by_key = {it.key: it for it in items}  # a list replaced: has() and get() follow it too
            t = self._table = ItemTable(
                (self._version, next(_TABLE_SERIAL)),  # unique: no cache keyed on an older table matches
                items,
                [it.key for it in items],
                np.array([m is IncludeMode.ALWAYS for m in modes], dtype=bool),
                np.array([m is IncludeMode.AGENT for m in modes], dtype=bool),
                np.array([isinstance(it, Tool) for it in items], dtype=bool),
                np.array([isinstance(it, Tool) and self.permission_required(it) for it in items], dtype=bool),
                {it.key: i for i, it in enumerate(items)},
                sources=sources,
                sizes=sizes,
            )
        return t

    @property
    def identity(self) -> str:
        """What keeps this agent's data apart from every other agent's and finds it again over time: its
        default stash store, its stash namespace (``agent:<identity>``), its learned tool examples and
        its tools' names are kept under it. The declared :attr:`agent_id` when the file has one; else the
        identity its registry found or gave it (:meth:`contextsieve.agent.registry.AgentRegistry.resolve`,
        which :meth:`contextsieve.Engine.from_file` runs: see :mod:`contextsieve.agent.identity`); before
        that, for an agent loaded from a file, its name made file-safe, ``-`` and 10 hex digits of the
        SHA-256 of the file's resolved path. An agent made in code is its name made file-safe."""
        if self.agent_id:
            return self.agent_id
        if self._identity:
            return self._identity
        return path_identity(self.name, self.source) if self.source else stem(self.name)

    def set_identity(self, identity: str) -> None:
        """The identity the registry found for this agent (see :attr:`identity`); ignored when the file
        declares an ``id``."""
        self._identity = identity

    def tool_names(self) -> ToolNames:
        """The name a model sees for each tool, and the way back (:mod:`contextsieve.agent.toolnames` has the
        rule): what every payload, the gateway and the integrations name tools by. Rebuilt when the
        tools change, as :meth:`table`; a tool keeps the name its :meth:`name book <use_name_book>` gave it
        for as long as the agent has it, and no name is ever given to a second tool."""
        with self.lock:
            table = self._current_table()
            if self._names is None or self._names[0] != table.shape:
                keys = [t.key for t in self.tools]
                self._names = (table.shape, tool_names(keys, self._book.assign(keys)))
            return self._names[1]

    def use_name_book(self, book: NameBook) -> None:
        """Keep the tools' names in ``book`` from now on (the agent's registry keeps them with its data:
        :meth:`contextsieve.agent.registry.AgentRegistry.resolve`); names given so far in this process that
        the book lacks are added to it."""
        with self.lock:
            if self._names is not None:
                book.adopt(self._book.assign([]))
            self._book = book
            self._names = None

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
        applied: :func:`contextsieve.agent.file_servers.server_tools`); ``listed`` says which came from the
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
