"""The vectors of an agent's chunk texts and of its requests' query texts: the embedder, the persistent
embedding cache and the memory of recent query vectors that :class:`~contextsieve.selection.chunk_store.ChunkStore`
embeds through.

Chunk texts come from the disk cache, then the model in parts of
:data:`EMBED_PART` (each part cached as soon as it is done); query texts go through the model about
once each (:mod:`contextsieve.retrieval.query_vectors`) and the last :data:`QUERY_CACHE_SIZE` are kept
in memory, never on disk.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from contextsieve.errors import InputError
from contextsieve.progress import note
from contextsieve.retrieval.cache import EmbeddingCache
from contextsieve.retrieval.embedding import TextEmbedder, checked_vectors
from contextsieve.retrieval.query_vectors import compose, plan_query
from contextsieve.selection.chunking import VECTOR_EXAMPLE

__all__ = ["ChunkVectors", "NOTE_FROM_TEXTS", "QUERY_CACHE_SIZE", "RECORDED_MEMO", "EMBED_PART"]

#: From this many chunk texts to embed at once (about a second or more), :func:`~contextsieve.progress.note`
#: says so before it starts.
NOTE_FROM_TEXTS = 128
#: Query sentences whose vectors :meth:`ChunkVectors.query` keeps in memory (384 floats each).
QUERY_CACHE_SIZE = 1024
#: Recorded requests whose vectors :meth:`ChunkVectors.uncached` keeps in memory.
RECORDED_MEMO = 64
#: Chunk texts embedded per embedder call when indexing; each part is cached as soon as it is done.
EMBED_PART = 256


class ChunkVectors:
    """Vectors of chunk texts and query texts through one embedder.

    Args:
        embedder: turns texts into unit vectors.
        cache: persistent vectors by text (a restarted agent re-embeds nothing); ``None`` = memory only.
        cache_factory: called once, on the first embedding, to open the cache lazily (its key needs
            the model id, which needs the model loaded); ignored when ``cache`` is given.
    """

    def __init__(
        self,
        embedder: TextEmbedder,
        cache: EmbeddingCache | None = None,
        cache_factory: Callable[[], EmbeddingCache | None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.cache = cache
        self._cache_factory = None if cache is not None else cache_factory
        self.embedded_texts = 0  # how many texts have been sent to the embedder (for tests and stats)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()  # recent query vectors by text (LRU)
        self._queries_lock = threading.Lock()
        self._recorded: OrderedDict[str, np.ndarray] = OrderedDict()  # recent recorded requests' vectors (LRU)

    def chunk_vectors(self, texts: list[str], show_progress: bool = False) -> np.ndarray:
        """Vectors of chunk texts: from the disk cache where present, the rest embedded
        :data:`EMBED_PART` texts at a time, each part put into the cache as soon as it is done (an
        interrupted indexing keeps what it finished: the next run embeds only the rest)."""
        self.disk_cache()
        cached = self.cache.get(texts) if self.cache is not None and texts else {}
        unknown = [t for i, t in enumerate(texts) if t.startswith(VECTOR_EXAMPLE) and i not in cached]
        if unknown:  # a recorded request kept as a vector only: never embed its placeholder
            raise InputError(f"{len(unknown)} recorded request(s) kept as vectors are not in the usage log any more")
        missing = [i for i in range(len(texts)) if i not in cached]
        todo = [texts[i] for i in missing]
        fresh = None
        if todo:
            if len(todo) >= NOTE_FROM_TEXTS:
                note(f"embedding {len(todo)} chunks of the agent's items (kept in the cache: once per change)")
            bar = None
            if show_progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(todo), desc="embedding", unit="text")
            parts: list[np.ndarray] = []
            try:
                for lo in range(0, len(todo), EMBED_PART):
                    part = todo[lo : lo + EMBED_PART]
                    vectors = checked_vectors(self.embedder.embed(part), len(part))
                    if self.cache is not None:
                        self.cache.put(part, vectors)
                    self.embedded_texts += len(part)
                    parts.append(vectors)
                    if bar is not None:
                        bar.update(len(part))
            finally:
                if bar is not None:
                    bar.close()
            fresh = np.concatenate(parts)
        dim = fresh.shape[1] if fresh is not None else next(iter(cached.values())).shape[0]
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, v in cached.items():
            out[i] = v
        if fresh is not None:
            out[missing] = fresh
        return out

    def uncached(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts``, neither read from nor put into the disk cache: a recorded request whose
        words the usage log does not keep leaves no trace of them (nor their digest, which would confirm
        a guessed message) in the cache, which outlives a ``history --forget``. The last
        :data:`RECORDED_MEMO` are kept in memory (the gateway records each call of a task under its
        message: one model call per task, not per call)."""
        known = self._remembered(self._recorded, texts, RECORDED_MEMO, counted=True)
        return np.stack([known[t] for t in texts])

    def _remembered(
        self, memo: OrderedDict[str, np.ndarray], texts: Sequence[str], size: int, counted: bool = False
    ) -> dict[str, np.ndarray]:
        """The vectors of ``texts`` from ``memo`` (the last ``size`` embedded, by text, read-only), the
        others embedded in one call and kept there; ``counted``: those count in :attr:`embedded_texts`."""
        with self._queries_lock:
            known = {t: v for t in texts if (v := memo.get(t)) is not None}
            for t in known:
                memo.move_to_end(t)
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            fresh = checked_vectors(self.embedder.embed(todo), len(todo))
            self.embedded_texts += len(todo) if counted else 0
            with self._queries_lock:
                for t, v in zip(todo, fresh):
                    v.setflags(write=False)
                    known[t] = memo[t] = v
                while len(memo) > size:
                    memo.popitem(last=False)
        return known

    def clear_queries(self) -> None:
        """Forget the query vectors kept by :meth:`query` (benchmarks compare cold paths)."""
        with self._queries_lock:
            self._queries.clear()

    def clear_recorded(self) -> None:
        """Forget the recorded requests' vectors kept by :meth:`uncached` (a history forgotten)."""
        with self._queries_lock:
            self._recorded.clear()

    def query(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors, each token through the model about once: texts made of other query texts (a
        sentence and its clauses) get the mean of their parts' vectors (see
        :mod:`contextsieve.retrieval.query_vectors`). The last :data:`QUERY_CACHE_SIZE` embedded texts are kept in
        memory (an agent sends the same message again on every tool-call turn of one request), never on
        disk. Safe to call from several threads, without :attr:`lock`."""
        texts = list(texts)
        if not texts:
            return checked_vectors(self.embedder.embed([]), 0)
        plan = plan_query(texts)
        need = list(plan.embed)
        known = self._remembered(self._queries, need, QUERY_CACHE_SIZE)
        return compose(plan, np.stack([known[t] for t in need]))

    def disk_cache(self) -> EmbeddingCache | None:
        """The persistent cache, opened on first need (``None``: memory only)."""
        if self._cache_factory is not None:
            self.cache, self._cache_factory = self._cache_factory(), None
        return self.cache
