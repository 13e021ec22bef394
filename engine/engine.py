"""The one entry point: an agent, its embedder and chunk store, and its sessions."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from contextsieve.agent import Agent
from contextsieve.chunking import ChunkConfig, Summarizer
from contextsieve.embcache import EmbeddingCache
from contextsieve.session import Request, Session
from contextsieve.store import ChunkStore, TextEmbedder

__all__ = ["Engine"]


class _LazyEmbedder:
    """Loads :class:`contextsieve.Embedder` on first use (a request that needs no search loads no model)."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._emb: Any = None

    @property
    def loaded(self) -> Any:
        if self._emb is None:
            from contextsieve.models.embedder import Embedder

            self._emb = Embedder(**self._kwargs)
        return self._emb

    def embed(self, texts: Any, **kwargs: Any) -> Any:
        return self.loaded.embed(texts, **kwargs)

    def count_tokens(self, texts: Any) -> list[int]:
        return self.loaded.count_tokens(texts)


class Engine:
    """Context selection for one agent.

    Args:
        agent: the agent (see :func:`contextsieve.agentfile.load_agent`).
        embedder: a :class:`~contextsieve.store.TextEmbedder`; default :class:`contextsieve.Embedder`
            (all-MiniLM-L6-v2 int8), loaded on first need.
        cache_dir: folder of the persistent embedding cache (default: the model cache folder,
            ``$CONTEXTSIEVE_CACHE`` or ``~/.cache/contextsieve``); ``False`` keeps vectors in memory only.
        chunking: chunking settings (including contextual embeddings: see :class:`~contextsieve.chunking.ChunkConfig`).
        summarizer: optional callable writing embedding context per chunk (see
            :data:`contextsieve.chunking.Summarizer`); called only for new or changed items. Default
            ``None``: chunks get the context the agent already has (headers, heading paths, summaries).
    """

    def __init__(self, agent: Agent, *, embedder: TextEmbedder | None = None, cache_dir: str | os.PathLike[str] | bool | None = None, chunking: ChunkConfig = ChunkConfig(), summarizer: Summarizer | None = None) -> None:
        self.agent = agent
        self.embedder = embedder if embedder is not None else _LazyEmbedder()
        self._cache_dir = cache_dir
        self.store = ChunkStore(self.embedder, chunking, cache_factory=self._open_cache, summarizer=summarizer)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, tools: Mapping[str, list[dict[str, Any]]] | None = None, **kwargs: Any) -> "Engine":
        """Load an agent file (current YAML or legacy folder) and wrap it."""
        from contextsieve.agentfile import load_agent

        return cls(load_agent(path, tools=tools), **kwargs)

    def _open_cache(self) -> EmbeddingCache | None:
        """The disk cache for this embedder's model id (``None`` when disabled or the id is unknown)."""
        if self._cache_dir is False:
            return None
        emb = self.embedder.loaded if isinstance(self.embedder, _LazyEmbedder) else self.embedder
        model_id = getattr(getattr(emb, "info", None), "model_id", None)
        if model_id is None:
            return None  # an embedder without an identity cannot share a persistent cache safely
        from contextsieve.models.cache import default_cache_dir

        folder = Path(self._cache_dir) if self._cache_dir not in (None, True) else default_cache_dir()
        return EmbeddingCache(folder / "embeddings.sqlite", model_id)

    def session(self, **settings: Any) -> Session:
        """A new session; keyword arguments are :class:`~contextsieve.session.Session`'s (``preset``,
        ``token_counter``, and settings overriding the agent's for this session only)."""
        return Session(self.agent, self.store, **settings)

    def index(self, *, show_progress: bool = False) -> dict[str, float]:
        """Embed every item now (instead of on the first search), and build the item relationship graph
        when the agent's settings expand from it; returns counts and seconds."""
        t = time.perf_counter()
        before = self.store.embedded_texts
        items = list(self.agent.all_items())
        self.store.sync(items, server_descriptions=self.agent.server_descriptions(), show_progress=show_progress)
        chunks = sum(len(self.store.chunks_of(i.key).chunks) for i in items)
        graphs = 0
        base = self.agent.settings
        for s in [base] + ([base.for_tools()] if base.tool_settings else []):
            if s.expansion_depth > 0 and s.expansion_source != "pass2":  # the relationship graph, built now
                self.store.relation_graph([i.key for i in items], s.relation_pooling, min(s.expansion_threshold, 0.5))
                graphs += 1
        return {"items": len(items), "chunks": chunks, "embedded": self.store.embedded_texts - before, "graphs": graphs, "seconds": time.perf_counter() - t}

    def select(self, message: str, **settings: Any) -> Request:
        """One-off request for ``message`` in a fresh session (keyword arguments as for :meth:`session`)."""
        return self.session(**settings).build_request(message)
