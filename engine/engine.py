"""The one entry point: an agent, its embedder and chunk store, and its sessions."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import ItemKey
from contextsieve.agent.registry import AgentRegistry, Resolution
from contextsieve.agent.settings import SettingsOverrides
from contextsieve.agent.usage import UsageLog
from contextsieve.errors import (
    AgentRegistryError,
    AgentRegistryWarning,
    CacheFolderWarning,
    ContextSieveError,
    EmbeddingCacheError,
    EventLoopError,
    InputError,
    brief,
)
from contextsieve.models.lazy import LazyEmbedder
from contextsieve.retrieval.cache import EmbeddingCache, read_only
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.chunking import ChunkConfig, Summarizer
from contextsieve.session.assembly import Request
from contextsieve.session.offer import OfferConfig
from contextsieve.session.session import Session
from contextsieve.session.stash_link import SessionStash, StashSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from contextsieve.mcp_client.catalog import ToolCatalog
    from contextsieve.mcp_client.client import ListConfig
    from contextsieve.stash.store import StashStore

__all__ = ["Engine", "IndexReport", "HISTORY_FILE", "default_history_path"]

#: The file in the data folder that keeps agents' learned history (:mod:`contextsieve.agent.usage`).
HISTORY_FILE = "history.sqlite"


def default_history_path() -> Path:
    """Where an agent's learned history is kept by default: :data:`HISTORY_FILE` in the data folder
    (:func:`~contextsieve.fileio.default_data_dir`)."""
    from contextsieve.fileio import default_data_dir

    return default_data_dir() / HISTORY_FILE


@dataclass(frozen=True)
class IndexReport:
    """What :meth:`Engine.index` did.

    Attributes:
        items: items of the agent. chunks: their chunks.
        embedded: chunk texts sent to the embedder now (the rest came from memory or the disk cache).
        graphs: item relationship graphs built (one per domain whose settings expand from the graph).
        search: how requests search the chunks: ``"exact"`` or ``"hnsw"`` (see :class:`IndexConfig`).
        seconds: wall time.
    """

    items: int
    chunks: int
    embedded: int
    graphs: int
    search: str
    seconds: float


class Engine:
    """Context selection for one agent.

    Args:
        agent: the agent (see :func:`contextsieve.load_agent`).
        embedder: a :class:`~contextsieve.retrieval.embedding.TextEmbedder`; default :class:`contextsieve.Embedder`
            (all-MiniLM-L6-v2, the variant measured fastest on this CPU), loaded on first need.
        cache_dir: folder of the persistent embedding cache (default: the model cache folder,
            ``$CONTEXTSIEVE_CACHE`` or ``~/.cache/contextsieve``); ``False`` keeps vectors in memory only.
        chunking: chunking settings (including contextual embeddings: see
            :class:`~contextsieve.selection.chunking.ChunkConfig`).
        summarizer: optional callable writing embedding context per chunk (see
            :data:`contextsieve.selection.chunking.Summarizer`); called only for new or changed items. Default
            ``None``: chunks get the context the agent already has (headers, heading paths, summaries).
        index: how requests search the chunks (:class:`~contextsieve.retrieval.chunks.IndexConfig`; default:
            exact search, HNSW from 50,000 chunks when hnswlib is installed).
        history: where what learning from use records (:meth:`record_tool_calls`, the gateway's calls,
            :meth:`Session.record_outcome`) is kept: ``None`` (default): for an agent loaded from a file
            (:meth:`from_file`, which finds its durable identity), across restarts in ``history.sqlite``
            in the data folder under that identity, else in this engine's memory; ``True``: in that file
            (an agent made in code: under its name; an agent of :func:`~contextsieve.load_agent` passed here:
            under the identity of its file's path, which :meth:`from_file` would give a new agent too);
            ``False``: in memory; a path: that file. See
            :mod:`contextsieve.agent.usage` (bounded; the request's vector, not its words).
        remember_requests: also keep each recorded request's text (default ``False``: its vector only, so
            a user's words are never written to disk unless asked; the keyword index then reads the
            examples too). Implies ``history`` in the data folder unless ``history`` says otherwise.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        embedder: TextEmbedder | None = None,
        cache_dir: str | os.PathLike[str] | bool | None = None,
        chunking: ChunkConfig = ChunkConfig(),
        summarizer: Summarizer | None = None,
        index: IndexConfig = IndexConfig(),
        remember_requests: bool = False,
        history: str | os.PathLike[str] | bool | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise InputError(f"Engine takes an Agent (Engine.from_file(path) loads one), got {brief(agent)}")
        if not isinstance(remember_requests, bool):
            raise InputError(f"remember_requests must be True or False, got {type(remember_requests).__name__}")
        if history is not None and not isinstance(history, (bool, str, os.PathLike)):
            raise InputError(f"history must be None, True, False or a path, got {type(history).__name__}")
        self.agent = agent
        self._remember_requests = remember_requests
        self._history = history
        self.embedder: TextEmbedder = embedder if embedder is not None else LazyEmbedder()
        self._cache_dir = cache_dir
        self.store = ChunkStore(
            self.embedder,
            chunking,
            cache_factory=self._open_cache,
            summarizer=summarizer,
            index=index,
            usage_factory=self._open_usage,
            # a file's agent: the identity of its path until from_file finds the durable one (never the
            # bare name, which another agent may share); an agent made in code: its name
            usage_scope=agent.identity if agent.source else agent.name or "",
        )

        self.tool_catalog: ToolCatalog | None = None  # the last connect()'s report
        self.resolution: Resolution | None = None
        """How :meth:`from_file` found the agent's identity (``None``: not looked up)."""

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        tools: Mapping[str, list[dict[str, Any]]] | None = None,
        connect: bool = False,
        refresh: bool = False,
        listing: ListConfig | None = None,
        registry: AgentRegistry | bool | None = None,
        **kwargs: Any,
    ) -> Engine:
        """Load an agent file (current YAML or legacy folder) and wrap it.

        The agent's identity (what its stash namespace, learned examples and tools' names are kept under:
        :attr:`Agent.identity`) is looked up in its registry and kept there (:attr:`resolution` says how
        it was found: see :mod:`contextsieve.agent.identity`), so it holds when the file is renamed,
        moved, linked or its name edited. Should the registry fail, the agent goes on under the identity
        of its path for this process, with an :class:`~contextsieve.errors.AgentRegistryWarning`.

        Args:
            tools: a catalog (server -> MCP ``tools/list`` entries) instead of asking the servers.
            connect: give the agent the live tools of its MCP servers now (:meth:`connect`; needs
                ``contextsieve[mcp]``); the report is :attr:`tool_catalog`. In a running event loop
                this raises :class:`~contextsieve.errors.EventLoopError` before loading anything:
                load with ``connect=False``, then ``await engine.connect_async()``.
            refresh, listing: passed to :meth:`connect`.
            registry: where agents' identities are kept (default ``None``: the
                :class:`~contextsieve.agent.registry.AgentRegistry` in the data folder,
                ``$CONTEXTSIEVE_DATA``); ``False``: none (the identity of the file's path, nothing written).
            kwargs: as for :class:`Engine`.
        """
        from contextsieve.agent.agentfile import load_agent

        if connect:
            _no_running_loop("Engine.from_file(path) and then await engine.connect_async()")
        if registry is not None and registry is not False and not isinstance(registry, AgentRegistry):
            raise InputError(f"registry must be an AgentRegistry, None or False, got {type(registry).__name__}")
        engine = cls(load_agent(Path(path), tools=tools), **kwargs)
        engine.resolution = _resolve(engine, None if registry is False else registry or AgentRegistry())
        if connect:
            engine.connect(refresh=refresh, listing=listing)
        return engine

    def connect(self, *, refresh: bool = False, listing: ListConfig | None = None) -> ToolCatalog:
        """Give the agent the tools of its MCP servers: cached listings where present (unless
        ``refresh``), live listings otherwise (concurrently, each under ``listing.timeout``, default
        10 s); see :mod:`contextsieve.mcp_client.catalog`. Returns (and keeps as :attr:`tool_catalog`) what
        was found, added, changed and removed per server.

        It runs its own event loop: on a thread running one (inside ``asyncio.run``) it raises
        :class:`~contextsieve.errors.EventLoopError`; ``await`` :meth:`connect_async` there (or call
        this from a worker thread).
        """
        from contextsieve.mcp_client.catalog import connect
        from contextsieve.mcp_client.client import ListConfig, require_sdk

        require_sdk("Engine.connect (listing the agent's MCP servers)")
        self.tool_catalog = connect(
            self.agent, cache_folder=self.tools_folder, refresh=refresh, config=listing or ListConfig()
        )
        return self.tool_catalog

    async def connect_async(self, *, refresh: bool = False, listing: ListConfig | None = None) -> ToolCatalog:
        """:meth:`connect` for code running in an event loop (asyncio or trio): the servers are listed
        on the running loop. Arguments and result as :meth:`connect`."""
        from contextsieve.mcp_client.catalog import connect_async
        from contextsieve.mcp_client.client import ListConfig, require_sdk

        require_sdk("Engine.connect_async (listing the agent's MCP servers)")
        self.tool_catalog = await connect_async(
            self.agent, cache_folder=self.tools_folder, refresh=refresh, config=listing or ListConfig()
        )
        return self.tool_catalog

    @property
    def tools_folder(self) -> Path | None:
        """Where the agent's tool listings are cached (``mcp-tools`` in the cache folder; ``None`` when
        the cache is off): :meth:`connect` and the gateway read and write it."""
        if self._cache_dir is False:
            return None
        from contextsieve.models.cache import default_cache_dir

        root = Path(self._cache_dir) if isinstance(self._cache_dir, (str, os.PathLike)) else default_cache_dir()
        return root / "mcp-tools"

    def _open_usage(self) -> UsageLog:
        """The log of what learning from use records (see the ``history`` argument): a file under the
        agent's identity, or memory."""
        from contextsieve.models.registry import model_family

        where = self._history
        if where is None:
            where = bool(self.agent.source) or self._remember_requests
        model = getattr(self.embedder, "model_id", None)  # a TextEmbedder without one: memory
        if where is False or model is None:  # an embedder without an identity: its vectors cannot be kept safely
            return UsageLog()
        path = default_history_path() if where is True else Path(where)
        return UsageLog(path, keep_text=self._remember_requests, model=model_family(model))

    @property
    def history_path(self) -> Path | None:
        """The file the agent's learned history is kept in (``None``: memory)."""
        return self.store.usage().path

    def record_tool_calls(self, message: str, calls: Iterable[ItemKey | str]) -> None:
        """Learning from use: keep ``message`` as an example request of each tool the LLM then called
        (see :meth:`contextsieve.session.session.Session.record_tool_calls`)."""
        self.session().record_tool_calls(message, calls)

    def _open_cache(self) -> EmbeddingCache | None:
        """The disk cache for this embedder's model family (``None`` when disabled or the id is unknown):
        every variant of one model's weights passes the fidelity bars, so a cache filled by the int8
        graph stays valid when ``variant="auto"`` picks fp32 on another CPU, and the other way round."""
        if self._cache_dir is False:
            return None
        model_id = self.embedder.model_id
        if model_id is None:
            return None  # an embedder without an identity cannot share a persistent cache safely
        from contextsieve.models.cache import default_cache_dir
        from contextsieve.models.registry import model_family

        folder = Path(self._cache_dir) if isinstance(self._cache_dir, (str, os.PathLike)) else default_cache_dir()
        path = folder / "embeddings.sqlite"
        try:
            return EmbeddingCache(path, model_family(model_id))
        except EmbeddingCacheError as e:
            if not read_only(e, path):  # a damaged file or a path that is no folder: said, with what to do
                raise
            warnings.warn(  # a folder this user may not write (a read-only file system, say)
                f"{e}: vectors are kept in memory for this process, and the next embeds its items again; set "
                "$CONTEXTSIEVE_CACHE (or Engine(cache_dir=...)) to a folder this user may write, or "
                "cache_dir=False to keep no cache",
                CacheFolderWarning,
                stacklevel=2,
            )
            return None

    def session(
        self,
        *,
        preset: str | None = None,
        token_counter: Callable[[Sequence[str]], list[int]] | None = None,
        stash: StashStore | None = None,
        stash_session: str | None = None,
        stash_settings: StashSettings | None = None,
        offer: OfferConfig | None = None,
        **settings: Unpack[SettingsOverrides],
    ) -> Session:
        """A new session (the arguments are :class:`~contextsieve.session.session.Session`'s: a preset, a token
        counter, how tools are offered across requests, and settings overriding the agent's for this
        session only; and its stash: ``stash`` a stash store for its pruned context (default none),
        ``stash_session`` its name there (default: a new random name; give the same name to find a
        session's segments again after a restart), ``stash_settings`` how requests use it
        (:class:`StashSettings`; default its defaults))."""
        return Session(
            self.agent,
            self.store,
            preset=preset,
            token_counter=token_counter,
            stash=SessionStash(stash, stash_session, stash_settings),
            offer=offer,
            **settings,
        )

    def load_session(
        self,
        path: str | os.PathLike[str],
        *,
        stash: StashStore | None = None,
        stash_settings: StashSettings | None = None,
    ) -> Session:
        """A session saved by :meth:`Session.save`, over this engine's agent (with ``stash``, it finds
        its stashed segments again); :class:`~contextsieve.errors.SessionFileError` if the file is
        unreadable or does not fit the agent."""
        return Session.load(Path(path), self.agent, self.store, stash=stash, stash_settings=stash_settings)

    def index(self, *, show_progress: bool = False) -> IndexReport:
        """Embed every item now (instead of on the first search), build the HNSW index when the agent
        is large enough, and the item relationship graph when the agent's settings expand from it."""
        t = time.perf_counter()
        before = self.store.embedded_texts
        items = list(self.agent.all_items())
        self.store.sync(items, server_descriptions=self.agent.server_descriptions(), show_progress=show_progress)
        order = [i.key for i in items]
        chunks = sum(len(self.store.chunks_of(k).chunks) for k in order)
        graphs = 0
        base = self.agent.settings
        for s in [base] + ([base.for_tools()] if base.own_tool_domain else []):
            if s.expansion_depth > 0 and s.expansion_source != "pass2":  # the relationship graph, built now
                self.store.relation_graph(order, s.relation_pooling, min(s.expansion_threshold, 0.5))
                graphs += 1
        search = "hnsw" if self.store.search_index(order) is not None else "exact"
        return IndexReport(
            len(items), chunks, self.store.embedded_texts - before, graphs, search, time.perf_counter() - t
        )

    def prepare(self, *, show_progress: bool = False) -> IndexReport:
        """Everything a first request needs, done now: :meth:`index`, then the embedding model loaded
        (a fully cached agent indexes without it, but every request embeds its message). Slow parts
        say so through :mod:`contextsieve.progress` (a model graph built, items embedded). Safe to call
        from a background thread while requests run: they wait for the one model load. Returns the
        index report."""
        report = self.index(show_progress=show_progress)
        if isinstance(self.embedder, LazyEmbedder):
            self.embedder.load()
        return report

    def select(self, message: str, *, preset: str | None = None, **settings: Unpack[SettingsOverrides]) -> Request:
        """One-off request for ``message`` in a fresh session with ``preset`` and ``settings`` (see
        :class:`~contextsieve.agent.settings.SettingsOverrides`)."""
        return self.session(preset=preset, **settings).build_request(message)


def _resolve(engine: Engine, registry: AgentRegistry | None) -> Resolution | None:
    """The agent's identity from ``registry`` (see :meth:`Engine.from_file`); its recorded tool examples
    follow it (those an earlier version kept under the file's path are moved to it)."""
    import warnings

    agent = engine.agent
    found = None
    if registry is not None:
        try:
            found = registry.resolve(agent)
        except AgentRegistryError as e:
            warnings.warn(
                f"{e}; agent {agent.name!r} goes on as {agent.identity} (the identity of its path) in this process, "
                "so its data is not found again if the file moves, and its tools' names are kept in memory only",
                AgentRegistryWarning,
                stacklevel=3,
            )
    engine.store.usage_scope = agent.identity
    if agent.source and engine._remember_requests and engine._cache_dir is not False:
        # an earlier version kept remembered requests beside the embedding cache: they join the history
        from contextsieve.models.cache import default_cache_dir

        root = Path(engine._cache_dir) if isinstance(engine._cache_dir, (str, os.PathLike)) else default_cache_dir()
        old = root / "usage.sqlite"
        if old.is_file():
            try:
                engine.store.usage().absorb(UsageLog(old), agent.identity, [agent.source, agent.identity])
            except ContextSieveError as e:
                warnings.warn(f"the examples in {old} were not moved to the agent's history: {e}", stacklevel=3)
    return found


def _no_running_loop(instead: str) -> None:
    """:class:`EventLoopError` naming ``instead`` when this thread is running an event loop."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise EventLoopError(f"this thread is running an event loop: use {instead} (or call this from a worker thread)")
