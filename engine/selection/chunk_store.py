"""Chunk vectors of an agent's items, embedded just in time, in one batch, and kept by content hash.

An item is (re-)embedded when the texts of its chunks change, however the change was made (API
edit or hand edit of the agent file): the store compares a hash of the chunk texts, not an edit
flag. Items that are gone are dropped. The matrix of all chunk vectors is rebuilt only after a change.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from contextsieve.agent.example_records import Example, vector_widths
from contextsieve.agent.items import Item, ItemKey, Tool
from contextsieve.agent.tool_relations import Relations, relations
from contextsieve.agent.usage import UsageLog, example_text
from contextsieve.choices import RelationPooling
from contextsieve.errors import EmbeddingCacheError, UsageLogWarning
from contextsieve.retrieval.cache import EmbeddingCache
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.retrieval.query import Query
from contextsieve.selection import chunk_plans
from contextsieve.selection.chunk_plans import chunks_from_plan, example_chunk_text, plan_key, profile_text, schema_of
from contextsieve.selection.chunk_plans import digest as chunks_digest
from contextsieve.selection.chunk_vectors import ChunkVectors
from contextsieve.selection.chunking import (
    VECTOR_EXAMPLE,
    Chunk,
    ChunkConfig,
    Summarizer,
    cap_example,
    chunk_item,
    is_example_chunk,
    split_identifier,
)
from contextsieve.selection.expansion import RelationGraph
from contextsieve.selection.indexed_chunks import KINDS, IndexedChunks
from contextsieve.selection.keyword_rows import KeywordDocs, KeywordRows
from contextsieve.selection.recorded_requests import RecordedRequests
from contextsieve.selection.search_rows import ChunkLayout

__all__ = ["ItemChunks", "ChunkStore"]


@dataclass(frozen=True)
class ItemChunks:
    """An item's chunks, the vectors of its own chunks ``[n, D]`` (the first ``n`` chunks: a tool's
    recorded example requests come after them and are vectors of the usage log, read through
    :meth:`ChunkStore.recorded_requests`), and the hash of the embedded texts."""

    chunks: tuple[Chunk, ...]
    vectors: np.ndarray
    digest: str


class ChunkStore:
    """Per-item chunks and vectors; :meth:`sync` embeds what is missing or changed, in one batch.

    Args:
        embedder: turns texts into unit vectors.
        config: chunking settings.
        cache: persistent vectors by text (a restarted agent re-embeds nothing); ``None`` = memory only.
        cache_factory: called once, on the first embedding, to open the cache lazily (its key needs
            the model id, which needs the model loaded); ignored when ``cache`` is given.
        summarizer: optional per-chunk embedding context writer (see
            :data:`contextsieve.selection.chunking.Summarizer`), called only for items whose content changed.
        usage_factory: opens the log of recorded tool examples (:class:`~contextsieve.agent.usage.UsageLog`)
            on first need; ``None`` keeps them in memory. usage_scope: whose examples they are in that
            log (the agent's name; :meth:`Engine.from_file` uses the agent file's path).
        index: when and how chunks are also kept in the chunk index
            (:class:`~contextsieve.retrieval.chunks.ChunkIndex`) whose HNSW graph requests search
            instead of scanning every chunk (default :class:`IndexConfig`: from 50,000 chunks, if
            hnswlib is installed). The index is kept in step with every sync (the groups of changed
            and removed items are deleted, new ones added), never rebuilt whole.
    """

    def __init__(
        self,
        embedder: TextEmbedder,
        config: ChunkConfig = ChunkConfig(),
        cache: EmbeddingCache | None = None,
        cache_factory: Callable[[], EmbeddingCache | None] | None = None,
        summarizer: Summarizer | None = None,
        index: IndexConfig = IndexConfig(),
        usage_factory: Callable[[], UsageLog] | None = None,
        usage_scope: str = "",
    ) -> None:
        self.vectors = ChunkVectors(embedder, cache, cache_factory)
        self._usage_factory = usage_factory
        self._usage: UsageLog | None = None
        self.usage_scope = usage_scope
        self.examples: dict[ItemKey, Sequence[Example]] = {}  # recorded example requests per tool, newest first
        self.misses: dict[ItemKey, Sequence[Example]] = {}  # requests offered for and not called, newest first
        self._examples_loaded = False
        self._forgets_read = 0  # how often the log said this agent's records were forgotten, when they were read
        self.index_config = index
        self._index: ChunkIndex | None = None
        self._index_slots: dict[ItemKey, int] = {}  # index slot of each item
        self._slot_kind = np.zeros(0, np.int8)  # index slot -> item kind code
        self._item_ids: dict[ItemKey, int] = {}  # stable ids of items in the index (never reused)
        self._indexed: IndexedChunks | None = None  # the index as requests search it (for one matrix)
        self.summarizer = summarizer
        self.config = config
        self._items: dict[ItemKey, ItemChunks] = {}
        self._plans: dict[ItemKey, tuple[tuple[object, ...], list[Chunk], str]] = {}  # chunking memo by item content
        self._scrubbed = False  # whether the disk cache's plans were rid of examples' words
        # the last sync's items, server descriptions, version
        self._last: tuple[list[Item], dict[str, str], object] = ([], {}, None)
        self._matrix: tuple[Sequence[ItemKey], np.ndarray, np.ndarray] | None = None
        self._example_rows: tuple[object, np.ndarray, np.ndarray] | None = None  # (matrix, mask, hashes)
        # (the matrix, the misses, the recorded requests as a search reads them)
        self._recorded: tuple[object, object, RecordedRequests | None] | None = None
        self._layout: tuple[object, ChunkLayout] | None = None  # (the matrix, where its rows sit)
        self._relations: tuple[object, Relations] | None = None  # (the examples, their relations)
        self._stale: set[ItemKey] = set()  # tools whose examples changed since the last sync
        self._several = False  # whether the last sync's tools came from two servers or more
        self._bm25: tuple[object, KeywordRows] | None = None  # (the matrix it was built for, the index)
        self._keyword_docs = KeywordDocs()  # BM25 over the chunks' texts, kept in step with them
        self._graphs: dict[tuple[str, float], tuple[object, RelationGraph]] = {}
        self._profiles: tuple[object, np.ndarray, np.ndarray] | None = None  # (matrix, vectors, row per item)
        self.lock = threading.RLock()  # held by sync and by a search from its sync to its last read

    def chunks_of(self, key: ItemKey) -> ItemChunks:
        """The item's chunks (after :meth:`sync`)."""
        return self._items[key]

    def sync(
        self,
        items: Iterable[Item],
        *,
        server_descriptions: Mapping[str, str] | None = None,
        show_progress: bool = False,
        version: object = None,
    ) -> int:
        """Make the store hold exactly ``items``; returns how many items were (re-)embedded.

        ``version``: an optional token that changes whenever ``items`` do (e.g. :attr:`ItemTable.shape`);
        a sync with the version of the last one returns at once instead of comparing every item.
        ``server_descriptions`` (server name -> description) gives tools their server's description
        for :attr:`ChunkConfig.tool_context` ``"server+description"``. The server goes into tools'
        embedding text only while the tools come from two servers or more (so adding a second server
        re-embeds the first one's tools).
        """
        servers = dict(server_descriptions or {})
        if not self._examples_loaded:
            self._load_examples()
        elif self._forgotten_elsewhere():
            self._reload()
        last, last_servers, last_version = self._last
        if version is not None and version == last_version and servers == last_servers:
            # the caller vouches that the items are the same (Agent.table's shape): only the tools whose
            # recorded examples changed since are cut again
            return self._sync_stale(servers) if self._stale else 0
        items = list(items)
        if len(items) == len(last) and servers == last_servers and all(a is b for a, b in zip(items, last)):
            self._last = (items, servers, version)
            # items are frozen: the same objects mean the same texts (but for recorded examples)
            return self._sync_stale(servers) if self._stale else 0
        several = (
            len({it.server for it in items if isinstance(it, Tool)}) > 1
        )  # else a server prefix tells no tool apart
        planned = self._plan_all(items, servers, several)
        self._stale.clear()
        self._several = several
        todo = [k for k, (ch, digest) in planned.items() if k not in self._items or self._items[k].digest != digest]
        gone = set(self._items) - set(planned)
        for k in gone:
            del self._items[k]
            self._plans.pop(k, None)
        if todo:
            self._embed_items(todo, planned, show_progress)
        if todo or gone:
            self._matrix = None
            self._update_index(todo, gone)
        self._last = (items, servers, version)
        return len(todo)

    def _sync_stale(self, servers: dict[str, str]) -> int:
        """Cut and embed again the items of the last sync whose recorded examples changed since (their
        example chunks); returns how many changed."""
        stale = [it for it in self._last[0] if it.key in self._stale]
        self._stale.clear()
        planned = self._plan_all(stale, servers, self._several)
        todo = [k for k, (_, digest) in planned.items() if k not in self._items or self._items[k].digest != digest]
        if not todo:
            return 0
        self._embed_items(todo, planned)
        self._matrix = None
        self._update_index(todo, ())
        return len(todo)

    def _embed_items(
        self, todo: Sequence[ItemKey], planned: Mapping[ItemKey, tuple[list[Chunk], str]], show_progress: bool = False
    ) -> None:
        """Embed the own chunks of the items ``todo`` (their example chunks are the usage log's vectors)."""
        own = {k: [c for c in planned[k][0] if not is_example_chunk(c)] for k in todo}
        texts = [c.embed_text for k in todo for c in own[k]]
        vectors = self._embed_chunks(texts, show_progress) if texts else np.zeros((0, 1), np.float32)
        at = 0
        for k in todo:
            chunks, digest = planned[k]
            self._items[k] = ItemChunks(tuple(chunks), np.ascontiguousarray(vectors[at : at + len(own[k])]), digest)
            at += len(own[k])

    def _update_index(self, changed: Sequence[ItemKey], gone: Iterable[ItemKey]) -> None:
        """Keep the chunk index in step: drop the groups of changed and removed items, add the new
        ones; create it once the chunks reach the configured size."""
        cfg = self.index_config
        if self._index is None:
            total = sum(ic.vectors.shape[0] for ic in self._items.values())
            if cfg.backend == "exact" or (cfg.backend == "auto" and total < cfg.hnsw_min_rows) or total == 0:
                return
            dim = next(ic.vectors.shape[1] for ic in self._items.values() if ic.vectors.size)
            self._index = ChunkIndex(dim, cfg)
            self._index_slots = {}
            changed = list(self._items)
        else:
            for k in [*changed, *gone]:
                if self._index_slots.pop(k, None) is not None:
                    self._index.remove(self._item_id(k))
        keys = [k for k in changed if k in self._items and self._items[k].vectors.size]
        if not keys:
            return
        slots = self._index.add([(self._item_id(k), self._items[k].vectors) for k in keys])
        if self._index.missing_hnswlib:  # the index warned: requests scan the matrix, no further tries
            self._index, self._index_slots = None, {}
            self.index_config = dataclasses.replace(cfg, backend="exact")
            return
        if self._slot_kind.shape[0] < self._index.slots:
            grown = np.zeros(max(self._index.slots, 2 * self._slot_kind.shape[0]), np.int8)
            grown[: self._slot_kind.shape[0]] = self._slot_kind
            self._slot_kind = grown
        for k, slot in zip(keys, slots.tolist()):
            self._index_slots[k] = slot
            self._slot_kind[slot] = KINDS.index(k.kind)

    def usage(self) -> UsageLog:
        """The log of recorded tool examples (opened on first use)."""
        if self._usage is None:
            self._usage = self._usage_factory() if self._usage_factory is not None else UsageLog()
        return self._usage

    def _load_examples(self) -> None:
        self._examples_loaded = True
        if self.config.max_examples > 0 and self._usage_factory is not None:
            self._read_examples()

    def _read_examples(self) -> None:
        """Read the recorded examples and misses; a log that cannot be read (not a database, say) leaves
        them empty with a :class:`~contextsieve.errors.UsageLogWarning`, the file unchanged."""
        try:
            self._read_records()
        except EmbeddingCacheError as e:
            self.examples, self.misses = {}, {}
            warnings.warn(f"{e}. Selection goes on without the learned history", UsageLogWarning, stacklevel=2)

    def _forgotten_elsewhere(self) -> bool:
        """Whether another process forgot records of this agent since they were read (one pragma a call)."""
        if self._usage is None or not self._usage.persistent or self._usage_factory is None:
            return False
        try:
            return self._usage.forgets(self.usage_scope) != self._forgets_read
        except EmbeddingCacheError:  # the log cannot be read now: what was read stays
            return False

    def _read_records(self) -> None:
        # a vector of another length than the model's is a damaged record: read as one of another model
        dim = getattr(self.embedder, "dim", None)
        self._forgets_read = self.usage().forgets(self.usage_scope)
        for _ in range(2):
            got = self.usage().all_records(self.usage_scope, self.config.max_examples, dim)
            self.examples, self.misses = got["examples"], got["misses"]
            widths = vector_widths([*self.examples.values(), *self.misses.values()])
            if len(widths) <= 1:
                break
            dim = widths.most_common(1)[0][0]  # an embedder that does not say its width: the one most records have

    def _reload(self, changed: Iterable[ItemKey] | None = None) -> None:
        """Read the recorded examples and misses again; the next sync cuts again the ``changed`` tools
        (those whose examples changed; ``None``: it compares every item)."""
        self._read_examples()
        self._examples_loaded = True
        if changed is None:
            self._last = ([], {}, None)  # the next sync compares every item again
        else:
            self._stale.update(changed)

    def relations(self) -> Relations:
        """What the recorded examples say about tools used together
        (:func:`~contextsieve.agent.tool_relations.relations`), kept until the examples change."""
        if not self._examples_loaded:
            self._load_examples()
        memo = self._relations
        if memo is None or memo[0] is not self.examples:
            memo = self._relations = (self.examples, relations(self.examples))
        return memo[1]

    def record_examples(self, message: str, tools: Sequence[ItemKey], kind: str = "examples") -> None:
        """Keep ``message`` as an example request of each tool (see :mod:`contextsieve.agent.usage`): its vector
        (what a log keeps instead of the text, by default) is its example chunk's; the tools' chunks change
        at the next sync. With ``kind="misses"``: as a request each was offered for and not called."""
        text = cap_example(example_text(message), self.config, self.embedder.count_tokens) if message.strip() else ""
        log = self.usage()
        embed = self._embed_chunks if log.persistent and log.keep_text else self.vectors.uncached  # words: not cached
        vector = embed([text])[0] if text.strip() else None
        with self.lock:
            log.record(self.usage_scope, message, tools, kind, vector)
            # an example is a chunk of its tool, and recording one removes that tool's miss of the message
            self._reload(tools if kind == "examples" else ())

    def forget_examples(self, tool: ItemKey | str | None = None, kind: str = "examples") -> int:
        """Delete the recorded examples (or misses) of one tool (``None``: of every tool; the forms
        :meth:`UsageLog.forget <contextsieve.agent.usage.UsageLog.forget>` takes); returns how many."""
        with self.lock:
            n = self.usage().forget(self.usage_scope, tool, kind)
            self.vectors.clear_recorded()
            self._reload()
            return n

    def _item_id(self, key: ItemKey) -> int:
        return self._item_ids.setdefault(key, len(self._item_ids))

    def search_index(self, order: Sequence[ItemKey]) -> IndexedChunks | None:
        """The chunk index as requests search it (nearest chunks as rows of :meth:`matrix`) when it
        uses HNSW; ``None`` when scanning the matrix is the faster exact search."""
        if self._index is None or self._index.backend != "hnsw":
            return None
        self.matrix(order)
        assert self._matrix is not None
        index = self._index
        view = self._indexed
        if view is None or view.matrix is not self._matrix or view.chunks != index.chunks:
            rowmap = np.full(index.chunks, -1, dtype=np.int64)
            at = 0
            for k in self._matrix[0]:
                slot = self._index_slots.get(k)
                n = self._items[k].vectors.shape[0]
                if slot is not None:
                    rowmap[index.chunk_rows(slot)] = np.arange(at, at + n)
                at += n
            view = self._indexed = IndexedChunks(index, self._matrix, rowmap, self._slot_kind[: index.slots].copy())
        return view

    def _embed_chunks(self, texts: list[str], show_progress: bool = False) -> np.ndarray:
        """Vectors of chunk texts (:meth:`ChunkVectors.chunk_vectors`)."""
        return self.vectors.chunk_vectors(texts, show_progress)

    def clear_query_cache(self) -> None:
        """Forget the query vectors kept by :meth:`embed_query` (benchmarks compare cold paths)."""
        self.vectors.clear_queries()

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (:meth:`ChunkVectors.query`). Safe to call from several threads, without :attr:`lock`."""
        return self.vectors.query(texts)

    def embedded(self, query: Query) -> Query:
        """``query`` with the vectors of its chunks (:meth:`embed_query`, one model call at most) and this
        store's model id."""
        vectors = self.embed_query(list(query.chunks))
        return query.embedded(vectors, getattr(self.embedder, "model_id", None))

    @property
    def embedder(self) -> TextEmbedder:
        """The embedder of the agent's chunks and queries."""
        return self.vectors.embedder

    @property
    def cache(self) -> EmbeddingCache | None:
        """The persistent embedding cache (``None``: memory only, or not opened yet)."""
        return self.vectors.cache

    @property
    def embedded_texts(self) -> int:
        """How many texts this store has sent to the embedder (for tests and stats)."""
        return self.vectors.embedded_texts

    def _disk_cache(self) -> EmbeddingCache | None:
        return self.vectors.disk_cache()

    def _plan_all(
        self, items: Sequence[Item], servers: Mapping[str, str], several: bool
    ) -> dict[ItemKey, tuple[list[Chunk], str]]:
        """Every item's chunks and their digest: from memory when what they are made of is unchanged,
        else from the disk cache's plans (cutting needs token counts, the slow part of a restart),
        else cut now (and the plan stored). Items with a summarizer are always cut here."""
        out: dict[ItemKey, tuple[list[Chunk], str]] = {}
        todo: list[tuple[Item, tuple[object, ...], str, tuple[str, ...]]] = []
        shared: dict[str, str] = {}  # a request recorded for several tools: one copy of its chunk text
        for it in items:
            description = servers.get(it.server, "") if isinstance(it, Tool) else ""
            kept = self.examples.get(it.key, ()) if isinstance(it, Tool) else ()
            examples = tuple(shared.setdefault(t, t) for t in map(example_chunk_text, kept))
            fingerprint: tuple[object, ...] = (
                it.name,
                it.description,
                getattr(it, "text", ""),
                getattr(it, "server", ""),
                it.summary,
                description,
                several,
                examples,
                schema_of(it) if self.config.tool_schema != "none" else "",
            )
            memo = self._plans.get(it.key)
            if memo is not None and memo[0] == fingerprint:
                out[it.key] = (memo[1], memo[2])
            else:
                todo.append((it, fingerprint, description, examples))
        if not todo:
            return out
        cache = self._disk_cache() if self.summarizer is None else None
        if cache is not None and not self._scrubbed:  # plans an earlier version stored with examples' words
            self._scrubbed = cache.forget_plans(chunk_plans.WORDS_MARK) is not None  # locked: next time
        keys = [plan_key(it, fp, self.config) for it, fp, _, _ in todo] if cache is not None else []
        stored = cache.get_plans(keys) if cache is not None else {}
        fresh: dict[str, list[list[object]]] = {}
        for n, (it, fingerprint, description, examples) in enumerate(todo):
            chunks = chunks_from_plan(stored.get(keys[n])) if cache is not None else None
            if chunks is None:
                chunks = chunk_item(
                    it,
                    self.config,
                    self.embedder.count_tokens,
                    server_description=description,
                    server_context=several,
                    summarizer=self.summarizer,
                    examples=examples,
                )
                if cache is not None and chunk_plans.words_free(examples):  # a user's words never go to the cache
                    fresh[keys[n]] = [[c.text, c.embed_text, c.index] for c in chunks]
            memo = (fingerprint, chunks, chunks_digest(chunks))
            self._plans[it.key] = memo
            out[it.key] = (chunks, memo[2])
        if fresh and cache is not None:
            cache.put_plans(fresh)
        return {it.key: out[it.key] for it in items}

    def keyword_index(self, order: Sequence[ItemKey]) -> KeywordRows:
        """BM25 over the embedding texts (chunk plus its context: header, heading path, server) of the
        items in ``order``, scored per row of :meth:`matrix` (docs/selection.md's quality tables measure
        keywords over the context against chunk text alone). A recorded example kept as a vector only
        has no words: it is no document of the index and scores 0; a change adds and removes only the
        texts that changed (:class:`~contextsieve.selection.keyword_rows.KeywordDocs`)."""
        self.matrix(order)
        if self._bm25 is None or self._bm25[0] is not self._matrix:
            texts = [
                "" if c.embed_text.startswith(VECTOR_EXAMPLE) else c.embed_text  # no words: kept as a vector
                for k in order
                for c in self._items[k].chunks
            ]
            self._bm25 = (self._matrix, self._keyword_docs.rows(texts))
        return self._bm25[1]

    def server_profiles(self, order: Sequence[ItemKey]) -> tuple[np.ndarray, np.ndarray]:
        """Server profiles of the tools in ``order``: one vector per MCP server (``[S, D]``) of
        ``"<server>: <description>"`` and its tools' names in words (cut to the token window), and the
        profile row of each item position (``-1`` for rules and references). Embedded once per chunk
        matrix (the disk cache keeps the vectors); no servers give an empty matrix."""
        self.matrix(order)
        if self._profiles is None or self._profiles[0] is not self._matrix:
            servers: dict[str, list[str]] = {}
            of_item = np.full(len(order), -1, dtype=np.int64)
            for i, k in enumerate(order):
                if k.server:
                    names = servers.setdefault(k.server, [])
                    of_item[i] = list(servers).index(k.server)
                    names.append(split_identifier(k.name).lower())
            descriptions = dict(self._last[1])
            texts = [
                profile_text(
                    name, descriptions.get(name, ""), tools, self.config.max_tokens, self.embedder.count_tokens
                )
                for name, tools in servers.items()
            ]
            vectors = self._embed_chunks(texts) if texts else np.zeros((0, 1), dtype=np.float32)
            self._profiles = (self._matrix, vectors, of_item)
        return self._profiles[1], self._profiles[2]

    def relation_graph(self, order: Sequence[ItemKey], pooling: RelationPooling, floor: float) -> RelationGraph:
        """The item relationship graph of the items in ``order`` (positions as in :meth:`matrix`), built
        once per chunk matrix, pooling and floor, and rebuilt only after the items change."""
        self.matrix(order)
        key = (pooling, float(floor))
        got = self._graphs.get(key)
        if got is None or got[0] is not self._matrix:
            assert self._matrix is not None
            _, mat, owner = self._matrix
            got = (self._matrix, RelationGraph(mat, owner, len(self._matrix[0]), pooling=pooling, floor=floor))
            self._graphs = {k: v for k, v in self._graphs.items() if v[0] is self._matrix}  # drop stale graphs
            self._graphs[key] = got
        return got[1]

    def example_rows(self, order: Sequence[ItemKey]) -> tuple[np.ndarray, np.ndarray]:
        """Which chunk rows (among every chunk: :class:`ChunkLayout`) are recorded example requests
        (bool ``[F]``; all false when nothing is recorded) and, for those rows in order, their
        :attr:`~contextsieve.agent.example_records.Example.hash` (an object array). Kept until the matrix changes."""
        self.matrix(order)
        assert self._matrix is not None
        memo = self._example_rows
        if memo is not None and memo[0] is self._matrix:
            return memo[1], memo[2]
        mask = np.zeros(self.layout(order).owner.size, dtype=bool)
        hashes: list[str] = []
        if any(self.examples.values()):
            for row, _, e in self._example_records(self._matrix[0]):
                mask[row] = True
                hashes.append(e.hash if e is not None else "")
        self._example_rows = (self._matrix, mask, np.array(hashes, dtype=object))
        return mask, self._example_rows[2]

    def recorded_requests(self, order: Sequence[ItemKey]) -> RecordedRequests | None:
        """The recorded examples and misses of the tools in ``order`` as a search reads them, each request
        once (:class:`~contextsieve.selection.recorded_requests.RecordedRequests`); ``None`` when nothing
        is recorded. Kept until the matrix or the records change."""
        mask, _ = self.example_rows(order)
        if not self.misses and not mask.any():
            return None  # the common case: nothing recorded, nothing to build per request
        memo = self._recorded
        if memo is not None and memo[0] is self._matrix and memo[1] is self.misses:
            return memo[2]
        assert self._matrix is not None
        records = self._example_records(self._matrix[0])
        got = RecordedRequests.gather(records, np.flatnonzero(mask), self.misses, order, self._embed_chunks)
        self._recorded = (self._matrix, self.misses, got)
        return got

    def _example_records(self, order: Sequence[ItemKey]) -> Iterable[tuple[int, Chunk, Example | None]]:
        """Each example chunk of the items in ``order`` (the matrix's order): its row among every chunk,
        the chunk and its record (``None`` for an example chunk without one), in row order."""
        row = 0
        for k in order:
            chunks = self._items[k].chunks
            shots = iter(self.examples.get(k, ())[: self.config.max_examples])
            for j, c in enumerate(chunks):
                if is_example_chunk(c):
                    yield row + j, c, next(shots, None)
            row += len(chunks)

    def layout(self, order: Sequence[ItemKey]) -> ChunkLayout:
        """Where the rows of :meth:`matrix` (the items' own chunks) sit among every chunk of the items in
        ``order`` (a tool's recorded examples included): :class:`ChunkLayout`. Kept until the matrix changes."""
        self.matrix(order)
        assert self._matrix is not None
        memo = self._layout
        if memo is None or memo[0] is not self._matrix:
            counts = np.array([len(self._items[k].chunks) for k in self._matrix[0]], np.int64)
            own = np.array([self._items[k].vectors.shape[0] for k in self._matrix[0]], np.int64)
            first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if counts.size else counts
            owner = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
            base = np.flatnonzero(np.arange(owner.size) - first[owner] < own[owner])
            memo = self._layout = (self._matrix, ChunkLayout(base, owner, first))
        return memo[1]

    def matrix(self, order: Sequence[ItemKey]) -> tuple[np.ndarray, np.ndarray]:
        """The vectors of the own chunks of the items in ``order`` (``[N, D]``; a tool's recorded
        examples are no rows of it: see :meth:`recorded_requests`) and each row's position in ``order``."""
        if self._matrix is None or (self._matrix[0] is not order and self._matrix[0] != list(order)):
            order = order if isinstance(order, list) else list(order)  # kept: the same list object compares in O(1)
            vecs = [self._items[k].vectors for k in order]
            owner = [np.full(len(v), i, dtype=np.int64) for i, v in enumerate(vecs)]
            dim = next((v.shape[1] for v in vecs if v.size), 0)
            mat = np.ascontiguousarray(np.vstack(vecs)) if vecs and dim else np.zeros((0, max(dim, 1)), np.float32)
            self._matrix = (order, mat, np.concatenate(owner) if owner else np.zeros(0, np.int64))
            at = 0
            for k, v in zip(order, vecs):  # each item's vectors become its rows of the matrix: kept once
                item = self._items[k]
                self._items[k] = ItemChunks(item.chunks, mat[at : at + len(v)], item.digest)
                at += len(v)
        return self._matrix[1], self._matrix[2]
